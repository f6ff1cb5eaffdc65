"""`POST /api/queues/{queue}/pause|resume|limits` (with `--allow-actions` and the token) on
a real uvicorn server, on both backends; `GET /api/queues` reports what they set."""

from __future__ import annotations

import asyncio

import httpx

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger._observe.openapi import openapi_schema
from tests.http.conftest import running_server

TOKEN = {"authorization": "Bearer t0ken"}


def test_queue_actions_write_settings_every_worker_reads(db: str) -> None:
    jobs = jl.JobManager(db)
    jobs.enqueue(jl.JobType("http.q", dict), {}, queue="tenant/7")
    app = create_app(db, token="t0ken", allow_actions=True, action_manager=jobs)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=20) as client:
            assert client.post("/api/queues/tenant/7/pause").status_code == 401
            paused = client.post("/api/queues/tenant/7/pause", headers=TOKEN)
            assert paused.status_code == 200, paused.text
            assert paused.json() == {
                "queue": "tenant/7", "concurrency": None, "rate_limit": None, "paused": True,
            }  # fmt: skip
            limited = client.post(
                "/api/queues/tenant/7/limits",
                headers=TOKEN,
                json={"concurrency": 4, "rate_limit": "100/m"},
            )
            assert limited.status_code == 200, limited.text
            assert limited.json()["rate_limit"] == {"limit": 100, "per": 60.0, "text": "100/m"}
            listed = client.get("/api/queues", headers=TOKEN).json()["items"]
            (row,) = [q for q in listed if q["name"] == "tenant/7"]
            assert (row["concurrency"], row["paused"], row["counts"]["pending"]) == (4, True, 1)

            refusals = [
                ("/api/queues/tenant/7/limits", {"json": {"concurrency": 0}}, 400),
                ("/api/queues/tenant/7/limits", {"json": {"rate_limit": "fast"}}, 400),
                ("/api/queues/tenant/7/limits", {"json": {"queue": "x"}}, 400),
                ("/api/queues/tenant/7/limits", {"content": b"{"}, 400),
                ("/api/queues/tenant/7/explode", {}, 404),
            ]
            for path, body, status in refusals:
                answer = client.post(path, headers=TOKEN, **body)  # type: ignore[arg-type]
                assert answer.status_code == status, (path, body, answer.text)
            assert jobs.queue_limits("tenant/7") == jl.QueueLimits(
                "tenant/7", 4, jl.RateLimit(100, 60), True
            )
            resumed = client.post("/api/queues/tenant/7/resume", headers=TOKEN)
            assert resumed.json()["paused"] is False
    finally:
        asyncio.run(jobs.stop())
        app.state.read_model.close()


def test_openapi_documents_queue_actions_only_with_actions() -> None:
    assert "/api/queues/{queue}/pause" not in openapi_schema(actions=False)["paths"]
    paths = openapi_schema(actions=True)["paths"]
    for action in ("pause", "resume", "limits"):
        assert "post" in paths[f"/api/queues/{{queue}}/{action}"]
