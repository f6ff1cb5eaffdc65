"""The next batch of a queue is claimed in the transaction that finalizes the last one.

Seen from the writer's statements (SQLite's trace callback on the worker's own
connection): a transaction that claims also finalizes, except the very first claim.
Other processes therefore never see the queue's slots free between two batches.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading

import pytest

import jobledger as jl
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager, transactions
from tests.engine.test_caps import Gauge

CLAIM = "UPDATE jobs SET status = 'running'"
FINISH = ("WITH o (key", "UPDATE jobs SET status = ?, output")


def _traced_drain(jobs: jl.JobManager, total: int) -> list[str]:
    """Start `jobs`, wait until `total` jobs completed, stop: the statements its writer
    connection ran meanwhile."""
    seen: list[str] = []
    conn: sqlite3.Connection = jobs._store.conn  # type: ignore[attr-defined]

    async def main() -> None:
        conn.set_trace_callback(seen.append)
        await jobs.start()
        await wait_until(lambda: jobs.count(status="completed") == total, what="the drain")
        conn.set_trace_callback(None)
        await jobs.stop()

    run(main())
    return seen


def test_each_next_batch_is_claimed_with_the_last_ones_outcomes(db_path: str) -> None:
    jobs = make_manager(db_path)
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=10)
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)

    jobs.enqueue_many(ITEM, [Item(n=i) for i in range(100)])
    seen = _traced_drain(jobs, 100)
    assert sorted(ran) == list(range(100))
    claiming = [tx for tx in transactions(seen) if any(s.startswith(CLAIM) for s in tx)]
    alone = [tx for tx in claiming if not any(s.startswith(FINISH) for s in tx)]
    # Ten batches of ten: the first claim alone, the nine others each with the outcomes
    # of the batch before (ten claims alone without the refill).
    assert len(claiming) >= 10
    assert len(alone) == 1


def test_outcomes_of_several_queues_claim_each_ones_next_jobs_in_their_transaction(
    db_path: str,
) -> None:
    # Three queues of cap 2 (6 slots, under the global cap of 50): the no-op jobs of a
    # batch end together, so a finalize holds outcomes of all three queues. Each of its
    # queues claims its next jobs in that transaction (`Engine._mixed_refill`), where it
    # used to claim on its own after the commit, a transaction per queue.
    jobs = make_manager(db_path)
    names = ("mixed.a", "mixed.b", "mixed.c")
    gauges = {name: Gauge() for name in names}
    ran: list[tuple[str, int]] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=2)
    async def work(ctx: jl.JobContext[Item]) -> None:
        gauge = gauges[ctx.queue]
        gauge.enter()
        ran.append((ctx.queue, ctx.payload.n))
        await asyncio.sleep(0)
        gauge.exit()

    for name in names:
        jobs.enqueue_many(ITEM, [Item(n=i) for i in range(20)], queue=name)
    seen = _traced_drain(jobs, 60)
    assert sorted(ran) == sorted((name, i) for name in names for i in range(20))
    # In queue order within each queue.
    for name in names:
        assert [n for q, n in ran if q == name] == list(range(20))
    assert {name: g.peak for name, g in gauges.items()} == dict.fromkeys(names, 2)
    claiming = [tx for tx in transactions(seen) if any(s.startswith(CLAIM) for s in tx)]
    alone = [tx for tx in claiming if not any(s.startswith(FINISH) for s in tx)]
    # Each queue's first claim alone; then 54 jobs in batches of up to 6, each claimed
    # with the outcomes of the batch before (30 claims alone without it). The slack
    # allows a claim cut short by the claim-ahead budget on a slow machine, whose queue
    # is then kicked and claims alone.
    assert len(alone) <= 5
    assert len(claiming) >= 12
    with_others = [tx for tx in claiming if tx not in alone and "json_each" in " ".join(tx)]
    assert with_others, "no finalize claimed across its queues"


def test_a_refill_that_fails_leaves_the_outcomes_committed(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = make_manager(db_path)
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=1)
    async def work(ctx: jl.JobContext[Item]) -> int:
        ran.append(ctx.payload.n)
        return ctx.payload.n

    def refuse_claims(on: bool) -> None:
        conn = sqlite3.connect(db_path)
        try:
            if on:
                conn.execute(
                    "CREATE TRIGGER refuse_claims BEFORE UPDATE OF status ON jobs "
                    "WHEN old.status = 'pending' AND new.status = 'running' "
                    "AND json_extract(old.payload, '$.n') = 2 "
                    "BEGIN SELECT RAISE(ABORT, 'claims refused'); END"
                )
            else:
                conn.execute("DROP TRIGGER refuse_claims")
            conn.commit()
        finally:
            conn.close()

    first = jobs.enqueue(ITEM, Item(n=1))
    second = jobs.enqueue(ITEM, Item(n=2))  # claimed with job 1's outcome: refused
    refuse_claims(True)

    async def main() -> tuple[jl.JobSnapshot, jl.JobSnapshot]:
        async with jobs:
            done = await first.finished
            await wait_until(
                lambda: "claims refused" in caplog.text, what="the refill to be refused"
            )
            waiting = jobs.get(second.id)
            assert waiting is not None
            assert waiting.status == jl.JobStatus.PENDING
            refuse_claims(False)
            return done, await second.finished

    with caplog.at_level(logging.WARNING):
        done, later = run(main())
    assert (done.status, done.output) == (jl.JobStatus.COMPLETED, 1)
    assert (later.status, later.output) == (jl.JobStatus.COMPLETED, 2)
    assert ran == [1, 2]


@pytest.mark.parametrize("bound", ["process_max_concurrency", "thread_pool_size"])
def test_a_refill_stops_at_what_this_process_may_still_run(db_path: str, bound: str) -> None:
    # A bound of 3 (jobs this process may run, or pool threads for plain handlers): one
    # job of another queue and one of ITEM's run. The ITEM job's finalize refills its
    # queue (cap 50, ten pending) with two, not ten.
    jobs = make_manager(db_path, poll_interval=60, **{bound: 3})
    other = jl.JobType("test.other", Item)
    gauge = Gauge()
    first_go, rest_go, other_go = threading.Event(), threading.Event(), threading.Event()

    def register(job_type: jl.JobType[Item], concurrency: int) -> None:
        def go(ctx: jl.JobContext[Item]) -> threading.Event:
            if job_type is other:
                return other_go
            return first_go if ctx.payload.n == 0 else rest_go

        if bound == "thread_pool_size":

            @jobs.handler(job_type, recovery="retry", concurrency=concurrency)
            def plain(ctx: jl.JobContext[Item]) -> None:
                gauge.enter()
                try:
                    go(ctx).wait(10)
                finally:
                    gauge.exit()

        else:

            @jobs.handler(job_type, recovery="retry", concurrency=concurrency)
            async def awaiting(ctx: jl.JobContext[Item]) -> None:
                gauge.enter()
                try:
                    await asyncio.to_thread(go(ctx).wait, 10)
                finally:
                    gauge.exit()

    register(ITEM, 50)
    register(other, 1)
    # Written by a second manager: nothing kicks this one's queue (its poll is a minute
    # away), so only the refill claims them.
    producer = make_manager(db_path)

    async def main() -> None:
        async with jobs:
            held = jobs.enqueue(other, Item())
            await wait_until(lambda: gauge.active == 1, what="the other queue's job")
            first = jobs.enqueue(ITEM, Item(n=0))
            await wait_until(lambda: gauge.active == 2, what="the first job")
            rest = producer.enqueue_many(ITEM, [Item(n=i) for i in range(1, 11)])
            first_go.set()
            assert (await first.finished).status == "completed"
            await wait_until(lambda: gauge.entered >= 4, what="the refill")
            # The refill filled its limit, so the queue was kicked again: wait for that
            # claim to be turned away by the process's bound, then look.
            await wait_until(lambda: jobs._engine.global_blocked, what="a refused claim")
            assert gauge.entered == 4
            assert jobs.count(status="running") == 3
            rest_go.set()
            other_go.set()
            for h in [held, *rest]:
                assert (await h.finished).status == "completed"

    run(main())
    run(producer.stop())
    assert gauge.peak == 3
    assert gauge.entered == 12
