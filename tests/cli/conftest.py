"""Helpers for CLI tests: an importable app module in a temp dir, and the CLI as a process."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner, Result

APP_SOURCE = textwrap.dedent(
    '''
    """A tiny app for the CLI tests."""
    import asyncio
    import os

    import pydantic

    import jobledger as jl


    class Add(pydantic.BaseModel):
        a: int
        b: int


    ADD = jl.JobType("math.add", Add)
    BOOM = jl.JobType("math.boom", dict)
    jobs = jl.JobManager(os.environ.get("JOBLEDGER_DB", "unset.db"), startup_delay=0)


    @jobs.handler(ADD, recovery="retry")
    async def add(ctx: jl.JobContext[Add]) -> int:
        for i in range(4):
            await ctx.report_progress(25 * (i + 1), f"step {i + 1}/4")
            await asyncio.sleep(0.02)
        return ctx.payload.a + ctx.payload.b


    @jobs.handler(BOOM, recovery="retry")
    async def boom(ctx: jl.JobContext[dict]) -> None:
        ctx.logger.warning("about to explode")
        raise jl.PermanentError("it exploded")


    def make() -> jl.JobManager:
        return jobs
    '''
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A directory with `cliapp.py` (the app) where the CLI runs."""
    (tmp_path / "cliapp.py").write_text(APP_SOURCE)
    return tmp_path


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("JOBLEDGER_DB", None)
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    return env


def jobledger(
    *args: str, cwd: Path, timeout: float = 60.0, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `jobledger ARGS` as a child process (python -m jobledger.cli)."""
    proc = subprocess.run(
        [sys.executable, "-m", "jobledger.cli", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"jobledger {' '.join(args)} exited {proc.returncode}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc


def spawn(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", *args],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Cli:
    """The `jobledger` group run in-process (click's CliRunner) inside `app_dir`."""

    def __init__(self, app_dir: Path, module: str) -> None:
        self.dir = app_dir
        self.module = module
        self.db = str(app_dir / "app.db")
        self.app = f"{module}:jobs"

    def __call__(self, *args: str, db: bool = True) -> Result:
        from jobledger.cli import main

        argv = ["--db", self.db, *args] if db else list(args)
        return CliRunner().invoke(main, argv, catch_exceptions=False)

    def load(self) -> ModuleType:
        """The app module, imported the way the CLI imports it."""
        os.environ["JOBLEDGER_DB"] = self.db
        return importlib.import_module(self.module)


@pytest.fixture
def cli(app_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    # A module name of its own per test: the in-process CLI imports it into sys.modules.
    module = f"cliapp_{uuid.uuid4().hex[:12]}"
    (app_dir / f"{module}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(app_dir)
    monkeypatch.setattr(sys, "path", [str(app_dir), *sys.path])
    # The CLI exports JOBLEDGER_DB for the app it imports; monkeypatch restores it after.
    monkeypatch.setenv("JOBLEDGER_DB", "")
    monkeypatch.delenv("JOBLEDGER_DB")
    return Cli(app_dir, module)


@pytest.fixture
def cli_on(db: str, app_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The `cli` fixture on the `db` fixture's database (a file, or a PostgreSQL schema)."""
    module = f"cliapp_{uuid.uuid4().hex[:12]}"
    (app_dir / f"{module}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(app_dir)
    monkeypatch.setattr(sys, "path", [str(app_dir), *sys.path])
    monkeypatch.setenv("JOBLEDGER_DB", "")
    monkeypatch.delenv("JOBLEDGER_DB")
    cli = Cli(app_dir, module)
    cli.db = db
    return cli
