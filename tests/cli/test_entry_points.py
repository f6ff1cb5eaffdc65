"""How the command is reached and how it ends: `python -m jobledger`, a group without
its subcommand, the exit code of `jobs wait --timeout`, and one date format in tables."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import jobledger as jl
from jobledger.cli import main
from tests.cli.conftest import Cli, cli_env, jobledger

# Groups that need a subcommand (`queues` alone lists the queues: tests/cli/test_queues.py).
GROUPS = [
    (),
    *[
        (name,)
        for name, command in main.commands.items()
        if isinstance(command, click.Group) and not command.invoke_without_command
    ],
]


def test_python_dash_m_jobledger_is_the_command(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobledger", *args],
            cwd=tmp_path,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    version = run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("jobledger, version ")
    missing = run("--db", "none.db", "jobs", "list")
    assert missing.returncode == 1
    assert "no jobledger database at none.db" in missing.stderr


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: " ".join(("jobledger", *g)))
def test_a_group_without_a_subcommand_prints_its_usage_and_exits_2(
    tmp_path: Path, group: tuple[str, ...]
) -> None:
    assert {("jobs",), ("schedules",)} <= set(GROUPS)
    result = jobledger(*group, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    path = " ".join(("jobledger", *group))
    assert result.stderr.startswith(f"Usage: {path} [OPTIONS] COMMAND [ARGS]...\n")
    assert "\nCommands:\n" in result.stderr
    assert "Error:" not in result.stderr  # the usage, not a usage error


def test_jobs_wait_gives_a_timeout_its_own_exit_code(cli: Cli) -> None:
    waiting = cli("jobs", "enqueue", "math.add", "--allow-unknown-type").stdout.strip()
    timed_out = cli("jobs", "wait", waiting, "--timeout", "0.05", "--interval", "0.01")
    assert timed_out.exit_code == 124
    assert timed_out.stdout.strip() == f"{waiting} pending"
    assert "timed out after 0.05s; the job is still pending" in timed_out.stderr


STRICT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
DATE_LIKE = re.compile(r"\d{4}-\d\d-\d\d\S*")


def test_jobs_list_schedules_list_queues_and_doctor_show_times_in_one_format(cli: Cli) -> None:
    app = cli.load()
    jobs: jl.JobManager = app.jobs
    jobs.enqueue(app.ADD, app.Add(a=1, b=2))
    sid = jobs.register_job_schedule(app.ADD, app.Add(a=3, b=4), trigger=jl.Interval(3600))
    assert cli("schedules", "run-now", sid, "--app", cli.app).exit_code == 0  # a LAST RUN
    shown: list[str] = []
    for args in (("jobs", "list"), ("schedules", "list"), ("queues",), ("doctor",)):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        shown += DATE_LIKE.findall(result.stdout)
    # jobs list: CREATED (two jobs); schedules list: LAST RUN; queues: OLDEST PENDING.
    assert len(shown) >= 4, shown
    assert [t for t in shown if not STRICT.fullmatch(t)] == []
