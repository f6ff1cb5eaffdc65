"""The HTTP API, the dashboard and `/metrics` on both backends (a real uvicorn server over
a SQLite file or a PostgreSQL schema), and counters that GC does not lower."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger._storage.open import open_store
from tests.conftest import is_postgres
from tests.http.conftest import WAIT, Item, running_server

SECRET = "s3cret-http"
WORK = jl.JobType("be.work", Item)
FAIL = jl.JobType("be.fail", Item)
IDLE = jl.JobType("be.idle", Item)


def _with_password(url: str) -> str:
    if not is_postgres(url):
        return url
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:{SECRET}@{host}"))


def _populate(db: str) -> dict[str, str]:
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(WORK, recovery="retry", queue="be.fast")
    async def work(ctx: jl.JobContext[Item]) -> int:
        return ctx.payload.n

    @jobs.handler(FAIL, recovery="retry", retry=jl.RetryPolicy(max_attempts=2, base_delay=0.01))
    def fail(ctx: jl.JobContext[Item]) -> None:
        raise RuntimeError("no")

    async def main() -> dict[str, str]:
        async with jobs:
            done = [jobs.enqueue(WORK, Item(n=i)) for i in range(3)]
            failed = jobs.enqueue(FAIL, Item(n=9))
            sid = jobs.register_job_schedule(
                WORK, Item(n=1), trigger=jl.Cron("0 0 1 1 *"), name="yearly"
            )
            for h in [*done, failed]:
                await asyncio.wait_for(h.finished, WAIT)
            return {
                "done": done[0].id,
                "failed": failed.id,
                "pending": jobs.enqueue(IDLE, Item(n=5)).id,
                "schedule": sid,
            }

    return asyncio.run(main())


@pytest.fixture
def served(db: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    ids = _populate(db)
    app = create_app(_with_password(db), poll_interval=0.02)
    try:
        with running_server(app) as url:
            yield db, url, ids
    finally:
        app.state.read_model.close()


def _metrics(url: str) -> dict[tuple[str, str], float]:
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            key = s.labels.get("queue", "") + "/" + s.labels.get("state", "")
            out[(s.name, key)] = float(s.value)
    return out


def test_the_api_and_the_dashboard_on_every_backend(
    served: tuple[str, str, dict[str, str]],
) -> None:
    db, url, ids = served
    page = httpx.get(f"{url}/api/jobs", params={"limit": 2}, timeout=10).json()
    assert (page["total"], page["limit"], len(page["items"])) == (5, 2, 2)
    assert page["items"][0]["id"] == ids["pending"]
    failed = httpx.get(f"{url}/api/jobs", params={"status": "failed"}, timeout=10).json()
    assert [j["id"] for j in failed["items"]] == [ids["failed"]]
    one = httpx.get(f"{url}/api/jobs/{ids['done']}", timeout=10).json()
    assert (one["status"], one["output"], one["queue"]) == ("completed", 0, "be.fast")
    assert httpx.get(f"{url}/api/jobs/nope", timeout=10).status_code == 404

    queues = {
        q["name"]: q["counts"] for q in httpx.get(f"{url}/api/queues", timeout=10).json()["items"]
    }
    assert queues["be.fast"]["completed"] == 3
    assert queues["be.fail"]["failed"] == 1
    assert queues["be.idle"]["pending"] == 1
    schedules = httpx.get(f"{url}/api/schedules", timeout=10).json()["items"]
    assert [(s["id"], s["name"], s["trigger_text"]) for s in schedules] == [
        (ids["schedule"], "yearly", "cron 0 0 1 1 *")
    ]
    workers = httpx.get(f"{url}/api/workers", timeout=10).json()
    assert [w["state"] for w in workers["items"]] == ["stopped"]
    assert workers["leader"] is not None
    health = httpx.get(f"{url}/api/health", timeout=10).json()
    assert health["status"] == "ok"

    html = httpx.get(f"{url}/", timeout=10)
    assert html.status_code == 200
    assert 'data-queue="be.idle"' in html.text
    assert SECRET not in html.text
    listed = httpx.get(f"{url}/jobs", timeout=10).text
    assert ids["pending"] in listed
    assert SECRET not in listed
    assert "yearly" in httpx.get(f"{url}/schedules", timeout=10).text
    assert httpx.get(f"{url}/jobs/{ids['failed']}", timeout=10).status_code == 200
    with httpx.stream("GET", f"{url}/api/jobs/{ids['done']}/events", timeout=WAIT) as events:
        assert "event: snapshot" in "".join(events.iter_text())

    m = _metrics(url)
    assert m[("jobledger_jobs", "be.fast/completed")] == 3
    assert m[("jobledger_jobs_completed_total", "be.fast/")] == 3
    assert m[("jobledger_jobs_failed_total", "be.fail/")] == 1
    assert m[("jobledger_jobs_started_total", "be.fail/")] == 2
    assert m[("jobledger_jobs_retried_total", "be.fail/")] == 1
    assert m[("jobledger_job_run_seconds_count", "be.fast/")] == 3
    assert m[("jobledger_workers", "/stopped")] == 1
    assert m[("jobledger_leader_term", "/")] >= 1
    assert db  # the fixture's database, served above


def test_counters_do_not_go_down_after_gc(served: tuple[str, str, dict[str, str]]) -> None:
    db, url, _ = served
    before = _metrics(url)
    counters = {k: v for k, v in before.items() if k[0].endswith("_total")}
    assert counters[("jobledger_jobs_completed_total", "be.fast/")] == 3

    store = open_store(db)
    try:
        assert store.gc(10**15) == 4  # every finished row, the failed one included
    finally:
        store.close()

    after = _metrics(url)
    assert after[("jobledger_jobs", "be.fast/completed")] == 0  # the gauge follows the rows
    assert after[("jobledger_jobs", "be.fail/failed")] == 0
    for key, value in counters.items():
        assert after.get(key) == value, key  # same series, same value: nothing went down
    assert ("jobledger_job_run_seconds_count", "be.fast/") not in after  # rows are gone

    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(WORK, recovery="retry", queue="be.fast")
    async def work(ctx: jl.JobContext[Item]) -> int:
        return ctx.payload.n

    async def one_more() -> Any:
        async with jobs:
            return await asyncio.wait_for(jobs.enqueue(WORK, Item(n=1)).finished, WAIT)

    assert asyncio.run(one_more()).status == "completed"
    again = _metrics(url)
    assert again[("jobledger_jobs_completed_total", "be.fast/")] == 4
    assert again[("jobledger_jobs_started_total", "be.fast/")] == 4
