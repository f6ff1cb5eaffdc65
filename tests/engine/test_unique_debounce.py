"""Unique and debounced enqueues (DESIGN §8.7): `unique_for=S` and `debounce=S` with an
idempotency key, through `enqueue`, `enqueue_many` and `enqueue_tx`, on both backends.

Time is a `FakeClock`'s; what a call wrote is read from the table itself.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import jobledger as jl
from jobledger.testing import FakeClock, drain
from tests.conftest import db_rows, run, wait_until
from tests.engine import ITEM, Item, make_manager
from tests.engine.keyed_proc import debounce_and_unique

FAIL = jl.JobType("test.fail", Item)


def manager(
    db: str, clock: FakeClock, ran: list[int] | None = None
) -> tuple[jl.JobManager, list[int]]:
    """A manager on `clock` whose ITEM handler appends the payloads it runs to `ran`,
    in order, and whose FAIL handler fails for good."""
    jobs = make_manager(db, clock=clock)
    ran = [] if ran is None else ran

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)

    @jobs.handler(FAIL, recovery="retry")
    async def fail(ctx: jl.JobContext[Item]) -> None:
        raise jl.PermanentError("no")

    return jobs, ran


def run_all(db: str, clock: FakeClock, ran: list[int] | None = None) -> None:
    """Run every due job (and the delayed ones, moving `clock`) in a worker of its own:
    a stopped manager does not start again, and the test's stays a producer."""
    worker, _ = manager(db, clock, ran)

    async def main() -> None:
        async with worker:
            await drain(worker)

    run(main())


def table(db: str) -> list[tuple[Any, ...]]:
    return db_rows(db, "SELECT * FROM jobs ORDER BY id")


# -- unique_for -----------------------------------------------------------------------


def advance_to(clock: FakeClock, at: datetime) -> None:
    """Move `clock` on to `at` (a worker's `drain` may have moved it already)."""
    clock.advance(max(0.0, (at - clock.now()).total_seconds()))


def ended_at(jobs: jl.JobManager, job_id: str) -> datetime:
    snap = jobs.get(job_id)
    assert snap is not None
    assert snap.finished_at is not None, snap
    return snap.finished_at


def test_unique_for_answers_the_ended_job_within_the_window_then_writes_a_new_one(
    db: str,
) -> None:
    clock = FakeClock()
    jobs, ran = manager(db, clock)
    first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="k", unique_for=60)
    # While it waits, as with a plain key.
    assert jobs.enqueue(ITEM, Item(n=2), idempotency_key="k", unique_for=60).id == first.id
    run_all(db, clock, ran)
    assert ran == [1]
    end = ended_at(jobs, first.id)
    before = table(db)
    advance_to(clock, end + timedelta(seconds=59.5))
    again = jobs.enqueue(ITEM, Item(n=3), idempotency_key="k", unique_for=60)
    assert again.id == first.id
    assert again.snapshot.status == "completed"
    assert again.snapshot.payload == {"n": 1}
    assert table(db) == before  # nothing written
    advance_to(clock, end + timedelta(seconds=60.5))
    new = jobs.enqueue(ITEM, Item(n=4), idempotency_key="k", unique_for=60)
    assert new.id != first.id
    assert new.snapshot.status == "pending"
    assert jobs.enqueue(ITEM, Item(n=5), idempotency_key="k", unique_for=60).id == new.id
    assert jobs.count() == 2
    run_all(db, clock, ran)
    assert ran == [1, 4]


