"""A worker wrongly judged dead re-claims a job it is still running: no second execution."""

from __future__ import annotations

import asyncio

import pydantic

import jobledger as jl
from tests.conftest import db_rows, is_postgres, run, wait_until


class Item(pydantic.BaseModel):
    n: int


ITEM = jl.JobType("reclaim.item", Item)


def test_reclaimed_running_job_is_adopted_not_run_twice(db: str) -> None:
    jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.01)
    entered = 0
    release = asyncio.Event()

    @jobs.handler(ITEM, recovery="retry", concurrency=2)
    async def work(ctx: jl.JobContext[Item]) -> int:
        nonlocal entered
        entered += 1
        await release.wait()
        return ctx.payload.n

    async def main() -> None:
        async with jobs:
            handle = jobs.enqueue(ITEM, Item(n=7))
            await wait_until(lambda: entered == 1, what="the first execution")
            # What a rescuer does to a dead worker's running row (workers.RESET_RUNNING),
            # done from another connection as another process would.
            db_rows(
                db,
                "UPDATE jobs SET status = 'pending', worker_id = NULL, started_at = NULL "
                "WHERE id = ?",
                (handle.id,),
            )
            if is_postgres(db):
                # As the rescuer does in its transaction: tell the other processes.
                db_rows(db, "SELECT note_change()")
            await wait_until(
                lambda: (s := jobs.get(handle.id)) is not None and s.status == "running",
                what="the re-claim",
            )
            await asyncio.sleep(0.05)  # a second execution would have started by now
            assert entered == 1
            release.set()
            done = await asyncio.wait_for(handle.finished, 10)
            assert done.status == "completed"
            assert done.output == 7
            assert entered == 1

    run(main())
