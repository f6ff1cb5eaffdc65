"""`ctx.transaction()` (DESIGN §8.13): a handler's business writes, follow-up jobs and
its own completion in one commit fenced on its attempt. Real SQLite files and real
PostgreSQL schemas (`db`); async and thread handlers."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pydantic
import pytest

import jobledger as jl
from tests.conftest import db_rows, run, sql_for
from tests.engine import fast_retry, make_manager


class Charge(pydantic.BaseModel):
    order: int
    cents: int


class Receipt(pydantic.BaseModel):
    order: int


CHARGE = jl.JobType("eo.charge", Charge)
RECEIPT = jl.JobType("eo.receipt", Receipt)


def ledger(db: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in db_rows(db, "SELECT order_id, cents FROM ledger ORDER BY order_id")]


def setup(db: str) -> jl.JobManager:
    jobs = make_manager(db)
    with jobs.write_tx() as tx:
        tx.execute(
            "CREATE TABLE IF NOT EXISTS ledger (order_id INTEGER PRIMARY KEY, cents INTEGER)"
        )
    receipts: list[int] = []

    @jobs.handler(RECEIPT, recovery="retry")
    async def receipt(ctx: jl.JobContext[Receipt]) -> int:
        receipts.append(ctx.payload.order)
        return ctx.payload.order

    return jobs


def insert(db: str) -> str:
    return sql_for(db, "INSERT INTO ledger (order_id, cents) VALUES (?, ?)")


@pytest.mark.parametrize("kind", ["async", "thread"])
def test_the_writes_the_follow_up_and_the_completion_commit_together(db: str, kind: str) -> None:
    jobs = setup(db)
    sql = insert(db)

    def body(ctx: jl.JobContext[Charge]) -> str:
        with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.order, ctx.payload.cents))
            jobs.enqueue_tx(tx, RECEIPT, Receipt(order=ctx.payload.order))
            tx.set_output({"cents": ctx.payload.cents})
        return "ignored: the transaction completed the job"

    if kind == "async":

        @jobs.handler(CHARGE, recovery="retry")
        async def charge(ctx: jl.JobContext[Charge]) -> str:
            return body(ctx)
    else:

        @jobs.handler(CHARGE, recovery="retry")
        def charge_sync(ctx: jl.JobContext[Charge]) -> str:
            return body(ctx)

    async def main() -> tuple[jl.JobSnapshot, list[jl.JobSnapshot]]:
        async with jobs:
            done = await jobs.enqueue(CHARGE, Charge(order=7, cents=250)).finished
            while jobs.count(type=RECEIPT, status="completed") < 1:
                await asyncio.sleep(0.01)
            return done, jobs.list(type=RECEIPT)

    done, receipts = run(main())
    assert done.status == jl.JobStatus.COMPLETED
    assert done.output == {"cents": 250}
    assert ledger(db) == [(7, 250)]
    assert [r.payload for r in receipts] == [{"order": 7}]
    [record] = jobs.attempts(done.id)
    assert record.outcome == "completed"


def test_an_exception_in_the_block_rolls_back_and_retries(db: str) -> None:
    jobs = setup(db)
    sql = insert(db)
    tries: list[int] = []

    @jobs.handler(CHARGE, recovery="retry", retry=fast_retry(3))
    async def charge(ctx: jl.JobContext[Charge]) -> None:
        tries.append(ctx.attempt)
        with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.order, ctx.payload.cents))
            jobs.enqueue_tx(tx, RECEIPT, Receipt(order=ctx.payload.order))
            if ctx.attempt == 0:
                raise RuntimeError("the gateway timed out")

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(CHARGE, Charge(order=1, cents=5)).finished

    done = run(main())
    assert tries == [0, 1]
    assert done.status == jl.JobStatus.COMPLETED
    assert done.output is None
    assert ledger(db) == [(1, 5)]  # the first attempt's row rolled back
    assert jobs.count(type=RECEIPT) == 1  # and its follow-up with it
    outcomes = [a.outcome for a in jobs.attempts(done.id)]
    assert outcomes == ["retry", "completed"]


def test_a_timeout_inside_the_block_makes_the_commit_lose(db: str) -> None:
    jobs = setup(db)
    sql = insert(db)
    lost: list[str] = []

    @jobs.handler(CHARGE, recovery="retry", timeout=0.2, retry=fast_retry(3))
    def charge(ctx: jl.JobContext[Charge]) -> None:
        try:
            with ctx.transaction() as tx:
                tx.execute(sql, (ctx.payload.order, ctx.attempt))
                if ctx.attempt == 0:
                    ctx.cancelled.wait_sync(10)  # the timeout fires the token
        except jl.JobClaimLost as exc:
            lost.append(exc.params["reason"])
            raise

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(CHARGE, Charge(order=3, cents=0)).finished

    done = run(main())
    assert lost == ["timeout"]
    assert done.status == jl.JobStatus.COMPLETED
    assert ledger(db) == [(3, 1)]  # only the second attempt's write
    assert [a.outcome for a in jobs.attempts(done.id)] == ["retry", "completed"]


def test_a_cancel_inside_the_block_makes_the_commit_lose(db: str) -> None:
    """The cancel's first step, the local token, lands while the block is open.

    It is fired from a thread of the test's own: while a `def` handler's block holds
    SQLite's write lock, the event loop may itself be waiting for that lock (a poll, a
    heartbeat), so nothing that runs on the loop, `jobs.cancel` included, is sure to run
    before the block ends (docs/howto/exactly-once.md: keep blocks short)."""
    jobs = setup(db)
    sql = insert(db)
    inside = threading.Event()

    @jobs.handler(CHARGE, recovery="retry")
    def charge(ctx: jl.JobContext[Charge]) -> None:
        with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.order, 1))
            jobs.enqueue_tx(tx, RECEIPT, Receipt(order=ctx.payload.order))
            inside.set()
            ctx.cancelled.wait_sync(10)

    def cancel_when_inside(job_id: str) -> None:
        assert inside.wait(10)
        attempt = jobs._engine.inflight[job_id]
        assert jobs._engine.abort(attempt, "cancel", "Job cancelled: changed their mind")

    async def main() -> jl.JobSnapshot:
        async with jobs:
            handle = jobs.enqueue(CHARGE, Charge(order=4, cents=0))
            canceller = threading.Thread(target=cancel_when_inside, args=(handle.id,))
            canceller.start()
            done = await handle.finished
            canceller.join(10)
            return done

    done = run(main())
    assert done.status == jl.JobStatus.CANCELLED
    assert ledger(db) == []
    assert jobs.count(type=RECEIPT) == 0


def test_one_transaction_per_attempt(db: str) -> None:
    jobs = setup(db)
    codes: list[str] = []

    @jobs.handler(CHARGE, recovery="retry")
    async def charge(ctx: jl.JobContext[Charge]) -> None:
        with ctx.transaction() as tx:
            tx.set_output("first")
        try:
            with ctx.transaction():
                pytest.fail("a second transaction opened")
        except jl.JobError as exc:
            codes.append(exc.code)
            raise  # after the commit: logged, not recorded

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(CHARGE, Charge(order=5, cents=0)).finished

    done = run(main())
    assert codes == ["JOB_INVALID_OPTION"]
    assert done.status == jl.JobStatus.COMPLETED
    assert done.output == "first"


def test_an_output_that_cannot_be_stored_rolls_the_block_back(db: str) -> None:
    jobs = setup(db)
    sql = insert(db)

    @jobs.handler(CHARGE, recovery="retry", retry=fast_retry(1))
    async def charge(ctx: jl.JobContext[Charge]) -> None:
        with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.order, 1))
            tx.set_output(object())  # not JSON

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(CHARGE, Charge(order=6, cents=0)).finished

    done = run(main())
    assert done.status == jl.JobStatus.FAILED
    assert done.error is not None
    assert ledger(db) == []
