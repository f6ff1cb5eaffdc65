"""Roles (DESIGN.md §8.9): operator, viewer and no token against every route and method,
on both backends, and the audit log every action writes.

The route table below must name every route the app serves (checked against the app's
own routes), so a route added later cannot skip the role rules untested.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, Route

import jobledger as jl
from jobledger._observe.auth import ApiToken
from jobledger._observe.http import create_app
from tests.http.conftest import WAIT, Item, running_server

ROLES_WORK = jl.JobType("roles.work", Item)
ROLES_FAIL = jl.JobType("roles.fail", Item)
OPS = {"authorization": "Bearer ops-secret-1"}
VIEW = {"authorization": "Bearer view-secret-1"}
TOKENS = [ApiToken("ops", "ops-secret-1", "operator"), ApiToken("vic", "view-secret-1", "viewer")]


@dataclass
class World:
    db: str
    jobs: jl.JobManager
    ids: dict[str, str]
    schedule_id: str


def _manager(db: str) -> jl.JobManager:
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(ROLES_WORK, recovery="retry", queue="roles.q")
    async def work(ctx: jl.JobContext[Item]) -> int:
        return ctx.payload.n

    @jobs.handler(ROLES_FAIL, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    def fail(ctx: jl.JobContext[Item]) -> None:
        raise RuntimeError(f"boom {ctx.payload.n}")

    return jobs


@pytest.fixture
def world(db: str) -> Iterator[World]:
    jobs = _manager(db)

    async def main() -> dict[str, str]:
        async with jobs:
            done = jobs.enqueue(ROLES_WORK, Item(n=1))
            failed = [jobs.enqueue(ROLES_FAIL, Item(n=i)) for i in range(3)]
            for h in [done, *failed]:
                await asyncio.wait_for(h.finished, WAIT)
        return {"done": done.id, "failed": failed[0].id}

    ids = asyncio.run(main())
    # Written after the worker stopped, so they stay as they are.
    ids["pending"] = jobs.enqueue(ROLES_WORK, Item(n=2), delay=3600).id
    sid = jobs.register_job_schedule(
        ROLES_WORK, Item(n=3), trigger=jl.Cron("0 0 1 1 *"), name="yearly"
    )
    try:
        yield World(db, jobs, ids, sid)
    finally:
        asyncio.run(jobs.stop())


SCHEDULE_ACTION = "/api/schedules/{schedule_id:str}/{action:str}"
# (method, route path as the app declares it, concrete URL, JSON body)
Call = tuple[str, str, str, Any]


def _calls(w: World) -> list[Call]:
    done, failed, pending, sid = w.ids["done"], w.ids["failed"], w.ids["pending"], w.schedule_id
    return [
        ("GET", "/", "/", None),
        ("GET", "/jobs/{job_id:str}", f"/jobs/{done}", None),
        ("GET", "/workflows", "/workflows", None),
        ("GET", "/workflows/{workflow_id:str}", "/workflows/none", None),
        ("GET", "/api/jobs", "/api/jobs?q=payload.n:1", None),
        ("GET", "/api/jobs/{job_id:str}", f"/api/jobs/{done}", None),
        ("GET", "/api/jobs/{job_id:str}/attempts", f"/api/jobs/{failed}/attempts", None),
        ("GET", "/api/jobs/{job_id:str}/explain", f"/api/jobs/{pending}/explain", None),
        ("GET", "/api/jobs/{job_id:str}/events", f"/api/jobs/{done}/events", None),
        ("GET", "/api/workflows", "/api/workflows", None),
        ("GET", "/api/workflows/{workflow_id:str}", "/api/workflows/none", None),
        ("GET", "/api/queues", "/api/queues", None),
        ("GET", "/api/throughput", "/api/throughput?minutes=5", None),
        ("GET", "/api/schedules", "/api/schedules", None),
        ("GET", "/api/workers", "/api/workers", None),
        ("GET", "/api/audit", "/api/audit", None),
        ("GET", "/api/whoami", "/api/whoami", None),
        ("GET", "/api/health", "/api/health", None),
        ("GET", "/metrics", "/metrics", None),
        ("GET", "/openapi.json", "/openapi.json", None),
        ("GET", "/static", "/static/app.js", None),
        ("POST", "/api/jobs/{job_id:str}/cancel", f"/api/jobs/{pending}/cancel", None),
        ("POST", "/api/jobs/{job_id:str}/retry", f"/api/jobs/{done}/retry", None),
        ("POST", "/api/jobs/retry", "/api/jobs/retry", {"queue": "roles.fail", "status": "failed"}),
        ("POST", "/api/jobs/cancel", "/api/jobs/cancel", {"queue": "nobody.here"}),
        ("POST", "/api/schedules/{schedule_id:str}/run", f"/api/schedules/{sid}/run", None),
        (
            "POST",
            "/api/schedules/{schedule_id:str}/backfill",
            f"/api/schedules/{sid}/backfill",
            {"from": "2020-01-01T00:00:00Z", "to": "2021-06-01T00:00:00Z"},
        ),
        (
            "POST",
            "/api/schedules/{schedule_id:str}/{action:str}",
            f"/api/schedules/{sid}/pause",
            None,
        ),
        (
            "POST",
            "/api/schedules/{schedule_id:str}/{action:str}",
            f"/api/schedules/{sid}/resume",
            None,
        ),
        (
            "POST",
            "/api/schedules/{schedule_id:str}/{action:str}",
            f"/api/schedules/{sid}/trigger",
            {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
        ),
        ("POST", "/api/queues/{rest:path}", "/api/queues/roles.q/pause", None),
        ("POST", "/api/queues/{rest:path}", "/api/queues/roles.q/resume", None),
        ("POST", "/api/queues/{rest:path}", "/api/queues/roles.q/limits", {"concurrency": 3}),
    ]


def _declared(app: Any) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for r in app.routes:
        if isinstance(r, Mount):
            out.add(("GET", r.path))
        elif isinstance(r, Route):
            for method in sorted((r.methods or {"GET"}) - {"HEAD"}):
                out.add((method, r.path))
    return out


def _send(client: httpx.Client, call: Call, headers: dict[str, str]) -> httpx.Response:
    method, _, url, body = call
    return client.request(method, url, headers=headers, json=body)


def _audit_total(w: World) -> int:
    return len(w.jobs.audit_log(limit=1000))


def test_every_route_by_role(world: World) -> None:
    app = create_app(world.db, tokens=TOKENS, allow_actions=True, action_manager=world.jobs)
    calls = _calls(world)
    assert {(m, path) for m, path, _, _ in calls} == _declared(app)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=WAIT) as client:
            for call in calls:
                anonymous = _send(client, call, {})
                if call[1] == "/api/health":
                    assert anonymous.status_code == 200
                    continue
                assert anonymous.status_code == 401, call
                assert anonymous.headers["content-type"].startswith(
                    "application/json" if call[2].startswith("/api/") else ""
                )
            # A viewer reads everything and acts on nothing: no row and no audit entry
            # changes, whatever the route.
            before = _audit_total(world)
            for call in calls:
                response = _send(client, call, VIEW)
                if call[0] == "GET":
                    assert response.status_code in (200, 404), (call, response.text)
                else:
                    assert response.status_code == 403, call
                    assert response.json()["error"]["code"] == "FORBIDDEN_ROLE"
            assert _audit_total(world) == before
            assert world.jobs.get(world.ids["pending"]).status == "delayed"  # type: ignore[union-attr]
            assert client.get("/api/whoami", headers=VIEW).json() == {
                "name": "vic",
                "role": "viewer",
                "can_act": False,
            }

            for call in calls:
                response = _send(client, call, OPS)
                assert response.status_code in (200, 201, 404), (call, response.text)
                if call[0] == "POST":
                    assert response.status_code in (200, 201), (call, response.text)
            assert client.get("/api/whoami", headers=OPS).json() == {
                "name": "ops",
                "role": "operator",
                "can_act": True,
            }
            entries = client.get("/api/audit", params={"limit": 100}, headers=OPS).json()["items"]
    finally:
        app.state.read_model.close()

    assert all(e["actor"] == "ops" for e in entries)
    # Newest first; one entry per action, in the order they were taken.
    assert [e["action"] for e in reversed(entries)] == [
        "job.cancel",
        "job.retry",
        "jobs.retry_many",
        "jobs.cancel_many",
        "schedule.run_now",
        "schedule.backfill",
        "schedule.pause",
        "schedule.resume",
        "schedule.trigger",
        "queue.pause",
        "queue.resume",
        "queue.limits",
    ]
    by_action = {e["action"]: e for e in entries}
    assert by_action["job.cancel"]["target"] == world.ids["pending"]
    assert by_action["jobs.retry_many"]["detail"]["retried"] == 3
    assert by_action["jobs.retry_many"]["target"] == "status=failed queue=roles.fail"
    assert by_action["queue.limits"]["detail"] == {"concurrency": 3}
    assert by_action["schedule.trigger"]["detail"]["to"] == {
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
    }
    assert by_action["schedule.backfill"]["detail"]["written"] == 2  # 2020-01-01, 2021-01-01
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", by_action["job.retry"]["at"])
    # The edit took: the schedule now fires on the new cron, in its zone.
    snap = world.jobs.get_job_schedule_by_id(world.schedule_id)
    assert snap is not None
    assert snap.trigger == jl.Cron("30 2 * * *", timezone="Europe/Berlin")
    assert snap.enabled


def test_a_viewer_only_server_and_one_without_actions(world: World) -> None:
    """Viewer tokens alone make a read-only server that still needs a token; without
    `allow_actions` an operator's POST finds no route, a viewer's is refused first."""
    viewers = [t for t in TOKENS if t.role == "viewer"]
    with pytest.raises(ValueError, match="needs an operator token"):
        create_app(world.db, tokens=viewers, allow_actions=True)
    read_only = create_app(world.db, tokens=TOKENS)
    try:
        with running_server(read_only) as url, httpx.Client(base_url=url, timeout=WAIT) as c:
            assert c.get("/api/jobs").status_code == 401
            assert c.get("/api/jobs", headers=VIEW).status_code == 200
            pending = world.ids["pending"]
            assert c.post(f"/api/jobs/{pending}/cancel", headers=OPS).status_code == 404
            refused = c.post(f"/api/jobs/{pending}/cancel", headers=VIEW)
            assert refused.json()["error"]["code"] == "FORBIDDEN_ROLE"
            assert c.get("/api/whoami", headers=OPS).json()["can_act"] is False
            # ?token= on a GET signs the browser in with that token's cookie, its role kept.
            signed = c.get("/", params={"token": "view-secret-1"})
            assert signed.status_code == 200
            assert c.cookies.get("jobledger_token") == "view-secret-1"
            assert c.get("/api/whoami").json()["role"] == "viewer"
    finally:
        read_only.state.read_model.close()


def test_bulk_retry_by_search_and_a_bad_trigger(world: World) -> None:
    app = create_app(world.db, tokens=TOKENS, allow_actions=True, action_manager=world.jobs)
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=WAIT) as c:
            one = c.post("/api/jobs/retry", json={"q": "payload.n:2"}, headers=OPS).json()
            assert one["retried"] == 1
            assert one["items"][0]["payload"] == {"n": 2, "note": ""}
            assert one["items"][0]["retry_of"] is not None
            again = c.post("/api/jobs/retry", json={"q": "payload.n:2"}, headers=OPS).json()
            assert again == {"retried": 0, "items": []}  # that failure is being re-run
            sid = world.schedule_id
            for body, code in [
                ({"cron": "not cron"}, "JOB_SCHEDULE_TRIGGER_INVALID"),
                ({"cron": "* * * * *", "every": 5}, "INVALID_BODY"),
                ({"every": "5"}, "INVALID_BODY"),
                ({"every": 60, "timezone": "UTC"}, "INVALID_BODY"),
                ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "JOB_SCHEDULE_TRIGGER_INVALID"),
                ({"colour": "red"}, "INVALID_BODY"),
            ]:
                bad = c.post(f"/api/schedules/{sid}/trigger", json=body, headers=OPS)
                assert (bad.status_code, bad.json()["error"]["code"]) == (400, code), body
            for body in [{"status": 3}, {"q": "payload.:"}, {"limit": 0}, {"queue": ""}]:
                bad = c.post("/api/jobs/retry", json=body, headers=OPS)
                assert bad.status_code == 400, body
            no_filter = c.post("/api/jobs/cancel", json={}, headers=OPS)
            assert no_filter.json()["error"]["code"] == "JOB_FILTER_REQUIRED"
            assert c.post("/api/schedules/nope/pause", headers=OPS).status_code == 404
            assert c.post(f"/api/schedules/{sid}/explode", headers=OPS).status_code == 404
            entries = c.get("/api/audit", params={"action": "jobs.retry_many"}, headers=OPS)
            assert [e["detail"]["retried"] for e in entries.json()["items"]] == [0, 1]
            by_actor = c.get("/api/audit", params={"actor": "vic"}, headers=OPS).json()
            assert by_actor["items"] == []
            assert c.get("/api/audit", params={"limit": 0}, headers=OPS).status_code == 400
    finally:
        app.state.read_model.close()
