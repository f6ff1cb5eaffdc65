"""`jobs.explain(job_id)` (DESIGN §8.9): why a job is not running now, from the table and
the manager's own knowledge; `jobledger jobs why`, `GET /api/jobs/{id}/explain` and the
job page read the same. Both backends (`db`)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pydantic
import pytest

import jobledger as jl
from jobledger._observe.http import create_app
from tests.cli.conftest import jobledger
from tests.conftest import db_rows, run, wait_until
from tests.engine import make_manager
from tests.http.conftest import running_server


class N(pydantic.BaseModel):
    n: int = 0


SLOW = jl.JobType("why.slow", N)
OTHER = jl.JobType("why.other", N)
RATED = jl.JobType("why.rated", N)


def codes(explained: jl.Explanation | None) -> list[str]:
    assert explained is not None
    return [r.code for r in explained.reasons]


def test_a_job_due_later_with_no_live_worker(db: str) -> None:
    producer = make_manager(db)  # never started: no worker is alive
    later = producer.enqueue(SLOW, N(), run_at=datetime.now(UTC) + timedelta(hours=1))
    explained = producer.explain(later.id)
    assert explained is not None
    assert explained.status == jl.JobStatus.DELAYED
    assert codes(explained) == ["RUN_AT_IN_FUTURE", "NO_LIVE_WORKER"]
    assert "no worker is alive" in explained.reasons[1].message
    assert producer.explain("no-such-job") is None
    with pytest.raises(jl.JobError) as bad:
        producer.explain(3)  # type: ignore[arg-type]
    assert bad.value.code == "JOB_INVALID_OPTION"


def test_full_queue_global_cap_rate_limit_pause_and_upstream(db: str) -> None:
    jobs = make_manager(db, global_max_concurrency=2)
    release = asyncio.Event()
    started: list[int] = []

    @jobs.handler(SLOW, recovery="retry", concurrency=1)
    async def slow(ctx: jl.JobContext[N]) -> None:
        started.append(ctx.payload.n)
        await release.wait()

    @jobs.handler(OTHER, recovery="retry", concurrency=5)
    async def other(ctx: jl.JobContext[N]) -> None:
        started.append(100 + ctx.payload.n)
        await release.wait()

    @jobs.handler(RATED, recovery="retry", rate_limit=jl.RateLimit(1, 60))
    async def rated(ctx: jl.JobContext[N]) -> None:
        started.append(200 + ctx.payload.n)

    async def main() -> dict[str, list[str]]:
        async with jobs:
            rate_first = await jobs.enqueue(RATED, N()).finished
            assert rate_first.status == jl.JobStatus.COMPLETED
            rated_second = jobs.enqueue(RATED, N(n=1))
            jobs.enqueue(SLOW, N())
            queued = jobs.enqueue(SLOW, N(n=1))
            jobs.enqueue(OTHER, N())
            capped = jobs.enqueue(OTHER, N(n=1))
            while len([s for s in started if s < 200]) < 2:
                await asyncio.sleep(0.01)
            wf = jobs.workflow("why")
            top = wf.add(SLOW, N(n=2), name="top")
            wf.add(OTHER, N(n=2), name="after", after=[top])
            flow = wf.enqueue()
            got = {
                "queued": codes(jobs.explain(queued.id)),
                "capped": codes(jobs.explain(capped.id)),
                "rated": codes(jobs.explain(rated_second.id)),
                "after": codes(jobs.explain(flow.jobs["after"][0].id)),
            }
            jobs.pause_queue(SLOW.name)
            with jobs.pause("deploy"):
                got["paused"] = codes(jobs.explain(queued.id))
            jobs.resume_queue(SLOW.name)
            release.set()
            return got

    got = run(main())
    # Two jobs run (one of each type): the global cap of 2 is full.
    assert got["queued"] == ["QUEUE_FULL", "GLOBAL_FULL"]
    assert got["capped"] == ["GLOBAL_FULL"]
    assert got["rated"] == ["GLOBAL_FULL", "RATE_LIMITED"]
    assert got["after"] == ["WAITING_UPSTREAM", "GLOBAL_FULL"]
    assert got["paused"] == ["QUEUE_PAUSED", "MANAGER_PAUSED", "QUEUE_FULL", "GLOBAL_FULL"]


def test_a_running_job_of_a_dead_worker_awaits_recovery(db: str) -> None:
    producer = make_manager(db)
    job = producer.enqueue(SLOW, N())
    db_rows(
        db,
        "UPDATE jobs SET status = 'running', worker_id = 'ghost', started_at = 1000 WHERE id = ?",
        (job.id,),
    )
    explained = producer.explain(job.id)
    assert explained is not None
    assert explained.status == jl.JobStatus.RUNNING
    assert codes(explained) == ["RECOVERY_PENDING"]
    assert "ghost" in explained.reasons[0].message


def test_the_cli_the_api_and_the_job_page_say_the_same(db: str, tmp_path: Path) -> None:
    producer = make_manager(db)
    later = producer.enqueue(SLOW, N(), run_at=datetime.now(UTC) + timedelta(hours=1))
    producer.set_queue_limits(SLOW.name, concurrency=3)

    shown = jobledger("--db", db, "jobs", "why", later.id, cwd=tmp_path, check=True).stdout
    lines = shown.splitlines()
    assert lines[0] == f"{later.id} delayed"
    assert lines[1].startswith("  RUN_AT_IN_FUTURE it is due at ")
    assert lines[2].startswith("  NO_LIVE_WORKER no live worker handles the type 'why.slow'")
    as_json = json.loads(
        jobledger("--db", db, "jobs", "why", later.id, "--json", cwd=tmp_path, check=True).stdout
    )
    assert [r["code"] for r in as_json["reasons"]] == ["RUN_AT_IN_FUTURE", "NO_LIVE_WORKER"]
    missing = jobledger("--db", db, "jobs", "why", "nope", cwd=tmp_path)
    assert missing.returncode == 1
    assert "JOB_NOT_FOUND" in missing.stderr

    app = create_app(db)
    try:
        with running_server(app) as url:
            api = httpx.get(f"{url}/api/jobs/{later.id}/explain", timeout=10)
            assert api.status_code == 200
            body = api.json()
            assert (body["job_id"], body["status"]) == (later.id, "delayed")
            assert [r["code"] for r in body["reasons"]] == ["RUN_AT_IN_FUTURE", "NO_LIVE_WORKER"]
            assert httpx.get(f"{url}/api/jobs/nope/explain", timeout=10).status_code == 404
            page = httpx.get(f"{url}/jobs/{later.id}", timeout=10).text
            assert 'id="why-section"' in page
            assert "RUN_AT_IN_FUTURE" in page
    finally:
        app.state.read_model.close()


def test_a_handler_waiting_for_a_durable_lock(db: str) -> None:
    jobs = make_manager(db)
    release = asyncio.Event()
    holding = asyncio.Event()

    @jobs.handler(SLOW, recovery="retry", concurrency=2)
    async def slow(ctx: jl.JobContext[N]) -> None:
        async with ctx.lock("shared-resource"):
            holding.set()
            await release.wait()

    async def main() -> tuple[list[str], list[str], list[str]]:
        async with jobs:
            first = jobs.enqueue(SLOW, N(n=1))
            await holding.wait()
            second = jobs.enqueue(SLOW, N(n=2))
            # Running, and its handler has found the lock taken at least once.
            await wait_until(
                lambda: codes(jobs.explain(second.id)) == ["LOCK_HELD"],
                what="the second job to wait for the lock",
            )
            got = codes(jobs.explain(second.id)), codes(jobs.explain(first.id))
            release.set()
            await second.finished
            return got[0], got[1], codes(jobs.explain(second.id))

    waiting, holder, done = run(main())
    assert waiting == ["LOCK_HELD"]
    assert holder == []
    assert done == []
