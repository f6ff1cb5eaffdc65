"""kill -9 of a worker that (as far as the survivor can tell) ran on another host.

On one host a dead pid frees a worker's rows at once; that path runs on PostgreSQL in
`tests/recovery/test_crash.py` and `test_processes.py` (`[postgres]`). Across hosts the
only evidence is the heartbeat: here the dead worker's row is given another hostname
after the kill, so its pid means nothing, and the survivor (a tiny `worker_timeout`) must
leave its rows alone until the last heartbeat is older than that timeout, then rescue
every row by its type's strategy. The survivor runs on a `FakeClock`, so "older than the
timeout" is decided by the test, not by how fast a loaded machine starts a manager.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import db_rows
from tests.postgres import ONLY_POSTGRES
from tests.recovery import arun, read_markers, spawn, status_counts, wait_for, wait_for_async
from tests.recovery.worker_proc import ABANDON, RETRY, SINGLETON

pytestmark = ONLY_POSTGRES

PER_TYPE = 20
WORKER_TIMEOUT = 2.0  # seconds: the survivor's judgement of a silent worker
RESCUE_BOUND = 15.0  # real seconds for the rescue and re-runs, generous for a loaded machine


def test_a_silent_worker_on_another_host_is_rescued_after_its_heartbeat_times_out(
    db: str, tmp_path: Path
) -> None:
    producer = jl.JobManager(db)  # never started: its rows are ordinary work
    enqueued = {
        t.name: [h.id for h in producer.enqueue_many(t, list(range(PER_TYPE)))]
        for t in (ABANDON, RETRY, SINGLETON)
    }
    arun(producer.stop)
    total = 3 * PER_TYPE

    # The child leads (it is alone); a short lease lets the survivor lead soon after.
    child = spawn(
        db, "block", tmp_path, "w1",
        "--concurrency", str(PER_TYPE), "--heartbeat", "0.1", "--leader-ttl", "1.0",
    )  # fmt: skip
    try:
        dead_id = child.wait_started()
        wait_for(
            lambda: (
                status_counts(db).get("running") == total
                and len(read_markers(child.markers)) == total
            ),
            what=f"{total} running jobs in the child",
        )
    finally:
        child.kill9()
    # From here on the survivor's clock decides what "old" means: a fake one, started
    # now, with the dead worker's last heartbeat stamped at its start.
    clock = FakeClock(datetime.now(UTC))
    last_beat = round(clock.time() * 1000)
    due = last_beat + int(WORKER_TIMEOUT * 1000)
    db_rows(
        db,
        "UPDATE workers SET hostname = 'elsewhere.invalid', heartbeat_at = ? WHERE id = ?",
        (last_beat, dead_id),
    )

    async def survive() -> dict[str, jl.JobSnapshot]:
        jobs = jl.JobManager(
            db, clock=clock, startup_delay=0, worker_timeout=WORKER_TIMEOUT, poll_interval=0.02
        )

        @jobs.handler(ABANDON, recovery="abandon", concurrency=PER_TYPE)
        async def abandon(ctx: jl.JobContext[int]) -> None:
            raise AssertionError("an abandoned job never runs again")

        @jobs.handler(RETRY, recovery="retry", concurrency=PER_TYPE)
        async def retry(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        @jobs.handler(SINGLETON, recovery="singleton", concurrency=PER_TYPE)
        async def singleton(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        async with jobs:
            await jobs.recovery_done
            # Startup recovery has run, the survivor leads within a lease period, and
            # its rescue tick runs every second; while the heartbeat is younger than the
            # timeout the worker may be alive for all anyone knows: nothing is touched.
            await asyncio.sleep(0.1)
            await clock.advance_async(WORKER_TIMEOUT - 0.5)
            await asyncio.sleep(0.1)
            assert jobs.is_leader
            assert status_counts(db) == {"running": total}
            assert db_rows(db, "SELECT id FROM workers WHERE id = ?", (dead_id,)) == [(dead_id,)]
            # Past the timeout: the next tick rescues by strategy.
            await clock.advance_async(1.5)
            await wait_for_async(
                lambda: not status_counts(db, "status IN ('pending', 'delayed', 'running')"),
                timeout=RESCUE_BOUND,
                what="the rescue and the re-runs",
            )
            return {s.id: s for s in jobs.list(limit=1000)}

    snaps = arun(survive)

    assert set(snaps) == {i for ids in enqueued.values() for i in ids}
    abandoned = [snaps[i] for i in enqueued[ABANDON.name]]
    assert {s.status for s in abandoned} == {"cancelled"}
    for snap in abandoned:
        assert snap.finished_at is not None
        assert snap.finished_at.timestamp() * 1000 > due, (snap.finished_at, due)
    for job_id in enqueued[RETRY.name]:
        snap = snaps[job_id]
        assert (snap.status, snap.output) == ("completed", snap.payload)
    singles = sorted(
        (snaps[i] for i in enqueued[SINGLETON.name]), key=lambda s: (s.created_at, s.id)
    )
    assert singles[-1].status == "completed"
    assert {s.status for s in singles[:-1]} == {"cancelled"}
    assert db_rows(db, "SELECT id FROM workers WHERE id = ?", (dead_id,)) == []
