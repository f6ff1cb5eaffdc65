"""A stale attempt never releases a durable lock its rescuer holds (real processes).

Worker A holds `ctx.lock("shared-resource")` in job J and is stopped (SIGSTOP) past
`worker_timeout`; B rescues J and takes the lock. When A resumes, its stale run leaves
the lock block: the release is fenced on (worker, attempt) like every other write of a
rescued job, so B's lock stays and job K cannot take it until B lets go. Before the
fence, A's `DELETE FROM locks WHERE name = ? AND job_id = ?` deleted B's lock.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import jobledger as jl
from tests.conftest import db_rows
from tests.recovery import arun, read_markers, spawn, status_counts, wait_for

STALE = jl.JobType("rec.stale", int)
WAITER = jl.JobType("rec.waiter", int)
FAST = ("--worker-timeout", "1.0", "--heartbeat", "0.2", "--leader-ttl", "1.0")


def _marked(path: Path, job_id: str, what: str) -> bool:
    return any(m[1] == job_id and m[3] == what for m in read_markers(path))


def test_a_stale_attempts_release_never_frees_the_rescuers_lock(db: str, tmp_path: Path) -> None:
    a = spawn(db, "lock", tmp_path, "a", *FAST)
    b = None
    producer = jl.JobManager(db)
    try:
        a.wait_started()
        j = producer.enqueue(STALE, 1).id
        wait_for(lambda: _marked(a.markers, j, "locked"), what="A to hold the lock")
        os.kill(a.pid, signal.SIGSTOP)
        b = spawn(db, "lock", tmp_path, "b", *FAST)
        b_id = b.wait_started()
        # A is silent past worker_timeout: B leads, rescues J (retry) and takes the lock.
        wait_for(lambda: _marked(b.markers, j, "locked"), what="B to rescue J and lock")
        assert db_rows(db, "SELECT job_id, worker_id FROM locks") == [(j, b_id)]

        Path(f"{a.markers}.go").touch()  # A's stale run leaves its lock block on resume
        os.kill(a.pid, signal.SIGCONT)
        wait_for(lambda: _marked(a.markers, j, "released"), what="A's stale release")
        assert db_rows(db, "SELECT job_id, worker_id FROM locks") == [(j, b_id)]

        k = producer.enqueue(WAITER, 2).id
        # Absence over a window: K must not get the lock while B holds it. Both workers
        # poll for it every 20 ms, so 0.5 s is 25 tries each.
        time.sleep(0.5)
        assert not _marked(a.markers, k, "locked")
        assert not _marked(b.markers, k, "locked")
        Path(f"{b.markers}.go").touch()
        wait_for(
            lambda: _marked(a.markers, k, "locked") or _marked(b.markers, k, "locked"),
            what="K to take the lock once B released it",
        )
        wait_for(lambda: status_counts(db) == {"completed": 2}, what="J and K completed")
        # J completed once, by its rescuer: the stale attempt's outcome was fenced out.
        assert db_rows(db, "SELECT worker_id FROM jobs WHERE id = ?", (j,)) == [(b_id,)]
    finally:
        for child in (a, b):
            if child is not None:
                if child.proc.poll() is None:
                    os.kill(child.pid, signal.SIGCONT)
                child.terminate()
        arun(producer.stop)
