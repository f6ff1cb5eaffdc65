"""The OpenAPI document cannot drift from the code: real answers of every route, on both
backends, validate against the models `/openapi.json` is built from.

A real database (SQLite file or PostgreSQL schema) holds jobs in every status (a live
worker holds one running; another waits on it in a workflow), ended attempts with log
lines and tracebacks, finished workflows, cron/interval/once schedules and queue
settings. A real uvicorn server with the actions and a token answers one request per
route (and the refusals each route documents); each answer is validated strictly
(`model_validate_json(...)`; the models forbid unknown keys) against the
model its `Operation` names for that status. The test then checks that every entry of
`OPERATIONS` answered its success status at least once, and a separate test that the
app's API routes and the table's entries are the same set.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from starlette.routing import Route

import jobledger as jl
from jobledger._observe import api_models as m
from jobledger._observe.auth import ApiToken
from jobledger._observe.http import DEFAULT_LIMIT, MAX_LIMIT, create_app
from jobledger._observe.openapi import OPERATIONS, openapi_schema
from tests.http.conftest import WAIT, BackgroundWorker, Item, running_server
from tests.http.models_check import BY_ID, check_answer, sse_events
from tests.http.workflows import build

TOKEN = "t0ken-models"
VIEWER = "v1ewer-models"
AUTH = {"authorization": f"Bearer {TOKEN}"}
WORK = jl.JobType("models.work", Item)
FAIL = jl.JobType("models.fail", Item)
HOLD = jl.JobType("models.hold", Item)
NOBODY = jl.JobType("models.nobody", Item)


@dataclass
class Checker:
    """Validates answers against their operation's models and remembers what it saw."""

    documents: dict[bool, dict[str, Any]]  # with actions? -> the served document
    seen: dict[str, set[int]] = field(default_factory=dict)

    def __call__(self, operation_id: str, response: httpx.Response, status: int) -> Any:
        op = BY_ID[operation_id]
        assert response.status_code == status, (operation_id, response.text[:500])
        documented = self.documents[op.actions]["paths"][op.path][op.method.lower()]
        assert str(status) in documented["responses"], (operation_id, status)
        content_type = response.headers["content-type"]
        check_answer(op, status, content_type, response.content)
        self.seen.setdefault(operation_id, set()).add(status)
        return response.json() if content_type == "application/json" else response.text


def test_every_api_route_has_one_entry_and_every_entry_a_route(db_path: str) -> None:
    jl.JobManager(db_path).enqueue(NOBODY, Item(n=1))
    app = create_app(db_path, token=TOKEN, allow_actions=True)
    try:
        routes = {
            (method, route.path)
            for route in app.routes
            if isinstance(route, Route)
            for method in (route.methods or set()) - {"HEAD"}
        }
    finally:
        app.state.read_model.close()
    entries = {(op.method, op.starlette_path) for op in OPERATIONS}
    assert routes == entries
    assert len({(op.method, op.path) for op in OPERATIONS}) == len(OPERATIONS)
    assert len(BY_ID) == len(OPERATIONS)


