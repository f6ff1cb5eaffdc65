"""`--allow-actions`: the two POST routes (cancel a job, run a schedule now), behind a token."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

import jobledger as jl
from jobledger._observe.http import create_app
from tests.http.conftest import WORK, Item, running_server

TOKEN = {"authorization": "Bearer t0ken"}


def _manager(path: str) -> jl.JobManager:
    jobs = jl.JobManager(path)

    @jobs.handler(WORK, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    return jobs


def test_cancel_and_run_now_need_the_token_and_act(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = _manager(db)
    job_id = jobs.enqueue(WORK, Item(n=1)).id
    done_id = jobs.enqueue(WORK, Item(n=2)).id
    asyncio.run(jobs.cancel(done_id))
    sid = jobs.register_job_schedule(WORK, Item(n=3), trigger=jl.Interval(seconds=3600))

    app = create_app(db, token="t0ken", allow_actions=True, action_manager=jobs)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=20) as client:
            assert client.post(f"/api/jobs/{job_id}/cancel").status_code == 401
            page = client.get(f"/jobs/{job_id}", headers=TOKEN).text
            assert f'data-action-url="/api/jobs/{job_id}/cancel"' in page
            done_page = client.get(f"/jobs/{done_id}", headers=TOKEN).text
            # A finished job cannot be cancelled, only retried (tests/http/test_retry.py).
            assert "/cancel" not in done_page
            assert f'data-action-url="/api/jobs/{done_id}/retry"' in done_page
            assert (
                f'data-action-url="/api/schedules/{sid}/run"'
                in client.get("/schedules", headers=TOKEN).text
            )

            cancelled = client.post(f"/api/jobs/{job_id}/cancel?reason=nope", headers=TOKEN)
            assert cancelled.json() == {"id": job_id, "outcome": "cancelled"}
            snap = client.get(f"/api/jobs/{job_id}", headers=TOKEN).json()
            assert (snap["status"], snap["error"]["message"]) == ("cancelled", "nope")
            again = client.post(f"/api/jobs/{job_id}/cancel", headers=TOKEN)
            assert again.json()["outcome"] == "not-cancellable"
            missing = client.post("/api/jobs/nope/cancel", headers=TOKEN)
            assert (missing.status_code, missing.json()["error"]["code"]) == (404, "JOB_NOT_FOUND")

            ran = client.post(f"/api/schedules/{sid}/run", headers=TOKEN)
            assert ran.json() == {"id": sid, "enqueued": True}
            fired = client.get("/api/jobs", params={"schedule_id": sid}, headers=TOKEN).json()
            assert fired["total"] == 1
            assert fired["items"][0]["payload"] == {"n": 3, "note": ""}
            assert client.post("/api/schedules/nope/run", headers=TOKEN).status_code == 404
            assert client.get(f"/api/schedules/{sid}/run", headers=TOKEN).status_code == 405
    finally:
        asyncio.run(jobs.stop())
        app.state.read_model.close()


def test_without_a_handler_run_now_is_refused_and_without_actions_there_are_no_posts(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = _manager(db)
    job_id = jobs.enqueue(WORK, Item(n=1)).id
    sid = jobs.register_job_schedule(WORK, Item(n=3), trigger=jl.Interval(seconds=3600))
    asyncio.run(jobs.stop())

    bare = create_app(db, token="t0ken", allow_actions=True)  # no app: no handlers
    read_only = create_app(db)
    try:
        with running_server(bare) as url:
            refused = httpx.post(f"{url}/api/schedules/{sid}/run", headers=TOKEN, timeout=20)
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == "JOB_UNKNOWN_TYPE"
            cancelled = httpx.post(f"{url}/api/jobs/{job_id}/cancel", headers=TOKEN, timeout=20)
            assert cancelled.json()["outcome"] == "cancelled"
        with running_server(read_only) as url:
            assert httpx.post(f"{url}/api/jobs/{job_id}/cancel", timeout=20).status_code == 404
            assert "data-action-url" not in httpx.get(f"{url}/jobs/{job_id}", timeout=20).text
    finally:
        for app in (bare, read_only):
            for used in app.state.action_managers.values():
                asyncio.run(used.stop())
            app.state.read_model.close()


def test_backfill_a_schedule_needs_the_token_and_writes_each_fire_once(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = _manager(db)
    sid = jobs.register_job_schedule(
        WORK, Item(n=3), trigger=jl.Cron("0 * * * *"), enabled=False, overlap="buffer_one"
    )
    body = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T03:00:00Z"}
    app = create_app(db, token="t0ken", allow_actions=True, action_manager=jobs)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=20) as client:
            url_of = f"/api/schedules/{sid}/backfill"
            assert client.post(url_of, json=body).status_code == 401
            first = client.post(url_of, json=body, headers=TOKEN)
            assert first.json() == {"id": sid, "written": 3}
            assert client.post(url_of, json=body, headers=TOKEN).json()["written"] == 0
            listed = client.get("/api/schedules", headers=TOKEN).json()["items"]
            assert (listed[0]["overlap"], listed[0]["jitter"]) == ("buffer_one", 0.0)
            future = {"from": "2026-01-01T00:00:00Z", "to": "2999-01-01T00:00:00Z"}
            refused = client.post(url_of, json=future, headers=TOKEN)
            assert (refused.status_code, refused.json()["error"]["code"]) == (
                400,
                "JOB_INVALID_OPTION",
            )
            shape = client.post(url_of, json={"from": "x"}, headers=TOKEN)
            assert (shape.status_code, shape.json()["error"]["code"]) == (400, "INVALID_BODY")
            gone = client.post("/api/schedules/nope/backfill", json=body, headers=TOKEN)
            assert (gone.status_code, gone.json()["error"]["code"]) == (
                404,
                "JOB_SCHEDULE_NOT_FOUND",
            )
    finally:
        asyncio.run(jobs.stop())
        app.state.read_model.close()
    assert jobs.count(schedule_id=sid) == 3
