"""Concurrency caps (layer 2 and the global cap), seen from the table and from handlers.

Two independent witnesses per test: counters bumped on handler entry/exit (what really
ran at once in this process) and `count(status='running')` sampled inside handlers (what
the table, the cross-process source of truth, says). Every backlog is larger than the cap,
so a lost kick would show up as a deadlock (the run timeout), not as a pass.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import jobledger as jl
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager


class Gauge:
    """Handler entry/exit counter that remembers its high-water mark (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.entered = 0

    def enter(self) -> None:
        with self._lock:
            self.active += 1
            self.entered += 1
            self.peak = max(self.peak, self.active)

    def exit(self) -> None:
        with self._lock:
            self.active -= 1


def test_queue_cap_of_two_holds_for_fifty_jobs(db: str) -> None:
    jobs = make_manager(db)
    gauge = Gauge()
    db_samples: list[int] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=2)
    async def work(ctx: jl.JobContext[Item]) -> int:
        gauge.enter()
        try:
            db_samples.append(jobs.count(status="running", queue=ITEM.name))
            await asyncio.sleep(0.002)
            db_samples.append(jobs.count(status="running", queue=ITEM.name))
            return ctx.payload.n
        finally:
            gauge.exit()

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            handles = [jobs.enqueue(ITEM, Item(n=i)) for i in range(50)]
            return [await h.finished for h in handles]

    snaps = run(main())
    assert [s.status for s in snaps] == [jl.JobStatus.COMPLETED] * 50
    assert [s.output for s in snaps] == list(range(50))
    assert gauge.entered == 50
    # Exactly two: the cap is reached (so it is the cap that limits) and never exceeded.
    assert gauge.peak == 2
    assert max(db_samples) == 2
    assert min(db_samples) >= 1


def test_plain_def_handlers_respect_the_queue_cap(db: str) -> None:
    jobs = make_manager(db)
    gauge = Gauge()
    db_samples: list[int] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=3)
    def work(ctx: jl.JobContext[Item]) -> None:
        gauge.enter()
        try:
            db_samples.append(jobs.count(status="running"))
            time.sleep(0.003)
        finally:
            gauge.exit()

    async def main() -> None:
        async with jobs:
            handles = [jobs.enqueue(ITEM, Item(n=i)) for i in range(30)]
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert gauge.entered == 30
    assert gauge.peak <= 3
    assert max(db_samples) <= 3


def test_global_cap_holds_across_queues(db: str) -> None:
    jobs = make_manager(db, global_max_concurrency=3)
    gauge = Gauge()
    per_queue: dict[str, Gauge] = {f"q{i}": Gauge() for i in range(4)}
    db_samples: list[int] = []

    # Four queues of cap 2 would allow 8 at once; the global cap must keep it at 3.
    @jobs.handler(ITEM, recovery="retry", concurrency=2, queue=lambda p: f"q{p.n % 4}")
    async def work(ctx: jl.JobContext[Item]) -> None:
        gauge.enter()
        per_queue[ctx.queue].enter()
        try:
            db_samples.append(jobs.count(status="running"))
            await asyncio.sleep(0.002)
        finally:
            per_queue[ctx.queue].exit()
            gauge.exit()

    async def main() -> None:
        async with jobs:
            handles = [jobs.enqueue(ITEM, Item(n=i)) for i in range(40)]
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert gauge.entered == 40
    assert gauge.peak == 3
    assert max(db_samples) <= 3
    assert all(g.peak <= 2 for g in per_queue.values())
    assert sum(g.entered for g in per_queue.values()) == 40


