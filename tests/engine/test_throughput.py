"""`ReadModel.throughput`: the overview chart's completed/failed counts per minute, read
from `finished_at` on both backends (`db`), with a fake clock so the minutes are known."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jobledger as jl
from jobledger._observe.read_model import ReadModel
from jobledger.testing import FakeClock, drain
from tests.conftest import run
from tests.engine import ITEM, Item, make_manager

START = datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)  # 10 s into a minute


def test_counts_per_minute_over_the_last_hour(db: str) -> None:
    clock = FakeClock(START)
    jobs = make_manager(db, clock=clock)

    @jobs.handler(ITEM, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def work(ctx: jl.JobContext[Item]) -> None:
        if ctx.payload.n < 0:
            raise RuntimeError("negative")

    async def batch(ns: list[int]) -> None:
        for n in ns:
            jobs.enqueue(ITEM, Item(n=n))
        await drain(jobs)

    async def main() -> None:
        async with jobs:
            await batch([1, 2, -1])  # 12:00
            clock.advance(90)
            await batch([3, -2, -3])  # 12:01
            clock.advance(60 * 60)  # 13:01:40: the 12:00 minute is out of the window
            await batch([4])

    run(main())
    with ReadModel(db, clock=clock) as rm:
        series = rm.throughput(60)
        assert len(series) == 60
        assert series[0][0] == datetime(2026, 3, 1, 12, 2, tzinfo=UTC)
        assert series[-1][0] == datetime(2026, 3, 1, 13, 1, tzinfo=UTC)
        assert [at for at, _, _ in series] == [
            series[0][0] + timedelta(minutes=i) for i in range(60)
        ]
        assert series[-1][1:] == (1, 0)
        assert sum(c for _, c, _ in series[:-1]) == sum(f for _, _, f in series) == 0
        wider = rm.throughput(120)
        by_minute = {at: (c, f) for at, c, f in wider if c or f}
        assert by_minute == {
            datetime(2026, 3, 1, 12, 0, tzinfo=UTC): (2, 1),
            datetime(2026, 3, 1, 12, 1, tzinfo=UTC): (1, 2),
            datetime(2026, 3, 1, 13, 1, tzinfo=UTC): (1, 0),
        }
