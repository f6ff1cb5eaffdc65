"""`POST /api/jobs/{id}/retry` (with `--allow-actions` and the token) on a real uvicorn
server, on both backends; the dashboard's Retry button and "retry of" link in the HTML."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger._observe.openapi import openapi_schema
from tests.conftest import db_rows
from tests.http.conftest import WORK, Item, running_server

TOKEN = {"authorization": "Bearer t0ken"}


def _jobs(db: str) -> tuple[jl.JobManager, dict[str, str]]:
    """A manager with WORK's handler (never started), and a failed, a completed and a
    pending job, each ended by writing its row the way a worker does."""
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(WORK, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def work(ctx: jl.JobContext[Item]) -> int:
        if ctx.payload.n < 0:
            raise RuntimeError("negative")
        return ctx.payload.n

    async def main() -> dict[str, str]:
        async with jobs:
            failed = jobs.enqueue(WORK, Item(n=-1), idempotency_key="k", metadata={"m": 1})
            done = jobs.enqueue(WORK, Item(n=2))
            await asyncio.wait_for(failed.finished, 20)
            await asyncio.wait_for(done.finished, 20)
        return {"failed": failed.id, "completed": done.id}

    ids = asyncio.run(main())
    ids["pending"] = jobs.enqueue(WORK, Item(n=3), delay=3600).id
    return jobs, ids


def _count(db: str) -> int:
    return int(db_rows(db, "SELECT count(*) FROM jobs")[0][0])


def test_retry_writes_a_new_job_and_answers_201_with_it(db: str) -> None:
    jobs, ids = _jobs(db)
    app = create_app(db, token="t0ken", allow_actions=True, action_manager=jobs)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=20) as client:
            failed = ids["failed"]
            assert client.post(f"/api/jobs/{failed}/retry").status_code == 401
            assert _count(db) == 3

            made = client.post(f"/api/jobs/{failed}/retry", headers=TOKEN)
            assert made.status_code == 201, made.text
            new = made.json()
            assert made.headers["location"] == f"/api/jobs/{new['id']}"
            assert (new["retry_of"], new["status"], new["attempt"]) == (failed, "pending", 0)
            assert (new["payload"], new["metadata"], new["idempotency_key"]) == (
                {"n": -1, "note": ""}, {"m": 1}, None,
            )  # fmt: skip
            assert client.get(f"/api/jobs/{new['id']}", headers=TOKEN).json() == new
            old = client.get(f"/api/jobs/{failed}", headers=TOKEN).json()
            assert (old["status"], old["retry_of"]) == ("failed", None)

            fixed = client.post(
                f"/api/jobs/{ids['completed']}/retry", headers=TOKEN, json={"payload": {"n": 9}}
            )
            assert fixed.status_code == 201
            assert fixed.json()["payload"] == {"n": 9, "note": ""}  # validated by the handler

            before = _count(db)
            refusals: list[tuple[str, dict[str, Any], int, str]] = [
                (ids["pending"], {}, 409, "JOB_NOT_RETRYABLE"),
                ("no-such-job", {}, 404, "JOB_NOT_FOUND"),
                (failed, {"json": {"payload": {"n": "x"}}}, 400, "JOB_PAYLOAD_INVALID"),
                (failed, {"content": b"{"}, 400, "INVALID_BODY"),
                (failed, {"json": [1]}, 400, "INVALID_BODY"),
                (failed, {"json": {"payload": {}, "queue": "x"}}, 400, "INVALID_BODY"),
            ]
            for job_id, body, status, code in refusals:
                answer = client.post(f"/api/jobs/{job_id}/retry", headers=TOKEN, **body)
                assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
            assert _count(db) == before
            assert client.get(f"/api/jobs/{failed}/retry", headers=TOKEN).status_code == 405
    finally:
        asyncio.run(jobs.stop())
        app.state.read_model.close()


def test_without_an_app_a_payload_only_has_to_be_json(db: str) -> None:
    jobs, ids = _jobs(db)
    asyncio.run(jobs.stop())
    bare = create_app(db, token="t0ken", allow_actions=True)  # no handlers
    try:
        with running_server(bare) as url, httpx.Client(base_url=url, timeout=20) as client:
            made = client.post(
                f"/api/jobs/{ids['failed']}/retry", headers=TOKEN, json={"payload": {"x": [1]}}
            )
            assert made.status_code == 201, made.text
            assert (made.json()["payload"], made.json()["type"]) == ({"x": [1]}, WORK.name)
    finally:
        for manager in bare.state.action_managers.values():
            asyncio.run(manager.stop())
        bare.state.read_model.close()


def test_the_job_page_offers_retry_on_finished_jobs_and_links_a_retry_to_its_origin(
    db: str,
) -> None:
    jobs, ids = _jobs(db)
    again = jobs.retry(ids["failed"])
    app = create_app(db, token="t0ken", allow_actions=True, action_manager=jobs)
    read_only = create_app(db)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=20) as client:
            failed_page = client.get(f"/jobs/{ids['failed']}", headers=TOKEN).text
            assert f'data-action-url="/api/jobs/{ids["failed"]}/retry"' in failed_page
            assert 'id="retry-of"' not in failed_page
            pending_page = client.get(f"/jobs/{ids['pending']}", headers=TOKEN).text
            assert "/retry" not in pending_page
            retry_page = client.get(f"/jobs/{again.id}", headers=TOKEN).text
            assert f'href="/jobs/{ids["failed"]}"' in retry_page
            assert 'id="retry-of"' in retry_page
        with running_server(read_only) as url:
            page = httpx.get(f"{url}/jobs/{ids['failed']}", timeout=20).text
            assert "data-action-url" not in page
            missing = httpx.post(f"{url}/api/jobs/{ids['failed']}/retry", timeout=20)
            assert (missing.status_code, missing.json()["error"]["code"]) == (404, "NOT_FOUND")
    finally:
        asyncio.run(jobs.stop())
        app.state.read_model.close()
        read_only.state.read_model.close()


def test_openapi_documents_retry_only_with_actions() -> None:
    with_actions = openapi_schema(actions=True)
    assert "post" in with_actions["paths"]["/api/jobs/{job_id}/retry"]
    assert "/api/jobs/{job_id}/retry" not in openapi_schema()["paths"]
    job = with_actions["components"]["schemas"]["Job"]
    assert "retry_of" in job["properties"]
    assert "retry_of" in job["required"]
