"""Shared pieces of the CLI: settings, errors, consoles and loading a user's JobManager.

Error policy: a failure is one line on stderr (`jobledger: error: ...`) and a non-zero
exit code: 2 for bad input (usage, a bad `--payload`, a payload the type rejects), 124
for `jobs wait --timeout` running out (as timeout(1) does), 1 for everything else (not
found, a job that did not complete, an unhealthy database). No traceback unless
`--debug`. docs/reference/cli.md lists them. Every message goes through `error_line`, which masks
passwords and makes control characters visible (see `_text.py`).
"""

from __future__ import annotations

import asyncio
import getpass
import importlib
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import click
from rich.console import Console

from jobledger._core.audit import audit_target
from jobledger._observe.read_model import ReadModel
from jobledger._runtime.manager import JobManager
from jobledger._storage.open import is_postgres_url, redact
from jobledger.cli._text import visible

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_TIMED_OUT",
    "CliError",
    "Settings",
    "error_line",
    "fail",
    "load_manager",
    "out",
    "parse_json_option",
    "reader",
]

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_TIMED_OUT = 124
DEFAULT_DB = "jobledger.db"
_LINE_BREAK = re.compile(r"\s*\n\s*")


def error_line(message: str, *, prefix: str = "error") -> None:
    """`jobledger: error: MESSAGE` on stderr, safe to show (no password, no controls)."""
    one_line = _LINE_BREAK.sub(" ", message.strip())  # a driver's message may span lines
    click.echo(f"jobledger: {prefix}: {visible(redact(one_line))}", err=True)


class CliError(Exception):
    """One line on stderr and `exit_code` (handled by the `jobledger` group)."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def show(self) -> None:
        error_line(self.message)


def fail(message: str, exit_code: int = EXIT_FAILED) -> NoReturn:
    raise CliError(message, exit_code)


@dataclass(slots=True)
class Settings:
    db: str
    db_explicit: bool  # --db or $JOBLEDGER_DB was given
    debug: bool


def out(*, stderr: bool = False) -> Console:
    """A rich console; wide when not a terminal, so ids are never folded in pipes."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 200
    return Console(file=stream, width=width, soft_wrap=False, highlight=False)


def reader(settings: Settings) -> ReadModel:
    """The read model over the CLI's database, a file or a `postgresql://` URL (opened
    read-only: never creates the file or the schema, never migrates)."""
    if not is_postgres_url(settings.db) and not os.path.exists(settings.db):
        fail(
            f"no jobledger database at {settings.db} (pass --db PATH or set JOBLEDGER_DB)",
            EXIT_FAILED,
        )
    return ReadModel(settings.db)


def cli_actor() -> str:
    """Who the audit log says acted from this shell: `cli:USER`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no $USER (a bare container)
        user = f"uid{os.getuid()}"
    return f"cli:{user}"[:200]


def record_audit(
    settings: Settings,
    action: str,
    target: str,
    detail: dict[str, Any] | None = None,
    manager: JobManager | None = None,
) -> None:
    """Write an audit entry for an action the CLI just took (DESIGN.md §8.9): the same
    log the console's actions go to, under `cli:USER`."""
    own = manager is None
    m = JobManager(settings.db) if manager is None else manager
    try:
        m.record_audit(cli_actor(), action, audit_target(target), detail)
    finally:
        if own:
            asyncio.run(m.stop())


def _no_constant(name: str) -> Any:
    # Python's json reads NaN/Infinity, which JSON has not: another reader would choke.
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


def parse_json_option(name: str, text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as exc:
        fail(f"{name} is not valid JSON: {exc}", EXIT_BAD_INPUT)


def load_manager(spec: str, settings: Settings) -> JobManager:
    """Import `MODULE:ATTR` and return the JobManager there.

    ATTR may be dotted, and may name a zero-argument callable that returns a manager (a
    factory). When `--db`/`$JOBLEDGER_DB` was given it is exported as `JOBLEDGER_DB`
    before the import, so an app that builds its manager with
    `JobManager(os.environ.get("JOBLEDGER_DB", "app.db"))` follows it.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        fail(f"expected MODULE:ATTR (e.g. myapp.jobs:jobs), got {spec!r}", EXIT_BAD_INPUT)
    if settings.db_explicit:
        os.environ["JOBLEDGER_DB"] = settings.db
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            fail(f"cannot import {module_name!r}: no such module", EXIT_BAD_INPUT)
        raise
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            fail(f"{module_name!r} has no attribute {attr!r}", EXIT_BAD_INPUT)
    if not isinstance(target, JobManager) and callable(target):
        target = target()
    if not isinstance(target, JobManager):
        fail(f"{spec} is a {type(target).__name__}, not a jobledger JobManager", EXIT_BAD_INPUT)
    if settings.db_explicit and os.path.abspath(target.path) != os.path.abspath(settings.db):
        error_line(f"{spec} uses the database {target.path}, not {settings.db}", prefix="warning")
    return target
