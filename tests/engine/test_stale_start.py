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


def _stale_claim(db: str, owner: str | None) -> tuple[list[int], str | None]:
    """Hand the engine a claim made 10 s ago of a row now running under `owner` (None:
    this worker); returns what the handler ran and the job's final status (None: it
    did not finish within 0.5 s)."""
    ran: list[int] = []

    async def body() -> str | None:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, worker_timeout=5.0)

        @jobs.handler(T, recovery="retry")
        async def run(ctx: jl.JobContext[int]) -> None:
            ran.append(ctx.payload)

        async with jobs:
            await jobs.recovery_done
            h = jobs.enqueue(T, 7, delay=3600)  # delayed: the engine does not claim it
            db_rows(
                db,
                sql_for(db, "UPDATE jobs SET status = 'running', worker_id = ? WHERE id = ?"),
                (owner or jobs.worker_id, h.id),
            )
            engine = jobs._engine
            now = engine.now_ms()
            claim = ClaimedJob(
                h.id, T.name, T.name, 0, "7", 0, 3, None, "{}", None, None, now, now - 10_000
            )
            qu = engine.ensure_queue(T.name, T.name)
            assert qu is not None
            engine._take(qu, ClaimResult([claim], False), 10)
            try:
                snap = await asyncio.wait_for(h.finished, 0.5)
            except TimeoutError:
                assert h.id not in engine.inflight
                assert qu.running == 0
                return None
            return str(snap.status)

    return ran, arun(body)


def test_a_stale_claim_that_was_rescued_is_not_run(db: str) -> None:
    ran, status = _stale_claim(db, "other")
    assert (ran, status) == ([], None), "a rescued claim must not run in the stalled worker"


def test_a_stale_claim_still_ours_runs(db: str) -> None:
    assert _stale_claim(db, None) == ([7], "completed")
