"""`GET /api/throughput` on a real uvicorn server, on both backends: completed and failed
jobs per minute, oldest first, every minute present, and 400 INVALID_QUERY for a
`minutes` outside 1-1440."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger._observe.read_model import ReadModel
from jobledger.testing import FakeClock
from tests.http.conftest import running_server
from tests.recovery import arun

T = jl.JobType("thr.t", int)


def test_throughput_counts_per_minute_and_refuses_bad_minutes(db: str) -> None:
    clock = FakeClock(datetime(2026, 12, 1, 9, 30, 5, tzinfo=UTC))

    async def work() -> None:
        jobs = jl.JobManager(db, clock=clock, startup_delay=0, poll_interval=0.01)

        @jobs.handler(T, recovery="retry")
        async def t(ctx: jl.JobContext[int]) -> None:
            if ctx.payload < 0:
                raise jl.PermanentError("negative")

        async with jobs:
            for h in jobs.enqueue_many(T, [1, -1, -2]):
                await h.finished
            clock.advance(120)
            for h in jobs.enqueue_many(T, [2, 3, 4, 5]):
                await h.finished

    arun(work)
    rm = ReadModel(db, clock=clock)
    with running_server(create_app(db, read_model=rm)) as url, httpx.Client(base_url=url) as c:
        body = c.get("/api/throughput").json()
        assert body["minutes"] == 60
        items = body["items"]
        assert len(items) == 60
        assert items[-1] == {"at": "2026-12-01T09:32:00.000000Z", "completed": 4, "failed": 0}
        assert items[-2] == {"at": "2026-12-01T09:31:00.000000Z", "completed": 0, "failed": 0}
        assert items[-3] == {"at": "2026-12-01T09:30:00.000000Z", "completed": 1, "failed": 2}
        assert items[0]["at"] == "2026-12-01T08:33:00.000000Z"
        assert sum(i["completed"] + i["failed"] for i in items[:-3]) == 0
        three = c.get("/api/throughput", params={"minutes": "3"}).json()
        assert [i["completed"] for i in three["items"]] == [1, 0, 4]
        assert len(c.get("/api/throughput?minutes=1440").json()["items"]) == 1440
        for bad in ("0", "1441", "-1", "ten", "2.5", ""):
            r = c.get("/api/throughput", params={"minutes": bad})
            if bad == "":  # an empty value is the default, as for `limit`
                assert r.status_code == 200
                continue
            assert r.status_code == 400, bad
            assert r.json()["error"]["code"] == "INVALID_QUERY"
    rm.close()
