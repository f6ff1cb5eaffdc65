"""Claims that belong to nobody: found by the chaos run (docs/reliability.md, finding 1).

A worker judged dead has its worker row deleted by the rescue. If it claimed after that
(before its next heartbeat registered it again), the rows belonged to an id no rescue
looked for, and they held their slots for good: under a global cap they stopped every
queue. Now a worker's claim takes rows only while its worker row is live (it registers
again first), and a rescue treats the owner of any `running` row without a worker row
as dead.
"""

from __future__ import annotations

import asyncio

import jobledger as jl
from tests.conftest import db_rows, sql_for
from tests.recovery import arun, status_counts, wait_for_async

T = jl.JobType("ghost.t", int)


def test_a_row_claimed_by_an_unknown_worker_is_rescued_and_the_cap_frees(db: str) -> None:
    producer = jl.JobManager(db)
    ids = [h.id for h in producer.enqueue_many(T, [1, 2, 3])]
    arun(producer.stop)
    db_rows(
        db,
        sql_for(
            db,
            "UPDATE jobs SET status = 'running', worker_id = 'vm:999999:ghost', "
            "started_at = 1, updated_at = 1 WHERE id = ?",
        ),
        (ids[0],),
    )

    async def body() -> list[str]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, global_max_concurrency=1)

        @jobs.handler(T, recovery="retry", concurrency=5)
        async def run(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        async with jobs:
            await jobs.recovery_done
            await wait_for_async(lambda: status_counts(db) == {"completed": 3}, timeout=10.0)
            return [str(s) for (s,) in db_rows(db, "SELECT status FROM jobs")]

    assert sorted(arun(body)) == ["completed"] * 3


def test_a_worker_whose_row_was_deleted_registers_again_before_it_claims(db: str) -> None:
    async def body() -> tuple[str, list[tuple[object, ...]], list[tuple[object, ...]]]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, heartbeat_interval=3600)

        @jobs.handler(T, recovery="retry")
        async def run(ctx: jl.JobContext[int]) -> str:
            return "ran"

        async with jobs:
            await jobs.recovery_done
            # What a rescue by another process does to a worker it judged dead.
            db_rows(db, sql_for(db, "DELETE FROM workers WHERE id = ?"), (jobs.worker_id,))
            h = jobs.enqueue(T, 1)
            snap = await asyncio.wait_for(h.finished, 10.0)
            assert snap.status == "completed"
            registered = db_rows(
                db, sql_for(db, "SELECT stopped_at FROM workers WHERE id = ?"), (jobs.worker_id,)
            )
            owners = db_rows(db, sql_for(db, "SELECT worker_id FROM jobs WHERE id = ?"), (h.id,))
            return jobs.worker_id, registered, owners

    worker_id, registered, owners = arun(body)
    assert registered == [(None,)], "registered again, and live"
    assert owners == [(worker_id,)]