def test_the_window_runs_from_the_end_of_a_failed_or_cancelled_job(db: str) -> None:
    clock = FakeClock()
    jobs, _ = manager(db, clock)
    failed = jobs.enqueue(FAIL, Item(), idempotency_key="f", delay=100)
    run_all(db, clock)  # moves the clock to the job's time, 100 s on
    waiting = jobs.enqueue(ITEM, Item(), idempotency_key="c", delay=3600)
    clock.advance(30)
    run(jobs.cancel(waiting.id))
    clock.advance(50)
    for job, status in ((failed, "failed"), (waiting, "cancelled")):
        snap = jobs.get(job.id)
        assert snap is not None
        assert snap.status == status
        # Written long before it ended: the window counts from the end.
        age = (clock.now() - ended_at(jobs, job.id)).total_seconds()
        assert (clock.now() - snap.created_at).total_seconds() >= age + 30
        key = snap.idempotency_key
        # Keys are global across job types, for ended jobs as for live ones.
        assert jobs.enqueue(ITEM, Item(), idempotency_key=key, unique_for=age + 1).id == job.id
        assert jobs.count() == 2
    for job in (failed, waiting):
        key = jobs.get(job.id).idempotency_key  # type: ignore[union-attr]
        fresh = jobs.enqueue(ITEM, Item(), idempotency_key=key, unique_for=1)
        assert fresh.id != job.id
    assert jobs.count() == 4


# -- debounce -------------------------------------------------------------------------


def test_debounce_keeps_one_job_with_the_last_payload_at_the_last_time(db: str) -> None:
    clock = FakeClock()
    jobs, ran = manager(db, clock)
    t0 = clock.now()
    first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="d", debounce=10)
    assert first.snapshot.status == "delayed"
    assert first.snapshot.scheduled_at == t0 + timedelta(seconds=10)
    clock.advance(4)
    second = jobs.enqueue(ITEM, Item(n=2), idempotency_key="d", debounce=timedelta(seconds=10))
    assert second.id == first.id
    snap = jobs.get(first.id)
    assert snap is not None
    assert (snap.payload, snap.status) == ({"n": 2}, "delayed")
    assert snap.scheduled_at == t0 + timedelta(seconds=14)
    assert snap.created_at == t0
    assert jobs.count() == 1
    run_all(db, clock, ran)
    assert ran == [2]
    done = jobs.get(first.id)
    assert done is not None
    assert done.started_at is not None
    assert done.started_at >= t0 + timedelta(seconds=14)
    # Ended: the next debounce is a new job.
    third = jobs.enqueue(ITEM, Item(n=3), idempotency_key="d", debounce=10)
    assert third.id != first.id


def test_debounce_takes_over_a_pending_job_and_moves_its_time(db: str) -> None:
    clock = FakeClock()
    jobs, _ = manager(db, clock)
    pending = jobs.enqueue(ITEM, Item(n=1), idempotency_key="p", priority=-5)
    later = jobs.enqueue(ITEM, Item(n=1), idempotency_key="l", run_at=clock.now() + timedelta(1))
    clock.advance(1)
    for key, job in (("p", pending), ("l", later)):
        handle = jobs.enqueue(ITEM, Item(n=2), idempotency_key=key, debounce=30)
        assert handle.id == job.id
        snap = handle.snapshot
        # The job runs 30 s after this call, whether it was due already or much later.
        assert (snap.status, snap.payload) == ("delayed", {"n": 2})
        assert snap.scheduled_at == clock.now() + timedelta(seconds=30)
    assert jobs.get(pending.id).priority == -5  # type: ignore[union-attr]
    assert jobs.count() == 2


def test_a_started_worker_runs_a_debounced_job_at_its_pushed_back_time(db: str) -> None:
    clock = FakeClock()
    jobs, ran = manager(db, clock)

    async def main() -> None:
        async with jobs:
            first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="d", debounce=10)
            await clock.advance_async(5)
            jobs.enqueue(ITEM, Item(n=2), idempotency_key="d", debounce=10)
            await clock.advance_async(6)  # past the first time, before the second
            await asyncio.sleep(0.2)
            assert jobs.get(first.id).status == "delayed"  # type: ignore[union-attr]
            await clock.advance_async(4)
            await wait_until(
                lambda: jobs.get(first.id).status == "completed",  # type: ignore[union-attr]
                what="the debounced job to run",
            )

    run(main())
    assert ran == [2]


