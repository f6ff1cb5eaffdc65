"""The read-only HTTP API against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobledger._storage.sqlite.migrate import SCHEMA_VERSION
from tests.http.conftest import Populated


def _get(base_url: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(base_url + path, params=params, timeout=10)


def _ids(base_url: str, **params: Any) -> list[str]:
    r = _get(base_url, "/api/jobs", **params)
    assert r.status_code == 200, r.text
    return [j["id"] for j in r.json()["items"]]


def test_list_jobs_newest_first_with_total_limit_offset(
    base_url: str, populated: Populated
) -> None:
    r = _get(base_url, "/api/jobs")
    body = r.json()
    assert r.headers["content-type"] == "application/json"
    assert set(body) == {"items", "total", "total_exact", "limit", "offset"}
    assert (body["total"], body["total_exact"], body["limit"], body["offset"]) == (9, True, 50, 0)
    created = [(j["created_at"], j["id"]) for j in body["items"]]
    assert created == sorted(created, reverse=True)
    assert {j["id"] for j in body["items"]} == set(populated.ids.values())

    everything = [j["id"] for j in body["items"]]
    assert _ids(base_url, limit=3) == everything[:3]
    assert _ids(base_url, limit=3, offset=3) == everything[3:6]
    page = _get(base_url, "/api/jobs", limit=2, offset=8).json()
    assert (page["total"], page["limit"], page["offset"]) == (9, 2, 8)
    assert [j["id"] for j in page["items"]] == everything[8:]
    assert _ids(base_url, offset=100) == []


def test_filters(base_url: str, populated: Populated) -> None:
    ids = populated.ids
    assert set(_ids(base_url, status="failed")) == {ids["failed"]}
    assert set(_ids(base_url, status="cancelled,delayed")) == {ids["cancelled"], ids["delayed"]}
    assert set(_ids(base_url, status=" pending , failed ")) == {ids["pending"], ids["failed"]}
    assert set(_ids(base_url, status="completed", queue="slow")) == {ids["slow"]}
    assert set(_ids(base_url, queue="fast", status="completed")) == {
        ids["fast"],
        ids["parent"],
        ids["scheduled"],
    }
    assert set(_ids(base_url, type="http.nobody")) == {ids["cancelled"], ids["pending"]}
    assert _ids(base_url, parent_id=ids["parent"]) == [ids["child"]]
    assert _ids(base_url, schedule_id=populated.schedule_id) == [ids["scheduled"]]
    assert _ids(base_url, type="no.such.type") == []
    total = _get(base_url, "/api/jobs", status="completed", limit=1).json()["total"]
    assert total == 5


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "0"}, "limit must be between 1 and 500"),
        ({"limit": "501"}, "limit must be between 1 and 500"),
        ({"limit": "ten"}, "limit must be an integer"),
        ({"limit": "1.5"}, "limit must be an integer"),
        ({"offset": "-1"}, "offset must be between 0"),
        ({"offset": "9" * 40}, "offset must be an integer"),
        ({"status": "running,bogus"}, "unknown status 'bogus'"),
    ],
)
def test_invalid_queries_get_400(base_url: str, params: dict[str, str], message: str) -> None:
    r = _get(base_url, "/api/jobs", **params)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "INVALID_QUERY"
    assert message in error["message"]


def test_one_job_and_404s(base_url: str, populated: Populated) -> None:
    job = _get(base_url, f"/api/jobs/{populated.ids['failed']}").json()
    assert job["status"] == "failed"
    assert job["attempt"] == 1
    traceback = job["error"].pop("traceback")
    assert traceback.endswith("RuntimeError: failure 1\n")
    assert job["error"] == {
        "code": "JOB_HANDLER_THREW",
        "message": "failure 1",
        "retryable": True,
        "params": {"exception": "RuntimeError"},
    }
    assert job["finished_at"].endswith("Z")
    parent = _get(base_url, f"/api/jobs/{populated.ids['parent']}").json()
    assert parent["payload"] == {"n": 7, "note": "<script>alert(1)</script>"}
    assert parent["progress"] == 60

    missing = _get(base_url, "/api/jobs/does-not-exist")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "JOB_NOT_FOUND"
    events = _get(base_url, "/api/jobs/does-not-exist/events")
    assert events.status_code == 404
    assert events.json()["error"]["code"] == "JOB_NOT_FOUND"
    route = _get(base_url, "/api/nothing")
    assert (route.status_code, route.json()["error"]["code"]) == (404, "NOT_FOUND")
    assert _get(base_url, "/api/jobs/").status_code == 404
    post = httpx.post(base_url + "/api/jobs", timeout=10)
    assert (post.status_code, post.json()["error"]["code"]) == (405, "METHOD_NOT_ALLOWED")


def test_queues_schedules_workers_health(base_url: str, populated: Populated) -> None:
    queues = {q["name"]: q for q in _get(base_url, "/api/queues").json()["items"]}
    assert set(queues) == {"fast", "slow", "http.fail", "http.child", "http.nobody"}
    assert queues["fast"]["counts"] == {
        "pending": 0,
        "delayed": 1,
        "running": 0,
        "completed": 3,
        "failed": 0,
        "cancelled": 0,
        "waiting": 0,
    }
    assert queues["http.nobody"]["counts"]["pending"] == 1
    assert queues["http.nobody"]["oldest_pending_at"].endswith("Z")

    schedules = _get(base_url, "/api/schedules").json()["items"]
    assert [(s["id"], s["type"], s["name"]) for s in schedules] == [
        (populated.schedule_id, "http.work", "yearly")
    ]
    assert schedules[0]["trigger"]["kind"] == "cron"
    assert schedules[0]["trigger_text"] == "cron 0 0 1 1 *"
    assert schedules[0]["last_run"] is not None

    workers = _get(base_url, "/api/workers").json()
    assert [w["state"] for w in workers["items"]] == ["stopped"]
    assert workers["items"][0]["handlers"] == ["http.child", "http.fail", "http.work"]
    assert workers["leader"] is None or workers["leader"]["valid"] is False

    assert _get(base_url, "/api/health").json() == {
        "status": "ok",
        "schema_version": SCHEMA_VERSION,
    }


def test_security_headers(base_url: str) -> None:
    page = _get(base_url, "/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert _get(base_url, "/api/jobs").headers["cache-control"] == "no-store"


def test_a_jobs_attempts_with_their_errors_and_tracebacks(
    base_url: str, populated: Populated
) -> None:
    failed = _get(base_url, f"/api/jobs/{populated.ids['failed']}/attempts")
    assert failed.status_code == 200
    items = failed.json()["items"]
    assert [(a["attempt"], a["outcome"]) for a in items] == [(1, "retry"), (2, "failed")]
    for n, a in enumerate(items):
        assert a["error"]["message"] == f"failure {n}"
        assert a["error"]["traceback"].endswith(f"RuntimeError: failure {n}\n")
        assert a["started_at"] <= a["finished_at"]
        assert a["logs"] == []
    done = _get(base_url, f"/api/jobs/{populated.ids['fast']}/attempts").json()["items"]
    assert [(a["attempt"], a["outcome"], a["error"]) for a in done] == [(1, "completed", None)]
    waiting = _get(base_url, f"/api/jobs/{populated.ids['pending']}/attempts")
    assert waiting.json() == {"items": []}
    missing = _get(base_url, "/api/jobs/does-not-exist/attempts")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "JOB_NOT_FOUND"