def test_global_cap_blocked_backlog_never_deadlocks(db: str) -> None:
    # A global cap below the number of queues: most kicks find the global cap full, so
    # every finish must wake the queues it blocked, or the backlog stalls.
    jobs = make_manager(db, global_max_concurrency=2)
    gauge = Gauge()
    other = jl.JobType("test.other", Item)

    @jobs.handler(ITEM, recovery="retry", concurrency=2, queue=lambda p: f"q{p.n % 5}")
    async def work(ctx: jl.JobContext[Item]) -> None:
        gauge.enter()
        try:
            await asyncio.sleep(0)
        finally:
            gauge.exit()

    @jobs.handler(other, recovery="retry", concurrency=1)
    def work_sync(ctx: jl.JobContext[Item]) -> None:
        gauge.enter()
        gauge.exit()

    async def main() -> None:
        async with jobs:
            handles = [jobs.enqueue(ITEM, Item(n=i)) for i in range(150)]
            handles += jobs.enqueue_many(other, [Item(n=i) for i in range(50)])
            for h in handles:
                assert (await h.finished).status == "completed"
            assert jobs.count(status=["pending", "delayed", "running"]) == 0

    run(main())
    assert gauge.entered == 200
    assert gauge.peak <= 2


def test_queue_cap_is_shared_by_two_workers_on_one_file(db: str) -> None:
    """The cap is counted in SQL, so two managers on one file together stay within it.

    Pauses stage the run so both workers certainly take part: `a` fills the queue's two
    slots while `b` is paused; then `b` is released while `a`'s jobs still run (it must
    not claim: the table says the queue is full), and finally `b` runs the rest.
    """
    gauge = Gauge()
    db_samples: list[int] = []
    ran_by: dict[str, str] = {}
    a, b = make_manager(db), make_manager(db)
    go = asyncio.Event()

    def register(jobs: jl.JobManager) -> None:
        @jobs.handler(ITEM, recovery="retry", concurrency=2)
        async def work(ctx: jl.JobContext[Item]) -> None:
            gauge.enter()
            try:
                ran_by[ctx.job_id] = jobs.worker_id
                db_samples.append(a.count(status="running"))
                await go.wait()
                await asyncio.sleep(0.001)
            finally:
                gauge.exit()

    register(a)
    register(b)

    async def main() -> None:
        async with a, b:
            hold_b = b.pause("let a go first")
            handles = [a.enqueue(ITEM, Item(n=i)) for i in range(20)]
            await wait_until(lambda: gauge.active == 2, what="a to fill both slots")
            hold_a = a.pause("let b try")
            hold_b.dispose()
            # b is free to claim now; the table says the queue is full, so it must not.
            await asyncio.sleep(0.1)
            assert gauge.active == 2
            assert b.count(status="running") == 2
            go.set()
            for h in handles:
                assert (await h.finished).status == "completed"
            hold_a.dispose()

    run(main())
    assert gauge.entered == 20
    assert gauge.peak == 2
    assert max(db_samples) == 2
    workers = list(ran_by.values())
    assert workers.count(a.worker_id) == 2
    assert workers.count(b.worker_id) == 18


def _blocking(db: str, **options: Any) -> tuple[jl.JobManager, Gauge, asyncio.Event]:
    """A manager whose handler (queue cap 50) holds its slot until the event is set."""
    jobs = make_manager(db, **options)
    gauge = Gauge()
    go = asyncio.Event()

    @jobs.handler(ITEM, recovery="retry", concurrency=50)
    async def work(ctx: jl.JobContext[Item]) -> None:
        gauge.enter()
        try:
            await go.wait()
        finally:
            gauge.exit()

    return jobs, gauge, go


def test_process_max_concurrency_limits_what_one_process_claims(db: str) -> None:
    jobs, gauge, go = _blocking(db, process_max_concurrency=3)

    async def main() -> None:
        async with jobs:
            handles = jobs.enqueue_many(ITEM, [Item(n=i) for i in range(20)])
            await wait_until(lambda: gauge.active == 3, what="three jobs to start")
            # The caps would let it claim all twenty: wait for its next dispatch to be
            # turned away by the process's own limit, then look at the table.
            await wait_until(lambda: jobs._engine.global_blocked, what="a refused claim")
            assert jobs.count(status="running") == 3
            go.set()
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert gauge.entered == 20
    assert gauge.peak == 3


