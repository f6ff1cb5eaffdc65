"""A database file deleted or replaced under a running worker is noticed: the worker logs
one ERROR, and `doctor` fails naming the process. A `--db` in a missing directory is
refused instead of created."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, jobledger, spawn

WAIT = 30.0
GONE = "was deleted or replaced; this worker is writing to an unlinked file"

APP = """
import os

import jobledger as jl

jobs = jl.JobManager(os.environ["JOBLEDGER_DB"], startup_delay=0, heartbeat_interval=0.05)


@jobs.handler(jl.JobType("t", dict), recovery="retry")
async def t(ctx: jl.JobContext[dict]) -> None:
    return None
"""

needs_proc = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="doctor finds unlinked files through /proc"
)


class Lines:
    """A child's stderr, line by line, read on a thread so a wait can have a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        stream = proc.stderr

        def pump() -> None:
            for line in stream:
                self._queue.put(line)
            self._queue.put(None)

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()

    def wait_for(self, text: str) -> str:
        deadline = time.monotonic() + WAIT
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} in:\n{''.join(self.seen)}")

    def join(self) -> None:
        self._thread.join(WAIT)

    def rest(self) -> str:
        self.join()
        while (line := self._queue.get_nowait()) is not None:
            self.seen.append(line)
        return "".join(self.seen)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Lines, Path]]:
    (tmp_path / "goneapp.py").write_text(APP)
    db = tmp_path / "app.db"
    proc = spawn("--db", str(db), "worker", "goneapp:jobs", cwd=tmp_path)
    lines = Lines(proc)
    try:
        lines.wait_for("jobledger worker ")
        yield proc, lines, db
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        lines.join()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@needs_proc
def test_a_deleted_file_is_reported_by_the_worker_once_and_by_doctor(
    worker: tuple[subprocess.Popen[str], Lines, Path],
) -> None:
    proc, lines, db = worker
    cwd = db.parent
    assert jobledger("--db", str(db), "doctor", cwd=cwd).returncode == 0

    os.unlink(db)
    error = lines.wait_for(GONE)
    assert " ERROR " in error
    assert str(db) in error

    # Gone: doctor says who still writes to it, rather than "no database there".
    gone = jobledger("--db", str(db), "doctor", cwd=cwd)
    assert gone.returncode == 1, gone.stdout + gone.stderr
    assert "FAIL" in gone.stdout
    assert f"process(es) {proc.pid} had it open" in gone.stdout
    as_json = json.loads(jobledger("--db", str(db), "doctor", "--json", cwd=cwd).stdout)
    assert (as_json["ok"], as_json["unlinked_holders"]) == (False, [proc.pid])

    # Replaced: a fresh database at the path looks healthy, but the worker is elsewhere.
    enqueued = jobledger("--db", str(db), "jobs", "enqueue", "t", "--allow-unknown-type", cwd=cwd)
    assert enqueued.returncode == 0, enqueued.stderr
    replaced = jobledger("--db", str(db), "doctor", cwd=cwd)
    assert replaced.returncode == 1, replaced.stdout + replaced.stderr
    assert f"processes writing to a deleted or replaced copy: {proc.pid}" in replaced.stdout
    as_json = json.loads(jobledger("--db", str(db), "doctor", "--json", cwd=cwd).stdout)
    assert as_json["unlinked_holders"] == [proc.pid]
    assert any("deleted or replaced" in p for p in as_json["problems"])

    # The doctor runs above took many heartbeats (every 0.05 s): still one ERROR line.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(WAIT) == 0
    assert lines.rest().count(GONE) == 1


def test_a_replaced_file_is_reported_by_the_worker(
    worker: tuple[subprocess.Popen[str], Lines, Path],
) -> None:
    _, lines, db = worker
    fresh = db.with_name("fresh.db")
    enqueued = jobledger(
        "--db", str(fresh), "jobs", "enqueue", "t", "--allow-unknown-type", cwd=db.parent
    )
    assert enqueued.returncode == 0, enqueued.stderr
    os.replace(fresh, db)  # a restore moved into place
    assert str(db) in lines.wait_for(GONE)


def test_a_db_in_a_missing_directory_is_refused_not_created(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    for args in (("jobs", "enqueue", "t"), ("worker", f"{cli.module}:jobs"), ("queues",)):
        result = cli("--db", str(missing / "app.db"), *args, db=False)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(
            f"jobledger: error: Invalid value for '--db': the directory {missing} does not exist"
        )
    monkeypatch.setenv("JOBLEDGER_DB", str(missing / "app.db"))
    from_env = cli("jobs", "enqueue", "t", db=False)
    assert from_env.exit_code == 2
    assert "Invalid value for '$JOBLEDGER_DB'" in from_env.stderr
    assert not (tmp_path / "no").exists()
