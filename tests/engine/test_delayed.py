"""Delayed jobs: `run_at`/`delay` land as `delayed` and are promoted on time, also when
another manager wrote them. The fake-clock test pins "on time" exactly: not a tick before
`scheduled_at`, and without any further nudge once it has passed.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager, sql_one


def test_delay_and_run_at_land_delayed_and_run_on_time(db: str) -> None:
    jobs = make_manager(db)
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            # Margins of 50 ms or more, so a loaded machine cannot reorder them.
            handles = [
                jobs.enqueue(ITEM, Item(n=1), delay=0.3),
                jobs.enqueue(ITEM, Item(n=2), delay=timedelta(milliseconds=250)),
                jobs.enqueue(ITEM, Item(n=3), run_at=jobs.clock.now() + timedelta(seconds=0.2)),
                jobs.enqueue(ITEM, Item(n=4), run_at=jobs.clock.now() - timedelta(hours=1)),
            ]
            assert [h.snapshot.status for h in handles] == [
                "delayed",
                "delayed",
                "delayed",
                "pending",
            ]
            return [await h.finished for h in handles]

    snaps = run(main())
    assert all(s.status == "completed" for s in snaps)
    for s in snaps:
        assert s.started_at is not None
        assert s.started_at >= s.scheduled_at
    # A delay counts from the enqueue's own clock reading.
    assert snaps[0].scheduled_at - snaps[0].created_at == timedelta(milliseconds=300)
    assert snaps[1].scheduled_at - snaps[1].created_at == timedelta(milliseconds=250)
    # Started in the order they were due. (Not a fixed order: each enqueue reads the clock
    # anew, and on a loaded machine three enqueues can take longer than the 50 ms that
    # separate their due times.)
    due = sorted(zip((s.scheduled_at for s in snaps), (1, 2, 3, 4), strict=True))
    assert ran == [n for _, n in due]
    assert ran[0] == 4


def test_promotion_follows_the_injected_clock(db: str) -> None:
    clock = FakeClock()
    jobs = make_manager(db, clock=clock)
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)

    async def main() -> jl.JobSnapshot:
        async with jobs:
            h = jobs.enqueue(ITEM, Item(n=1), delay=30)
            assert h.snapshot.scheduled_at == clock.now() + timedelta(seconds=30)
            await clock.advance_async(29.9)
            await asyncio.sleep(0.05)  # real time for the loops to act, if they wrongly would
            assert sql_one(db, "SELECT status FROM jobs") == "delayed"
            assert ran == []
            await clock.advance_async(0.2)
            return await h.finished

    snap = run(main())
    assert snap.status == "completed"
    assert ran == [1]
    assert snap.started_at is not None
    assert snap.started_at >= snap.scheduled_at


def test_delayed_rows_of_a_producer_are_promoted_by_a_running_worker(db: str) -> None:
    worker = make_manager(db)
    producer = jl.JobManager(db, startup_delay=0, poll_interval=0.01)  # never started
    ran: list[int] = []

    @worker.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)

    async def main() -> jl.JobSnapshot:
        async with worker:
            await worker.recovery_done
            h = producer.enqueue(ITEM, Item(n=7), delay=0.05)
            assert h.snapshot.status == "delayed"
            await wait_until(lambda: ran == [7], what="the producer's delayed job to run")
            snap = await h.finished
            await producer.stop()
            return snap

    snap = run(main())
    assert snap.status == "completed"
    assert snap.worker_id == worker.worker_id
    assert snap.enqueued_by == producer.worker_id
