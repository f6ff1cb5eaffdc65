"""Exactly-once effects across real processes (DESIGN §8.13): worker A enters the
handler and is stopped (SIGSTOP) before its transaction, past `worker_timeout`; B
rescues the job and completes it through `ctx.transaction()`, writing one ledger row.
A resumes: its transaction raises `JobClaimLost` and commits nothing. The ledger holds
one row, the job one completion, B's. Both backends."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import jobledger as jl
from tests.conftest import db_rows
from tests.recovery import arun, read_markers, spawn, status_counts, wait_for

LEDGER = jl.JobType("rec.ledger", int)
FAST = ("--worker-timeout", "1.0", "--heartbeat", "0.2", "--leader-ttl", "1.0")


def _marked(path: Path, job_id: str, what: str) -> bool:
    return any(m[1] == job_id and m[3] == what for m in read_markers(path))


@pytest.mark.parametrize("mode", ["ledger", "ledger_async"])  # `with`, `async with`
def test_a_stopped_worker_resumed_after_its_rescue_writes_nothing(
    db: str, tmp_path: Path, mode: str
) -> None:
    producer = jl.JobManager(db)
    with producer.write_tx() as tx:
        tx.execute("CREATE TABLE ledger (order_id INTEGER, worker_id TEXT)")
    a = spawn(db, mode, tmp_path, "a", *FAST)
    b = None
    try:
        a_id = a.wait_started()
        job = producer.enqueue(LEDGER, 42).id
        wait_for(lambda: _marked(a.markers, job, f"enter:{a_id}"), what="A in the handler")
        os.kill(a.pid, signal.SIGSTOP)
        b = spawn(db, mode, tmp_path, "b", *FAST)
        b_id = b.wait_started()
        # A is silent past worker_timeout: B rescues the job (retry) and runs it.
        wait_for(lambda: _marked(b.markers, job, f"enter:{b_id}"), what="B to rescue the job")
        Path(f"{b.markers}.go").touch()
        wait_for(lambda: _marked(b.markers, job, "committed"), what="B's commit")
        assert db_rows(db, "SELECT order_id, worker_id FROM ledger") == [(42, b_id)]

        Path(f"{a.markers}.go").touch()  # A goes on to its transaction when resumed
        os.kill(a.pid, signal.SIGCONT)
        wait_for(lambda: _marked(a.markers, job, "lost"), what="A's transaction to lose")
        assert not _marked(a.markers, job, "committed")
        assert db_rows(db, "SELECT order_id, worker_id FROM ledger") == [(42, b_id)]
        assert status_counts(db) == {"completed": 1}
        snap = producer.get(job)
        assert snap is not None
        assert snap.worker_id == b_id
        assert snap.output == b_id
        completions = [a for a in producer.attempts(job) if a.outcome == "completed"]
        assert [c.worker_id for c in completions] == [b_id]
    finally:
        for child in (a, b):
            if child is not None:
                if child.proc.poll() is None:
                    os.kill(child.pid, signal.SIGCONT)
                child.terminate()
        arun(producer.stop)