def test_debounce_beside_a_running_job_writes_a_new_one_and_leaves_it_alone(db: str) -> None:
    clock = FakeClock()
    jobs = make_manager(db, clock=clock)
    gates: dict[int, asyncio.Event] = {}
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=5)
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)
        await gates.setdefault(ctx.payload.n, asyncio.Event()).wait()

    def status(job_id: str) -> str:
        snap = jobs.get(job_id)
        assert snap is not None
        return snap.status

    async def main() -> None:
        async with jobs:
            a = jobs.enqueue(ITEM, Item(n=1), idempotency_key="k")
            await wait_until(lambda: status(a.id) == "running", what="a to run")
            b = jobs.enqueue(ITEM, Item(n=2), idempotency_key="k", debounce=1)
            assert b.id != a.id
            assert (b.snapshot.status, b.snapshot.idempotency_key) == ("delayed", "k")
            assert jobs.get(a.id).payload == {"n": 1}  # type: ignore[union-attr]
            assert jobs.enqueue(ITEM, Item(n=3), idempotency_key="k", debounce=1).id == b.id
            # A plain key answers the job that holds it, the running one.
            assert jobs.enqueue(ITEM, Item(n=9), idempotency_key="k").id == a.id
            await clock.advance_async(1)
            await wait_until(lambda: status(b.id) == "running", what="b to run")
            # Both run: a third job, which the next debounce updates.
            c = jobs.enqueue(ITEM, Item(n=4), idempotency_key="k", debounce=1)
            assert c.id not in (a.id, b.id)
            assert jobs.enqueue(ITEM, Item(n=5), idempotency_key="k", debounce=1).id == c.id
            for n in range(1, 6):
                gates.setdefault(n, asyncio.Event()).set()
            await clock.advance_async(1)
            await wait_until(
                lambda: {status(j) for j in (a.id, b.id, c.id)} == {"completed"},
                what="every job to end",
            )

    run(main())
    assert ran == [1, 3, 5]
    assert jobs.count() == 3


# -- enqueue_many and enqueue_tx ------------------------------------------------------


def test_enqueue_many_per_entry_and_for_the_whole_call(db: str) -> None:
    clock = FakeClock()
    jobs, _ = manager(db, clock)
    handles = jobs.enqueue_many(
        ITEM,
        [
            jl.JobSpec(Item(n=1), idempotency_key="a", debounce=5),
            Item(n=2),
            jl.JobSpec(Item(n=3), idempotency_key="a", debounce=5),
        ],
    )
    assert handles[0].id == handles[2].id != handles[1].id
    assert handles[0].snapshot.payload == handles[2].snapshot.payload == {"n": 3}
    assert handles[1].snapshot.status == "pending"
    # For the call: every entry brings its own key; one entry turns it off.
    again = jobs.enqueue_many(
        ITEM,
        [
            jl.JobSpec(Item(n=4), idempotency_key="a"),
            jl.JobSpec(Item(n=5), idempotency_key="b"),
            jl.JobSpec(Item(n=6), idempotency_key="a", debounce=None),
        ],
        debounce=7,
    )
    assert again[0].id == again[2].id == handles[0].id
    assert jobs.get(handles[0].id).payload == {"n": 4}  # type: ignore[union-attr]
    assert again[1].snapshot.scheduled_at == clock.now() + timedelta(seconds=7)
    # A key for the call: one job for every entry.
    cancelled = jobs.enqueue(ITEM, Item(n=7), idempotency_key="c")
    run(jobs.cancel(cancelled.id))
    unique = jobs.enqueue_many(ITEM, [Item(n=8), Item(n=9)], idempotency_key="c", unique_for=60)
    assert [h.id for h in unique] == [cancelled.id, cancelled.id]
    assert jobs.count() == 4
    assert jobs.enqueue_many(ITEM, [], idempotency_key="c", unique_for=60) == []