def test_process_max_concurrency_splits_a_shared_cap_between_two_workers(db: str) -> None:
    gauge = {"a": Gauge(), "b": Gauge()}
    go = asyncio.Event()
    a = make_manager(db, process_max_concurrency=2)
    b = make_manager(db, process_max_concurrency=2)

    def register(jobs: jl.JobManager, name: str) -> None:
        @jobs.handler(ITEM, recovery="retry", concurrency=10)
        async def work(ctx: jl.JobContext[Item]) -> None:
            gauge[name].enter()
            try:
                await go.wait()
            finally:
                gauge[name].exit()

    register(a, "a")
    register(b, "b")

    async def main() -> None:
        async with a, b:
            handles = a.enqueue_many(ITEM, [Item(n=i) for i in range(10)])
            # Without the limit the first claim takes all ten and the other idles.
            await wait_until(
                lambda: gauge["a"].active == 2 and gauge["b"].active == 2,
                what="both workers to run two jobs each",
            )
            go.set()
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert gauge["a"].peak == 2
    assert gauge["b"].peak == 2
    assert gauge["a"].entered + gauge["b"].entered == 10


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "2"])
def test_process_max_concurrency_must_be_a_positive_integer(db: str, bad: object) -> None:
    with pytest.raises(jl.JobValidationError) as info:
        jl.JobManager(db, process_max_concurrency=bad)  # type: ignore[arg-type]
    assert info.value.code == "JOB_INVALID_OPTION"
    jobs = make_manager(db, process_max_concurrency=2)
    with pytest.raises(jl.JobValidationError) as info:
        jobs.process_max_concurrency = bad  # type: ignore[assignment]
    assert info.value.code == "JOB_INVALID_OPTION"
    assert jobs.process_max_concurrency == 2
    run(jobs.stop())


def test_process_max_concurrency_can_change_while_running(db: str) -> None:
    jobs, gauge, go = _blocking(db, process_max_concurrency=2)

    async def main() -> None:
        async with jobs:
            handles = jobs.enqueue_many(ITEM, [Item(n=i) for i in range(10)])
            await wait_until(lambda: gauge.active == 2, what="two jobs to start")
            jobs.process_max_concurrency = 5
            await wait_until(lambda: gauge.active == 5, what="three more to start")
            jobs.process_max_concurrency = None
            await wait_until(lambda: gauge.active == 10, what="the rest to start")
            go.set()
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert gauge.entered == 10


@pytest.mark.parametrize("threads", [16, 5])
def test_plain_handlers_are_claimed_only_while_a_pool_thread_is_free(db: str, threads: int) -> None:
    # Pool threads (16 by default) under caps of fifty: a job claimed beyond the pool
    # would wait for a thread while counted as running.
    options = {} if threads == 16 else {"thread_pool_size": threads}
    jobs = make_manager(db, **options)
    gauge = Gauge()
    release = threading.Event()

    @jobs.handler(ITEM, recovery="retry", concurrency=50)
    def work(ctx: jl.JobContext[Item]) -> None:
        gauge.enter()
        try:
            assert release.wait(30)
        finally:
            gauge.exit()

    async def main() -> None:
        async with jobs:
            handles = jobs.enqueue_many(ITEM, [Item(n=i) for i in range(30)])
            try:
                await wait_until(lambda: gauge.active == threads, what="every thread busy")
                # The caps would let it claim all thirty: wait for a dispatch that the
                # pool turned away, then look at the table.
                await wait_until(lambda: jobs._engine.global_blocked, what="a refused claim")
                assert jobs.count(status="running") == threads
            finally:
                release.set()
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert gauge.entered == 30
    assert gauge.peak == threads


@pytest.mark.parametrize("bad", [0, True, 2.5])
def test_thread_pool_size_must_be_a_positive_integer(db: str, bad: object) -> None:
    with pytest.raises(jl.JobValidationError) as info:
        jl.JobManager(db, thread_pool_size=bad)  # type: ignore[arg-type]
    assert info.value.code == "JOB_INVALID_OPTION"