def test_the_document_is_pydantics_schema_of_the_models() -> None:
    doc = openapi_schema(actions=True, token=True)
    schemas = doc["components"]["schemas"]
    refs: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.add(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    assert {ref.rpartition("/")[2] for ref in refs} <= set(schemas)
    for op in OPERATIONS:
        assert {model.__name__ for model in op.models()} <= set(schemas)
    own = m.Job.model_json_schema(ref_template="#/components/schemas/{model}")
    own.pop("$defs")
    assert schemas["Job"] == own  # pydantic's, as it is
    assert schemas["Job"]["additionalProperties"] is False
    assert set(schemas["Job"]["required"]) == set(m.Job.model_fields)
    assert set(m.StatusCounts.model_fields) == {str(s) for s in jl.JobStatus}
    assert schemas["JobStatus"]["enum"] == [str(s) for s in jl.JobStatus]
    limit = next(p for p in doc["paths"]["/api/jobs"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"] == {
        "default": DEFAULT_LIMIT,
        "maximum": MAX_LIMIT,
        "minimum": 1,
        "type": "integer",
    }
    plain = openapi_schema()
    assert "/api/jobs/{job_id}/retry" not in plain["paths"]
    assert "securitySchemes" not in plain["components"]
    assert doc["paths"]["/api/health"]["get"]["security"] == []


def _until(fetch: Callable[[], Any], what: str) -> Any:
    """Poll the server until `fetch()` is truthy (rows written by the worker's thread)."""
    deadline = time.monotonic() + WAIT
    while True:
        got = fetch()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclass
class World:
    ids: dict[str, str]
    schedules: dict[str, str]
    workflows: dict[str, str]


@contextmanager
def _world(db: str, jobs: jl.JobManager, gate: asyncio.Event) -> Iterator[World]:
    """The database described above, with `jobs` running in a thread until the end."""
    made = build(db)

    @jobs.handler(WORK, recovery="retry", queue="models/fast")
    async def work(ctx: jl.JobContext[Item]) -> dict[str, Any]:
        ctx.logger.info("working on <b>%s</b>", ctx.payload.n)
        await ctx.report_progress(60, "most of it")
        return {"n": ctx.payload.n, "note": ctx.payload.note}

    @jobs.handler(FAIL, recovery="retry", retry=jl.RetryPolicy(max_attempts=2, base_delay=0.01))
    def fail(ctx: jl.JobContext[Item]) -> None:
        ctx.logger.warning("about to fail")
        raise RuntimeError(f"failure {ctx.attempt}")

    @jobs.handler(HOLD, recovery="retry")
    async def hold(ctx: jl.JobContext[Item]) -> None:
        await gate.wait()

    jobs.set_queue_limits("models/fast", concurrency=4, rate_limit="100/m")
    jobs.pause_queue("models.paused")

    tasks: list[asyncio.Future[Any]] = []

    def enqueue() -> World:
        ids = {
            "completed": jobs.enqueue(WORK, Item(n=1, note="<script>x</script>")).id,
            "failed": jobs.enqueue(FAIL, Item(n=2)).id,
            "delayed": jobs.enqueue(WORK, Item(n=3), delay=3600, priority=-5).id,
            "pending": jobs.enqueue(NOBODY, Item(n=4), metadata={"who": "ünï"}).id,
            "to_cancel": jobs.enqueue(NOBODY, Item(n=5)).id,
            "paused": jobs.enqueue(NOBODY, Item(n=6), queue="models.paused").id,
            "cancelled": jobs.enqueue(NOBODY, Item(n=7)).id,
        }
        # Kept: the loop holds only a weak reference to a task.
        tasks.append(asyncio.ensure_future(jobs.cancel(ids["cancelled"], reason="not wanted")))
        wf = jobs.workflow("models")
        first = wf.add(HOLD, Item(n=8), name="first")
        wf.add(WORK, Item(n=9), name="then", after=[first])
        handle = wf.enqueue()
        ids["running"] = handle.jobs["first"][0].id
        ids["waiting"] = handle.jobs["then"][0].id
        schedules = {
            "cron": jobs.register_job_schedule(
                WORK,
                Item(n=10),
                trigger=jl.Cron("0 0 1 1 *", timezone="Europe/Paris"),
                name="yearly",
            ),
            "interval": jobs.register_job_schedule(
                WORK,
                Item(n=11),
                trigger=jl.Interval(seconds=3600),
                name="hourly",
                overlap="skip",
                jitter=1.5,
            ),
            "once": jobs.register_job_schedule(
                HOLD,
                Item(n=12),
                trigger=jl.Once(datetime(9999, 1, 1, tzinfo=UTC)),
            ),
        }
        workflows = {"diamond": made.diamond, "fan": made.fan, "running": handle.id}
        return World(ids, schedules, workflows)

    worker = BackgroundWorker(jobs)
    try:
        yield worker.call(enqueue)
    finally:
        worker.call(gate.set)
        worker.close()


def test_real_answers_of_every_route_match_the_models(db: str) -> None:
    jobs = jl.JobManager(db, startup_delay=0)
    gate = asyncio.Event()
    acts = jl.JobManager(db)  # never started: the server's actions go through it

    @acts.handler(WORK, recovery="retry", queue="models/fast")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    app = create_app(
        db,
        token=TOKEN,
        tokens=[ApiToken("viewer", VIEWER, "viewer")],
        allow_actions=True,
        action_manager=acts,
        poll_interval=0.02,
    )
    try:
        with (
            _world(db, jobs, gate) as world,
            running_server(app) as url,
            httpx.Client(base_url=url, headers=AUTH, timeout=WAIT) as client,
        ):
            docs = {
                actions: openapi_schema(actions=actions, token=True) for actions in (False, True)
            }
            check = Checker(docs)
            served = check("openapi", client.get("/openapi.json"), 200)
            assert served == docs[True]
            _exercise(client, check, world)
    finally:
        asyncio.run(acts.stop())
        app.state.read_model.close()
    missing = {
        op.operation_id
        for op in OPERATIONS
        if op.status not in check.seen.get(op.operation_id, set())
    }
    assert missing == set(), "operations never answered their success status"


def _without_token(client: httpx.Client, method: str, path: str) -> httpx.Response:
    return httpx.request(method, str(client.base_url).rstrip("/") + path, timeout=WAIT)


def _job(client: httpx.Client, job_id: str) -> Any:
    return client.get(f"/api/jobs/{job_id}").json()


def _exercise(client: httpx.Client, check: Checker, world: World) -> None:
    ids = world.ids
    _until(lambda: _job(client, ids["failed"])["status"] == "failed", "the failed job")
    _until(lambda: _job(client, ids["completed"])["status"] == "completed", "a completed job")
    _until(lambda: _job(client, ids["running"])["status"] == "running", "the running job")
    _until(lambda: _job(client, ids["cancelled"])["status"] == "cancelled", "a cancelled job")

    page = check("listJobs", client.get("/api/jobs", params={"limit": MAX_LIMIT}), 200)
    statuses = {j["status"] for j in page["items"]}
    assert statuses == {str(s) for s in jl.JobStatus}, statuses
    for params in ({"status": "running,waiting"}, {"q": "payload.n:2"}, {"offset": 3}):
        check("listJobs", client.get("/api/jobs", params=params), 200)
    for params in ({"limit": 0}, {"status": "bogus"}, {"q": "payload."}):
        check("listJobs", client.get("/api/jobs", params=params), 400)
    for job_id in ids.values():
        check("getJob", client.get(f"/api/jobs/{job_id}"), 200)
        check("getJobAttempts", client.get(f"/api/jobs/{job_id}/attempts"), 200)
        check("explainJob", client.get(f"/api/jobs/{job_id}/explain"), 200)
    failed = check("getJobAttempts", client.get(f"/api/jobs/{ids['failed']}/attempts"), 200)
    assert [a["outcome"] for a in failed["items"]] == ["retry", "failed"]
    assert failed["items"][0]["logs"][0]["message"] == "about to fail"
    for route in ("getJob", "getJobAttempts", "explainJob", "jobEvents"):
        suffix = {"getJob": "", "jobEvents": "/events"}.get(route, "/" + route[6:].lower())
        check(route, client.get(f"/api/jobs/does-not-exist{suffix}"), 404)
        check(route, client.get(f"/api/jobs/a%2Fb{suffix}"), 404)

    text = check("jobEvents", client.get(f"/api/jobs/{ids['completed']}/events"), 200)
    (only,) = [m.JobEvent.model_validate(e).root for e in sse_events(text)]
    assert isinstance(only, m.SnapshotEvent)
    assert (only.id, only.data.status) == ("1", "completed")
    with client.stream("GET", f"/api/jobs/{ids['running']}/events") as stream:
        head = ""
        for chunk in stream.iter_text():
            head += chunk
            if "\ndata: " in head and head.endswith("\n\n"):
                break
    first = m.JobEvent.model_validate(sse_events(head)[0]).root
    assert isinstance(first, m.SnapshotEvent)
    assert first.data.status == "running"

    listed = check("listWorkflows", client.get("/api/workflows"), 200)
    assert {w["id"] for w in listed["items"]} == set(world.workflows.values())
    check("listWorkflows", client.get("/api/workflows", params={"offset": -1}), 400)
    for workflow_id in world.workflows.values():
        check("getWorkflow", client.get(f"/api/workflows/{workflow_id}"), 200)
    check("getWorkflow", client.get("/api/workflows/nope"), 404)

    queues = check("listQueues", client.get("/api/queues"), 200)
    limited = next(q for q in queues["items"] if q["name"] == "models/fast")
    assert limited["rate_limit"] == {"limit": 100, "per": 60.0, "text": "100/m"}
    schedules = check("listSchedules", client.get("/api/schedules"), 200)
    assert {s["id"] for s in schedules["items"]} == set(world.schedules.values())
    workers = check("listWorkers", client.get("/api/workers"), 200)
    assert "alive" in {w["state"] for w in workers["items"]}
    minutes = check("throughput", client.get("/api/throughput", params={"minutes": 5}), 200)
    assert len(minutes["items"]) == 5
    assert sum(row["completed"] + row["failed"] for row in minutes["items"]) >= 2
    check("throughput", client.get("/api/throughput"), 200)
    check("throughput", client.get("/api/throughput", params={"minutes": 0}), 400)
    check("health", client.get("/api/health"), 200)
    check("metrics", client.get("/metrics"), 200)
    check("listJobs", _without_token(client, "GET", "/api/jobs"), 401)

    check("overviewPage", client.get("/"), 200)
    check("jobsPage", client.get("/jobs", params={"status": "failed", "confirm": "retry"}), 200)
    check("jobsPage", client.get("/jobs", params={"limit": 0}), 400)
    check("schedulesPage", client.get("/schedules"), 200)
    check("workersPage", client.get("/workers"), 200)
    check("auditPage", client.get("/audit", params={"action": "job.retry"}), 200)
    check("auditPage", client.get("/audit", params={"offset": -1}), 400)
    for job_id in ids.values():
        check("jobPage", client.get(f"/jobs/{job_id}"), 200)
    check("jobPage", client.get("/jobs/nope"), 404)
    check("workflowsPage", client.get("/workflows"), 200)
    for workflow_id in world.workflows.values():
        check("workflowPage", client.get(f"/workflows/{workflow_id}"), 200)
    check("workflowPage", client.get("/workflows/nope"), 404)
    check("overviewPage", _without_token(client, "GET", "/"), 401)

    _actions(client, check, world)


def _actions(client: httpx.Client, check: Checker, world: World) -> None:
    ids, sid = world.ids, world.schedules
    cancel = "/api/jobs/{}/cancel"
    check("cancelJob", client.post(cancel.format(ids["to_cancel"]), params={"reason": "x"}), 200)
    check("cancelJob", client.post(cancel.format("nope")), 404)
    check(
        "cancelJob", client.post(cancel.format(ids["pending"]), headers={"origin": "http://x"}), 403
    )
    check("cancelJob", _without_token(client, "POST", cancel.format("x")), 401)
    viewer = {"authorization": f"Bearer {VIEWER}"}
    refused = check("cancelJob", client.post(cancel.format(ids["pending"]), headers=viewer), 403)
    assert refused["error"]["code"] == "FORBIDDEN_ROLE"
    retry = "/api/jobs/{}/retry"
    check("retryJob", client.post(retry.format(ids["failed"])), 201)
    again = check(
        "retryJob", client.post(retry.format(ids["completed"]), json={"payload": {"n": 5}}), 201
    )
    assert again["retry_of"] == ids["completed"]
    check("retryJob", client.post(retry.format(ids["pending"])), 409)
    check("retryJob", client.post(retry.format("nope")), 404)
    check("retryJob", client.post(retry.format(ids["failed"]), json={"other": 1}), 400)
    check("runSchedule", client.post(f"/api/schedules/{sid['cron']}/run"), 200)
    check("runSchedule", client.post("/api/schedules/nope/run"), 404)
    check("runSchedule", client.post(f"/api/schedules/{sid['once']}/run"), 400)
    now = datetime.now(UTC)
    span = {"from": (now - timedelta(hours=3)).isoformat(), "to": now.isoformat()}
    check(
        "backfillSchedule",
        client.post(f"/api/schedules/{sid['interval']}/backfill", json=span),
        200,
    )
    check(
        "backfillSchedule", client.post(f"/api/schedules/{sid['interval']}/backfill", json={}), 400
    )
    check("backfillSchedule", client.post("/api/schedules/nope/backfill", json=span), 404)
    check("pauseQueue", client.post("/api/queues/models/fast/pause"), 200)
    check("resumeQueue", client.post("/api/queues/models%2Ffast/resume"), 200)
    check("setQueueLimits", client.post("/api/queues/models/fast/limits", json={}), 200)
    check(
        "setQueueLimits",
        client.post("/api/queues/models/fast/limits", json={"concurrency": 2, "rate_limit": "5/s"}),
        200,
    )
    check("setQueueLimits", client.post("/api/queues/q/limits", json={"rate_limit": "x"}), 400)

    paused = check("pauseSchedule", client.post(f"/api/schedules/{sid['interval']}/pause"), 200)
    assert paused["enabled"] is False
    check("resumeSchedule", client.post(f"/api/schedules/{sid['interval']}/resume"), 200)
    check("pauseSchedule", client.post("/api/schedules/nope/pause"), 404)
    trigger = f"/api/schedules/{sid['interval']}/trigger"
    cron = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"}
    assert check("setScheduleTrigger", client.post(trigger, json=cron), 200)["trigger_text"] == (
        "cron */5 * * * * (Europe/Berlin)"
    )
    check("setScheduleTrigger", client.post(trigger, json={"every": 60}), 200)
    check("setScheduleTrigger", client.post(trigger, json={"cron": "nope"}), 400)
    paused_queue = {"queue": "models.paused"}
    many = check("cancelJobs", client.post("/api/jobs/cancel", json=paused_queue), 200)
    assert many == {"cancelled": 1, "asked_to_stop": 0}
    check("cancelJobs", client.post("/api/jobs/cancel", json={}), 400)
    again = check("retryJobs", client.post("/api/jobs/retry", json={"status": ["cancelled"]}), 200)
    assert again["retried"] >= 2
    check("retryJobs", client.post("/api/jobs/retry", json={"status": "running"}), 400)

    audit = check("listAudit", client.get("/api/audit", params={"limit": 500}), 200)
    assert {e["actor"] for e in audit["items"]} == {"operator"}
    assert "jobs.cancel_many" in {e["action"] for e in audit["items"]}
    check("listAudit", client.get("/api/audit", params={"action": "queue.pause"}), 200)
    check("listAudit", client.get("/api/audit", params={"limit": 0}), 400)
    me = check("whoami", client.get("/api/whoami"), 200)
    assert me == {"name": "operator", "role": "operator", "can_act": True}
    check("whoami", _without_token(client, "GET", "/api/whoami"), 401)
