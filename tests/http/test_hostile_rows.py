"""Hostile and far-future rows (`tests/http/hostile.py`) through every route, on both
backends: no answer is a 5xx, each is one the document describes (status, media type,
model), and markup from the rows never reaches a page unescaped.

A row whose id holds "/" cannot be reached by the job routes (the id, sent as %2F, is a
path separator by the time the router sees it): those answer 404 NOT_FOUND, or, for
`x/attempts`, the answer of the route the id spells. That is documented, not hidden.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

import jobledger as jl
from jobledger._observe.http import create_app
from tests.http.conftest import WAIT, running_server
from tests.http.hostile import ANY, HOSTILE_IDS, RAW_DEPTH, SCRIPT, Hostile, build_hostile
from tests.http.models_check import BY_ID, check_answer

TOKEN = "t0ken-hostile"
CTRL_ID = HOSTILE_IDS[-1]  # holds a control character
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def hostile(db: str) -> Iterator[tuple[Hostile, httpx.Client]]:
    made = build_hostile(db)
    acts = jl.JobManager(db)

    @acts.handler(ANY, recovery="retry")
    async def any_(ctx: jl.JobContext[dict[str, object]]) -> None:
        return None

    app = create_app(db, token=TOKEN, allow_actions=True, action_manager=acts)
    try:
        with (
            running_server(app) as url,
            httpx.Client(base_url=url, headers=AUTH, timeout=WAIT) as client,
        ):
            yield made, client
    finally:
        asyncio.run(acts.stop())
        app.state.read_model.close()


def _check(operation_id: str, response: httpx.Response) -> httpx.Response:
    assert response.status_code < 500, (operation_id, response.request.url, response.text[:300])
    check_answer(
        BY_ID[operation_id],
        response.status_code,
        response.headers["content-type"],
        response.content,
    )
    return response


def test_hostile_rows_through_every_route(hostile: tuple[Hostile, httpx.Client]) -> None:
    made, client = hostile
    page = _check("listJobs", client.get("/api/jobs", params={"limit": 500})).json()
    listed = {j["id"]: j for j in page["items"]}
    assert set(made.ids.values()) <= set(listed)
    deep = listed[HOSTILE_IDS[3]]
    assert deep["payload"] == "[" * RAW_DEPTH + "]" * RAW_DEPTH  # its text: not parsed
    assert (deep["output"], deep["metadata"]) == ("{not json", {})
    assert listed[HOSTILE_IDS[4]]["error"]["code"] == "JOB_CORRUPT_ERROR_ROW"
    assert listed[HOSTILE_IDS[4]]["payload"] == "{not json"
    assert {listed[i]["priority"] for i in HOSTILE_IDS[:2]} == {2**63 - 1, -(2**63 - 1)}
    # clock.from_ms divides as a float: at year 9999 the last millisecond reads ~7 us off.
    assert listed[made.ids["far"]]["scheduled_at"].startswith("9999-12-31T23:59:59.99")
    for params in ({"queue": "a/b/pause"}, {"q": HOSTILE_IDS[2]}, {"status": "failed"}):
        _check("listJobs", client.get("/api/jobs", params=params))

    for job_id in made.ids.values():
        quoted = quote(job_id, safe="")
        routes = [("getJob", ""), ("getJobAttempts", "/attempts"), ("explainJob", "/explain")]
        if listed[job_id]["status"] in ("completed", "failed", "cancelled"):
            routes.append(("jobEvents", "/events"))
        for op, suffix in routes:
            answer = client.get(f"/api/jobs/{quoted}{suffix}")
            if job_id in (".", ".."):
                # A client removes dot segments before sending (RFC 3986): these ids
                # cannot be asked for, and whatever route is left answers.
                assert answer.status_code < 500
            elif "/" in job_id:
                assert answer.status_code == 404, (job_id, suffix, answer.text[:200])
                _check(op, answer)
            else:
                assert answer.status_code == 200, (job_id, suffix, answer.text[:200])
                _check(op, answer)
        page_html = client.get(f"/jobs/{quoted}")
        assert page_html.status_code < 500
        assert SCRIPT not in page_html.text
    reachable = client.get(f"/api/jobs/{quote('%2F', safe='')}").json()
    assert reachable["id"] == "%2F"

    for op, path in (
        ("listQueues", "/api/queues"),
        ("listSchedules", "/api/schedules"),
        ("listWorkers", "/api/workers"),
        ("listWorkflows", "/api/workflows"),
        ("getWorkflow", f"/api/workflows/{made.workflow_id}"),
        ("health", "/api/health"),
        ("metrics", "/metrics"),
    ):
        _check(op, client.get(path))
    for path in ("/", "/workflows", f"/workflows/{made.workflow_id}"):
        html = client.get(path)
        assert html.status_code == 200, (path, html.text[:300])
        assert SCRIPT not in html.text

    # Actions on the hostile rows: answers the document describes, never a 5xx.
    for job_id in (made.ids["far"], *(i for i in HOSTILE_IDS if i not in (".", "..", CTRL_ID))):
        quoted = quote(job_id, safe="")
        _check("retryJob", client.post(f"/api/jobs/{quoted}/retry"))
        _check("cancelJob", client.post(f"/api/jobs/{quoted}/cancel"))
    for queue in ("a/b/pause", "a/b", "../up", "tenant/7"):
        _check("pauseQueue", client.post(f"/api/queues/{queue}/pause"))
        _check("resumeQueue", client.post(f"/api/queues/{quote(queue, safe='')}/resume"))
    _check("runSchedule", client.post(f"/api/schedules/{made.schedule_id}/run"))
    # Its payload and metadata nest past the parser: a pause or resume still works (the
    # snapshot reads them as text; they were a 500 before).
    for action in ("pause", "resume"):
        done = _check(
            f"{action}Schedule", client.post(f"/api/schedules/{made.schedule_id}/{action}")
        )
        assert done.status_code == 200, done.text[:300]
    deep_body = b"[" * 100_000 + b"]" * 100_000
    retry_url = f"/api/jobs/{made.ids['failed']}/retry"
    refused = _check("retryJob", client.post(retry_url, content=deep_body))
    assert refused.json()["error"]["code"] == "INVALID_BODY"


def test_a_payload_search_over_rows_that_do_not_parse(
    hostile: tuple[Hostile, httpx.Client], db: str
) -> None:
    """A row whose payload or metadata is not JSON matches no field search, and fails
    none: with the field read from every row, and with a search index on it (built over
    those rows, which it leaves out)."""
    made, client = hostile
    wanted = {"q": f"payload.n:{-(2**62)}"}  # the "done" job's payload, and its raw copies'
    # The copies of "done" (`hostile._raw_rows`) but the two whose payload was replaced by
    # one nested past every parser's limit and one that is not JSON.
    matches = [i for i in HOSTILE_IDS if i not in HOSTILE_IDS[3:5]]
    expected = sorted([made.ids["done"], *matches])

    def found(params: dict[str, str]) -> list[str]:
        answer = _check("listJobs", client.get("/api/jobs", params=params))
        assert answer.status_code == 200, answer.text[:300]
        return [j["id"] for j in answer.json()["items"]]

    assert sorted(found(wanted)) == expected
    assert found({"q": "payload.text:<script>"}) == []
    assert found({"q": "metadata.x:1"}) == []
    jobs = jl.JobManager(db)
    try:
        assert jobs.add_search_index("payload.n")
        assert jobs.add_search_index("metadata.x")
    finally:
        asyncio.run(jobs.stop())
    assert sorted(found(wanted)) == expected
    assert found({"q": "metadata.x:1"}) == []


def test_an_action_on_a_job_whose_id_holds_a_control_character(
    hostile: tuple[Hostile, httpx.Client],
) -> None:
    """It takes effect and is audited, the id written with its control character as an
    escape (the audit log holds no control characters)."""
    _, client = hostile
    _check("cancelJob", client.post(f"/api/jobs/{quote(CTRL_ID, safe='')}/cancel"))
    entries = client.get("/api/audit", params={"action": "job.cancel"}).json()["items"]
    assert CTRL_ID == "\x01\u202e"
    assert "\\x01\u202e" in [e["target"] for e in entries]  # the control escaped


def test_a_nul_in_a_request_is_a_documented_refusal(
    hostile: tuple[Hostile, httpx.Client],
) -> None:
    # PostgreSQL cannot bind a NUL in text: without the refusals these were 503s there.
    _, client = hostile
    span = {"from": "2020-01-01T00:00:00Z", "to": "2020-01-02T00:00:00Z"}
    for op, method, url, body, status in (
        ("listJobs", "GET", "/api/jobs?queue=a%00", None, 400),
        ("listJobs", "GET", "/api/jobs?type=a%00&status=failed", None, 400),
        ("listWorkflows", "GET", "/api/workflows?name=a%00", None, 400),
        ("getJob", "GET", "/api/jobs/a%00b", None, 404),
        ("getJobAttempts", "GET", "/api/jobs/a%00b/attempts", None, 404),
        ("explainJob", "GET", "/api/jobs/a%00b/explain", None, 404),
        ("jobEvents", "GET", "/api/jobs/a%00b/events", None, 404),
        ("getWorkflow", "GET", "/api/workflows/a%00b", None, 404),
        ("cancelJob", "POST", "/api/jobs/a%00b/cancel", None, 404),
        ("retryJob", "POST", "/api/jobs/a%00b/retry", None, 404),
        ("backfillSchedule", "POST", "/api/schedules/a%00b/backfill", span, 404),
        ("pauseQueue", "POST", "/api/queues/a%00b/pause", None, 404),
        ("cancelJobs", "POST", "/api/jobs/cancel", {"queue": "a\x00"}, 400),
        ("retryJobs", "POST", "/api/jobs/retry", {"type": "a\x00"}, 400),
    ):
        answer = _check(op, client.request(method, url, json=body))
        assert answer.status_code == status, (url, answer.text[:200])
    for page in ("/jobs/a%00b", "/jobs?queue=a%00", "/audit?actor=a%00", "/workflows?name=a%00"):
        assert client.get(page).status_code in (400, 404), page
