"""A claim whose handler is about to start after a stall longer than `worker_timeout` is
checked against its row first: rescued meanwhile (the chaos run's finding 3 in
docs/reliability.md: a frozen worker ran, on SIGCONT, the jobs it had claimed just before
the freeze, which another worker was running by then), it is not run here."""

from __future__ import annotations

import asyncio

import jobledger as jl
from jobledger._storage.interface import ClaimedJob, ClaimResult
from tests.conftest import db_rows, sql_for
from tests.recovery import arun

T = jl.JobType("stale.t", int)


def test_a_stale_claim_that_was_rescued_is_not_run(db: str) -> None:
    ran: list[int] = []

    async def body() -> None:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, worker_timeout=5.0)

        @jobs.handler(T, recovery="retry")
        async def run(ctx: jl.JobContext[int]) -> None:
            ran.append(ctx.payload)

        async with jobs:
            await jobs.recovery_done
            h = jobs.enqueue(T, 7, delay=3600)  # delayed: the engine does not claim it
            # Claimed by this worker 10 s ago, then rescued and taken by another worker.
            db_rows(
                db,
                sql_for(db, "UPDATE jobs SET status = 'running', worker_id = 'other' WHERE id = ?"),
                (h.id,),
            )
            engine = jobs._engine
            now = engine.now_ms()
            stale = ClaimedJob(
                h.id, T.name, T.name, 0, "7", 0, 3, None, "{}", None, None, now, now - 10_000
            )
            qu = engine.ensure_queue(T.name, T.name)
            assert qu is not None
            engine._take(qu, ClaimResult([stale], False), 10)
            await asyncio.sleep(0.2)
            assert h.id not in engine.inflight
            assert qu.running == 0

    arun(body)
    assert ran == [], "a rescued claim must not run in the stalled worker"


def test_a_stale_claim_still_ours_runs(db: str) -> None:
    ran: list[int] = []

    async def body() -> str:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, worker_timeout=5.0)

        @jobs.handler(T, recovery="retry")
        async def run(ctx: jl.JobContext[int]) -> None:
            ran.append(ctx.payload)

        async with jobs:
            await jobs.recovery_done
            h = jobs.enqueue(T, 8, delay=3600)
            db_rows(
                db,
                sql_for(db, "UPDATE jobs SET status = 'running', worker_id = ? WHERE id = ?"),
                (jobs.worker_id, h.id),
            )
            engine = jobs._engine
            now = engine.now_ms()
            stale = ClaimedJob(
                h.id, T.name, T.name, 0, "8", 0, 3, None, "{}", None, None, now, now - 10_000
            )
            qu = engine.ensure_queue(T.name, T.name)
            assert qu is not None
            engine._take(qu, ClaimResult([stale], False), 10)
            snap = await asyncio.wait_for(h.finished, 10.0)
            return str(snap.status)

    assert arun(body) == "completed"
    assert ran == [8]
