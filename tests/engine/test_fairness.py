"""Queues share the global cap fairly: a queue the cap turned away gets the next turn.

When the global cap binds, a finishing job frees a slot for every queue at once. Kicked
in a fixed order, the first queues would take every freed slot again and again and the
others would wait until those ran dry; the engine kicks the queues the cap turned away
first ("passing the turn").
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import jobledger as jl
from jobledger._runtime.engine import TURN_JOBS
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager

QUEUES = 6
PER_QUEUE = 4


def test_queues_turned_away_by_the_global_cap_go_next(db: str) -> None:
    jobs = make_manager(db, global_max_concurrency=2)
    order: list[str] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=1, queue=lambda p: f"q{p.n % QUEUES}")
    async def work(ctx: jl.JobContext[Item]) -> None:
        order.append(ctx.queue)

    # Every queue has a backlog before the worker starts, so from the first dispatch on
    # the global cap (2) is what binds, not the queues' caps (1 each, 6 queues).
    handles = [jobs.enqueue(ITEM, Item(n=i)) for i in range(QUEUES * PER_QUEUE)]

    async def main() -> None:
        async with jobs:
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert len(order) == QUEUES * PER_QUEUE
    # In a fixed kick order q0 and q1 would run all their jobs (the first 8 starts)
    # before any other queue ran once.
    assert set(order[: QUEUES + 2]) == {f"q{i}" for i in range(QUEUES)}, order


def test_a_queue_with_a_big_backlog_does_not_hold_back_small_ones(db: str) -> None:
    # "big" may take every slot of the global cap by its own cap, and its backlog was
    # enqueued first; the small queues still get their turns before it runs again.
    small = 20
    jobs = make_manager(db, global_max_concurrency=3)
    order: list[str] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=3, queue=lambda p: f"q{p.n}")
    async def work(ctx: jl.JobContext[Item]) -> None:
        order.append(ctx.queue)

    handles = [jobs.enqueue(ITEM, Item(n=0)) for _ in range(30)]
    handles += [jobs.enqueue(ITEM, Item(n=i)) for i in range(1, small + 1)]

    async def main() -> None:
        async with jobs:
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    last_small = max(i for i, q in enumerate(order) if q != "q0")
    # Taking turns, q0 runs about once per round of the small queues (a few times in
    # all); served in order of its backlog it would run its 30 jobs first.
    assert order[:last_small].count("q0") <= 10, order


def test_queues_take_turns_while_the_global_cap_binds(db: str) -> None:
    jobs = make_manager(db, global_max_concurrency=2)
    order: list[str] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=2, queue=lambda p: f"q{p.n % QUEUES}")
    async def work(ctx: jl.JobContext[Item]) -> None:
        order.append(ctx.queue)

    # Queue after queue, so claim order by id alone would run q0 to its end first.
    handles = [
        jobs.enqueue(ITEM, Item(n=q + QUEUES * k)) for q in range(QUEUES) for k in range(PER_QUEUE)
    ]

    async def main() -> None:
        async with jobs:
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert len(order) == QUEUES * PER_QUEUE
    # At every point of the drain no queue is more than a turn or two ahead of another.
    seen: Counter[str] = Counter()
    for q in order:
        seen[q] += 1
        counts = [seen[f"q{i}"] for i in range(QUEUES)]
        assert max(counts) - min(counts) <= 2, order


def test_a_worker_that_runs_nothing_takes_its_share_in_one_claim_across_queues(db: str) -> None:
    # Thirty queues of cap 5 under a global cap of 10, written by another manager (so
    # nothing local kicks a queue first). A worker that runs nothing claims across the
    # queues at once, a row from each of the first ten, in one transaction: several
    # workers started together no longer take the cap five slots at a time, queue by
    # queue, each keeping the share it got (docs/benchmarks.md, twenty-first round).
    producer = make_manager(db)
    for q in range(30):
        producer.enqueue_many(ITEM, [Item(n=q)] * 5, queue=f"q{q:02d}")
    run(producer.stop())
    jobs = make_manager(db, global_max_concurrency=10)
    first: list[str] = []
    go = asyncio.Event()

    @jobs.handler(ITEM, recovery="retry", concurrency=5)
    async def work(ctx: jl.JobContext[Item]) -> None:
        if len(first) < 10:
            first.append(ctx.queue)
            if len(first) < 10:
                await go.wait()
            else:
                go.set()

    async def main() -> None:
        async with jobs:
            await wait_until(lambda: jobs.count(status="completed") == 150, what="the drain")

    run(main())
    # Queue by queue, the first ten starts were q00 and q01's five each.
    assert sorted(first) == [f"q{q:02d}" for q in range(10)], first


def test_new_queues_each_start_once_before_a_queue_takes_turns_of_several(db: str) -> None:
    """A queue's first turn is one job, so a burst of queues all start within the first
    round of the cap's slots; once every queue has started, a turn is up to TURN_JOBS
    jobs of one queue (fewer queues a claim, docs/design/lock-layers.md), and no queue
    gets more than a turn ahead of the others while they have work."""
    queues, per_queue = 12, 16
    producer = make_manager(db)
    for q in range(queues):
        producer.enqueue_many(ITEM, [Item(n=q)] * per_queue, queue=f"q{q:02d}")
    run(producer.stop())
    jobs = make_manager(db, global_max_concurrency=8)
    order: list[str] = []

    @jobs.handler(ITEM, recovery="retry", concurrency=5)
    async def work(ctx: jl.JobContext[Item]) -> None:
        order.append(ctx.queue)
        await asyncio.sleep(0)

    async def main() -> None:
        async with jobs:
            total = queues * per_queue
            await wait_until(lambda: jobs.count(status="completed") == total, what="the drain")

    run(main())
    assert sorted(order[:queues]) == [f"q{q:02d}" for q in range(queues)], order
    # Later claims take several jobs of a queue in a row: its turn.
    runs = [len(list(g)) for _, g in itertools.groupby(order[queues:])]
    assert max(runs) > 1, order
    seen: Counter[str] = Counter()
    for name in order[: queues * per_queue // 2]:  # while every queue has work left
        seen[name] += 1
        counts = [seen[f"q{i:02d}"] for i in range(queues)]
        assert max(counts) - min(counts) <= 2 * TURN_JOBS, order
