"""A claim whose handler is about to start after a stall longer than `worker_timeout` is
checked against its row first: rescued meanwhile (the chaos run's finding 3 in
docs/reliability.md: a frozen worker ran, on SIGCONT, the jobs it had claimed just before
the freeze, which another worker was running by then), it is not run here. The check is
made where the claim is taken (`Engine._start`) and again at the task's first step
(`Engine._run`): a freeze right after the claim falls between the two (bench/chaos.py,
SQLite seed 2, eighth session: 16 handlers under a global cap of 8)."""

from __future__ import annotations

import asyncio
import os
import socket
import time

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


def _stall_before_first_step(db: str, rescued: bool) -> tuple[list[int], str | None]:
    """A fresh claim, so `_start` runs it; then the loop stalls for longer than
    `worker_timeout` (0.5 s) before the task's first step, as a SIGSTOP right after the
    claim does, and meanwhile (`rescued`) another worker takes the row."""
    ran: list[int] = []

    async def body() -> str | None:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, worker_timeout=0.5)

        @jobs.handler(T, recovery="retry")
        async def run(ctx: jl.JobContext[int]) -> None:
            ran.append(ctx.payload)

        async with jobs:
            await jobs.recovery_done
            h = jobs.enqueue(T, 8, delay=3600)  # delayed: the engine does not claim it
            update = "UPDATE jobs SET status = 'running', worker_id = ? WHERE id = ?"
            db_rows(db, sql_for(db, update), (jobs.worker_id, h.id))
            engine = jobs._engine
            now = engine.now_ms()
            claim = ClaimedJob(h.id, T.name, T.name, 0, "8", 0, 3, None, "{}", None, None, now, now)
            qu = engine.ensure_queue(T.name, T.name)
            assert qu is not None
            engine._take(qu, ClaimResult([claim], False), 10)
            assert h.id in engine.inflight  # started: its task waits for its first step
            time.sleep(0.6)  # noqa: ASYNC251 (the stall itself, on the loop's thread)
            if rescued:
                # A live worker (its heartbeat an hour ahead, so no rescue tick takes its
                # row back within the test) has the job now.
                store = jobs._store
                store.register_worker("other", socket.gethostname(), os.getpid(), [], now)
                store.heartbeat("other", now + 3_600_000)
                db_rows(db, sql_for(db, update), ("other", h.id))
            try:
                snap = await asyncio.wait_for(h.finished, 0.5)
            except TimeoutError:
                await asyncio.sleep(0.1)  # its outcome's (fenced-out) finalize
                assert h.id not in engine.inflight
                assert qu.running == 0
                return None
            return str(snap.status)

    return ran, arun(body)


def test_a_claim_rescued_during_a_stall_before_its_first_step_is_not_run(db: str) -> None:
    ran, status = _stall_before_first_step(db, rescued=True)
    assert (ran, status) == ([], None), "a rescued claim must not run in the stalled worker"
    row = db_rows(db, sql_for(db, "SELECT status, worker_id FROM jobs"))[0]
    assert tuple(row) == ("running", "other")  # the rescuer's claim, untouched


def test_a_claim_still_ours_after_a_stall_before_its_first_step_runs(db: str) -> None:
    assert _stall_before_first_step(db, rescued=False) == ([8], "completed")
