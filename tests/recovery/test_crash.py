"""kill -9 of a worker process, and what the next worker makes of its rows (on both
backends: on one host the dead pid frees the rows at once; `tests/postgres` shows the
heartbeat path of a worker on another host)."""

from __future__ import annotations

from pathlib import Path

import jobledger as jl
from tests.conftest import db_rows
from tests.recovery import arun, read_markers, spawn, status_counts, wait_for, wait_for_async
from tests.recovery.worker_proc import ABANDON, LOCK_NAME, LOCKER, RETRY, SINGLETON

PER_TYPE = 200


def _live(db: str) -> int:
    counts = status_counts(db)
    return sum(counts.get(s, 0) for s in ("pending", "delayed", "running"))


def _workers(db: str) -> list[str]:
    return [r[0] for r in db_rows(db, "SELECT id FROM workers")]


def test_kill9_then_restart_recovers_every_row_by_its_strategy(db: str, tmp_path: Path) -> None:
    producer = jl.JobManager(db)  # never started: a producer, its rows are ordinary work
    enqueued = {
        t.name: [h.id for h in producer.enqueue_many(t, list(range(PER_TYPE)))]
        for t in (ABANDON, RETRY, SINGLETON)
    }
    arun(producer.stop)
    total = 3 * PER_TYPE

    child = spawn(db, "block", tmp_path, "w1", "--concurrency", str(PER_TYPE))
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

    # The crash itself changed nothing: the rows still say running, owned by the corpse.
    assert status_counts(db) == {"running": total}
    runs = read_markers(child.markers)
    assert sorted(r[1] for r in runs) == sorted(i for ids in enqueued.values() for i in ids)

    abandon_runs: list[str] = []

    async def restart() -> dict[str, jl.JobSnapshot]:
        jobs = jl.JobManager(db, startup_delay=0, global_max_concurrency=1000, poll_interval=0.02)

        @jobs.handler(ABANDON, recovery="abandon", concurrency=PER_TYPE)
        async def abandon(ctx: jl.JobContext[int]) -> None:
            abandon_runs.append(ctx.job_id)

        @jobs.handler(RETRY, recovery="retry", concurrency=PER_TYPE)
        async def retry(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        @jobs.handler(SINGLETON, recovery="singleton", concurrency=PER_TYPE)
        async def singleton(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        async with jobs:
            await jobs.recovery_done
            await wait_for_async(lambda: _live(db) == 0, what="every row to settle")
            return {s.id: s for s in jobs.list(limit=1000)}

    snaps = arun(restart)

    assert len(snaps) == total, "every enqueued job is accounted for"
    assert set(snaps) == {i for ids in enqueued.values() for i in ids}
    for job_id in enqueued[ABANDON.name]:
        snap = snaps[job_id]
        assert snap.status == "cancelled"
        assert snap.error is not None
        assert snap.error.code == "JOB_CANCELLED"
    assert abandon_runs == []
    for job_id in enqueued[RETRY.name]:
        assert snaps[job_id].status == "completed"
        assert snaps[job_id].output == snaps[job_id].payload
    singles = sorted(
        (snaps[i] for i in enqueued[SINGLETON.name]), key=lambda s: (s.created_at, s.id)
    )
    newest, older = singles[-1], singles[:-1]
    assert newest.id == enqueued[SINGLETON.name][-1]
    assert newest.status == "completed"
    assert {s.status for s in older} == {"cancelled"}
    assert dead_id not in _workers(db), "the dead worker's row is gone once recovered"


def test_a_dead_workers_durable_lock_becomes_free(db: str, tmp_path: Path) -> None:
    producer = jl.JobManager(db)
    holder = producer.enqueue(LOCKER, 1)
    arun(producer.stop)

    child = spawn(db, "block", tmp_path, "w1", "--concurrency", "1")
    try:
        child.wait_started()
        wait_for(
            lambda: any(r[3] == "locked" for r in read_markers(child.markers)),
            what="the child to hold the lock",
        )
    finally:
        child.kill9()

    assert db_rows(db, "SELECT job_id FROM locks WHERE name = ?", (LOCK_NAME,)) == [(holder.id,)]

    taken: list[str] = []
    other = jl.JobType("rec.other", int)

    async def restart() -> tuple[jl.JobSnapshot, jl.JobSnapshot | None]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(LOCKER, recovery="abandon")
        async def locker(ctx: jl.JobContext[int]) -> None:
            raise AssertionError("an abandoned job must not run again")

        @jobs.handler(other, recovery="retry")
        async def take(ctx: jl.JobContext[int]) -> str:
            async with ctx.lock(LOCK_NAME, timeout=10.0):
                taken.append(ctx.job_id)
            return "had it"

        async with jobs:
            await jobs.recovery_done
            h = jobs.enqueue(other, 2)
            snap = await h.finished
            return snap, jobs.get(holder.id)

    snap, old = arun(restart)
    assert snap.status == "completed", snap.error
    assert taken == [snap.id]
    assert old is not None
    assert old.status == "cancelled"