def test_enqueue_tx_commits_and_rolls_back_with_the_callers_writes(db: str) -> None:
    clock = FakeClock()
    jobs, _ = manager(db, clock)
    first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="t", debounce=10)
    with jobs.write_tx() as tx:
        handle = jobs.enqueue_tx(tx, ITEM, Item(n=2), idempotency_key="t", debounce=20)
        assert handle.id == first.id
    assert jobs.get(first.id).payload == {"n": 2}  # type: ignore[union-attr]
    before = table(db)

    def aborted() -> None:
        with jobs.write_tx() as tx:
            jobs.enqueue_tx(tx, ITEM, Item(n=3), idempotency_key="t", debounce=30)
            jobs.enqueue_tx(tx, ITEM, Item(n=3), idempotency_key="u", unique_for=30)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        aborted()
    assert table(db) == before
    with jobs.write_tx() as tx:
        u = jobs.enqueue_tx(tx, ITEM, Item(n=4), idempotency_key="u", unique_for=30)
        assert jobs.enqueue_tx(tx, ITEM, Item(n=5), idempotency_key="u", unique_for=30).id == u.id
    assert jobs.count() == 2


# -- bad input ------------------------------------------------------------------------

_BAD_SECONDS: list[Any] = [
    0,
    -1,
    0.0,
    math.nan,
    math.inf,
    -math.inf,
    True,
    "5",
    timedelta(0),
    timedelta(seconds=-1),
    1e12,  # past year 9999
    10**30,
]


def _bad_options() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = [
        {"unique_for": 5},  # no key
        {"debounce": 5},
        {"idempotency_key": "keep", "unique_for": 5, "debounce": 5},
        {"idempotency_key": "keep", "debounce": 5, "delay": 1},
        {"idempotency_key": "keep", "debounce": 5, "run_at": datetime(2030, 1, 1)},
    ]
    for value in _BAD_SECONDS:
        cases.append({"idempotency_key": "keep", "unique_for": value})
        cases.append({"idempotency_key": "keep", "debounce": value})
    return cases


def test_bad_options_raise_job_invalid_option_and_write_nothing(db: str) -> None:
    jobs, _ = manager(db, FakeClock())
    jobs.enqueue(ITEM, Item(n=1), idempotency_key="keep", debounce=10)
    ended = jobs.enqueue(ITEM, Item(n=1), idempotency_key="gone")
    run(jobs.cancel(ended.id))
    before = table(db)

    def rejected(call: Callable[..., object], *args: Any, **kwargs: Any) -> jl.JobError:
        with pytest.raises(jl.JobError) as info:
            call(*args, **kwargs)
        return info.value

    for options in _bad_options():
        err = rejected(jobs.enqueue, ITEM, Item(n=2), **options)
        assert err.code == "JOB_INVALID_OPTION", options
        with jobs.write_tx() as tx:
            err = rejected(jobs.enqueue_tx, tx, ITEM, Item(n=2), **options)
            assert err.code == "JOB_INVALID_OPTION", options
        err = rejected(jobs.enqueue_many, ITEM, [Item(n=2), Item(n=3)], **options)
        assert err.code == "JOB_BATCH_INVALID", options
        assert [e["code"] for e in err.params["entries"]] == ["JOB_INVALID_OPTION"] * 2
        err = rejected(jobs.enqueue_many, ITEM, [Item(n=3), jl.JobSpec(Item(n=2), **options)])
        assert [(e["index"], e["code"]) for e in err.params["entries"]] == [
            (1, "JOB_INVALID_OPTION")
        ], options
    assert table(db) == before


# -- concurrency ----------------------------------------------------------------------


def test_two_processes_debouncing_one_key_at_once_keep_one_job(db: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    n = 30
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    run(jl.JobManager(db).stop())  # the schema, before two processes race to make it
    procs = [
        ctx.Process(target=debounce_and_unique, args=(db, w, n, barrier, results)) for w in range(2)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert all(kind == "ok" for kind, _ in got), got
    rows = db_rows(db, "SELECT id, idempotency_key, status, payload FROM jobs ORDER BY id")
    assert sorted(r[1] for r in rows) == ["d", "u"]
    by_key = {r[1]: r for r in rows}
    assert by_key["d"][2] == "delayed"
    assert by_key["d"][3] in ('{"w":0,"i":29}', '{"w":1,"i":29}')
    for _, answered in got:
        assert answered == {"d": [by_key["d"][0]] * n, "u": [by_key["u"][0]] * n}
