"""Lifecycle, crash-recovery, pause/drain and multi-process tests, with their helpers.

Child workers are real processes (`python -m tests.recovery.worker_proc`), killed with
SIGKILL where a test needs a crash. A child reports only through files (see
`worker_proc`), and the parent reads the job table directly, so nothing here trusts the
process under test to tell the truth about itself. Every wait is a short poll bounded by
a deadline; nothing sleeps for seconds. The database is a SQLite file or a PostgreSQL
URL (the `db` fixture); `spawn` passes either to the child as it is.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.conftest import db_rows

__all__ = [
    "DEADLINE",
    "Child",
    "arun",
    "read_markers",
    "spawn",
    "status_counts",
    "wait_for",
    "wait_for_async",
]

T = TypeVar("T")

DEADLINE = 30.0
STEP = 0.02
REPO = Path(__file__).resolve().parents[2]


def wait_for(
    pred: Callable[[], T | None], *, timeout: float = DEADLINE, what: str = "condition"
) -> T:
    """Poll `pred` every 20 ms until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(STEP)


async def wait_for_async(
    pred: Callable[[], T | None], *, timeout: float = DEADLINE, what: str = "condition"
) -> T:
    """`wait_for` for code on an event loop: the loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(STEP)


def arun(coro_fn: Callable[[], Awaitable[T]], *, timeout: float = 90.0) -> T:
    """Run an async test body with an overall bound."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(bounded())


def status_counts(db: str | os.PathLike[str], where: str = "1 = 1") -> dict[str, int]:
    """`{status: count}` read straight from the table (a SQLite file or a PostgreSQL
    schema), independent of any manager."""
    rows = db_rows(
        os.fspath(db), f"SELECT status, count(*) FROM jobs WHERE {where} GROUP BY status"
    )
    return {str(s): int(n) for s, n in rows}


def read_markers(path: str | os.PathLike[str]) -> list[tuple[str, str, int, str]]:
    """Lines `<type> <job id> <attempt> <extra>` a child appended, one per execution."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[tuple[str, str, int, str]] = []
    for line in p.read_text().splitlines():
        type_name, job_id, attempt, extra = line.split(" ")
        out.append((type_name, job_id, int(attempt), extra))
    return out


@dataclass
class Child:
    proc: subprocess.Popen[bytes]
    markers: Path
    status: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_status(self) -> tuple[str, bool, int] | None:
        """(worker id, is leader, running) once `start()` returned; None before."""
        try:
            text = self.status.read_text()
        except FileNotFoundError:
            return None
        first = text.splitlines()[0] if text else ""
        parts = first.split(" ")
        if len(parts) != 3:
            return None
        return parts[0], parts[1] == "1", int(parts[2])

    def wait_started(self, timeout: float = DEADLINE) -> str:
        status = wait_for(self._alive_status, timeout=timeout, what="the child to start")
        return status[0]

    def _alive_status(self) -> tuple[str, bool, int] | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"child exited with {self.proc.returncode}: {self.output()}")
        return self.read_status()

    def kill9(self) -> None:
        """SIGKILL, then reap: a zombie's pid still answers kill(pid, 0)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE)

    def terminate(self, timeout: float = DEADLINE) -> int:
        """SIGTERM and wait for the clean exit; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def output(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except FileNotFoundError:
            return ""


def spawn(
    db: str | os.PathLike[str],
    mode: str,
    workdir: Path,
    name: str,
    *args: str,
) -> Child:
    """Start `worker_proc` on `db` in `mode`; its files are `workdir/<name>.*`."""
    markers = workdir / f"{name}.markers"
    status = workdir / f"{name}.status"
    log = workdir / f"{name}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")) if p
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.recovery.worker_proc",
                os.fspath(db),
                mode,
                "--markers",
                str(markers),
                "--status",
                str(status),
                *args,
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Child(proc, markers, status, log)
