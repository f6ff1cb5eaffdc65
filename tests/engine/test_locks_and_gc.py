"""Durable named locks (layer 3) and garbage collection of terminal rows.

The lock test first proves the two jobs really run at the same time (a rendezvous before
the lock), so the serialisation observed inside the lock is the lock's doing, not the
queues'. GC runs on a `FakeClock`: retention and interval are fake seconds.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager, sql_one, statuses

OTHER = jl.JobType("test.other", Item)
SYNC = jl.JobType("test.sync", Item)


def test_durable_lock_serialises_jobs_of_different_queues(db: str) -> None:
    jobs = make_manager(db)
    arrived: set[str] = set()
    arrived_lock = threading.Lock()
    inside: list[str] = []
    peak = 0
    holders = 0
    holders_lock = threading.Lock()

    def enter(name: str) -> None:
        nonlocal peak, holders
        with holders_lock:
            holders += 1
            peak = max(peak, holders)
            inside.append(name)

    def leave() -> None:
        nonlocal holders
        with holders_lock:
            holders -= 1

    def arrive(name: str) -> None:
        with arrived_lock:
            arrived.add(name)

    @jobs.handler(ITEM, recovery="retry")
    async def first(ctx: jl.JobContext[Item]) -> None:
        arrive("async")
        await wait_until(lambda: len(arrived) == 3, what="all three jobs to run at once")
        async with ctx.lock("vector-store:kb1"):
            enter("async")
            await asyncio.sleep(0.03)
            leave()

    @jobs.handler(OTHER, recovery="retry")
    async def second(ctx: jl.JobContext[Item]) -> None:
        arrive("async2")
        await wait_until(lambda: len(arrived) == 3, what="all three jobs to run at once")
        async with ctx.lock("vector-store:kb1"):
            enter("async2")
            await asyncio.sleep(0.03)
            leave()

    @jobs.handler(SYNC, recovery="retry")
    def third(ctx: jl.JobContext[Item]) -> None:
        arrive("sync")
        deadline = time.monotonic() + 10
        while len(arrived) < 3 and time.monotonic() < deadline:
            time.sleep(0.002)
        with ctx.lock("vector-store:kb1"):
            enter("sync")
            time.sleep(0.03)
            leave()

    async def main() -> None:
        async with jobs:
            handles = [
                jobs.enqueue(ITEM, Item()),
                jobs.enqueue(OTHER, Item()),
                jobs.enqueue(SYNC, Item()),
            ]
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert sorted(inside) == ["async", "async2", "sync"]
    assert peak == 1
    assert sql_one(db, "SELECT count(*) FROM locks") == 0


def test_lock_timeout_and_release_when_the_holder_finishes(db: str) -> None:
    jobs = make_manager(db)
    holding = asyncio.Event()
    release = asyncio.Event()
    codes: list[str] = []

    @jobs.handler(ITEM, recovery="retry")
    async def holder(ctx: jl.JobContext[Item]) -> None:
        # Taken and never exited: finishing the job must free it anyway.
        await ctx.lock("res").__aenter__()
        holding.set()
        await release.wait()

    @jobs.handler(OTHER, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def waiter(ctx: jl.JobContext[Item]) -> str:
        if ctx.payload.n == 0:
            with pytest.raises(jl.JobError) as info:
                async with ctx.lock("res", timeout=0.05):
                    pass
            codes.append(info.value.code)
            return "timed out"
        async with ctx.lock("res", timeout=5):
            return "got it"

    async def main() -> None:
        async with jobs:
            held = jobs.enqueue(ITEM, Item())
            await holding.wait()
            assert sql_one(db, "SELECT job_id FROM locks WHERE name = 'res'") == held.id
            assert (await jobs.enqueue(OTHER, Item(n=0)).finished).output == "timed out"
            release.set()
            assert (await held.finished).status == "completed"
            assert sql_one(db, "SELECT count(*) FROM locks") == 0
            assert (await jobs.enqueue(OTHER, Item(n=1)).finished).output == "got it"

    run(main())
    assert codes == ["JOB_LOCK_TIMEOUT"]


def test_gc_deletes_only_old_terminal_rows(db: str) -> None:
    clock = FakeClock()
    jobs = make_manager(db, clock=clock, gc_retention=60, gc_interval=10)

    @jobs.handler(ITEM, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def work(ctx: jl.JobContext[Item]) -> None:
        if ctx.payload.n == 1:
            raise ValueError("fails")

    unhandled = jl.JobType("test.unhandled", Item)

    async def main() -> dict[str, str]:
        async with jobs:
            old = [jobs.enqueue(ITEM, Item(n=i)) for i in range(2)]
            for h in old:
                await h.finished
            old_cancelled = jobs.enqueue(ITEM, Item(), delay=3600)
            await jobs.cancel(old_cancelled.id)
            # Never terminal, and as old as the rest: GC must keep them.
            waiting = jobs.enqueue(ITEM, Item(), delay=100_000)
            pending = jobs.enqueue(unhandled, Item())
            await clock.advance_async(40)
            recent = jobs.enqueue(ITEM, Item(n=2))
            await recent.finished
            assert len(statuses(db)) == 6
            # t=70: the interval has run at t=10..70; only rows finished before t=10 go.
            await clock.advance_async(30)
            await wait_until(
                lambda: len(statuses(db)) == 3, what="gc of the three old terminal rows"
            )
            return {
                "waiting": waiting.id,
                "pending": pending.id,
                "recent": recent.id,
            }

    ids = run(main())
    left = statuses(db)
    assert left == {
        ids["waiting"]: "delayed",
        ids["pending"]: "pending",
        ids["recent"]: "completed",
    }
