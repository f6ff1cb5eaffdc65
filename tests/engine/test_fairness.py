"""Queues share the global cap fairly: a queue the cap turned away gets the next turn.

When the global cap binds, a finishing job frees a slot for every queue at once. Kicked
in a fixed order, the first queues would take every freed slot again and again and the
others would wait until those ran dry; the engine kicks the queues the cap turned away
first ("passing the turn").
"""

from __future__ import annotations

import jobledger as jl
from tests.conftest import run
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
