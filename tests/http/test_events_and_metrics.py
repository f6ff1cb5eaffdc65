"""Server-sent events of a live job, /metrics, tokens and hosts, and `jobledger serve`."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import jobledger as jl
from jobledger._observe import http
from jobledger._observe.api_models import JobEvent
from jobledger._observe.http import LOOPBACK_HOSTS, create_app
from jobledger.testing import FakeClock
from tests.conftest import run, wait_until
from tests.http.conftest import (
    WAIT,
    WORK,
    BackgroundWorker,
    Item,
    Populated,
    running_server,
    running_uvicorn,
)


def _events(response: httpx.Response) -> Any:
    """Yield (event, data) pairs from an SSE response."""
    event: str | None = None
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if event is not None:
                yield event, json.loads("\n".join(data))
            event, data = None, []
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def test_events_stream_progress_and_end_at_the_terminal_state(tmp_path: Path) -> None:
    # A worker in this process moves the job one step each time the stream has shown the
    # previous one, so every step must reach the reader through the database. Its clock is
    # fake: moving it past the progress throttle makes every report land at once.
    clock = FakeClock()
    jobs = jl.JobManager(tmp_path / "jobs.db", clock=clock, startup_delay=0)
    gates = [asyncio.Event() for _ in range(4)]

    @jobs.handler(WORK, recovery="retry")
    async def stepper(ctx: jl.JobContext[Item]) -> str:
        for i, value in enumerate((25, 50, 75)):
            await gates[i].wait()
            clock.advance(1.0)
            await ctx.report_progress(value, f"step {i + 1}/3")
        await gates[3].wait()
        return "done"

    worker = BackgroundWorker(jobs)
    try:
        job_id = worker.call(lambda: jobs.enqueue(WORK, Item(n=1)).id)
        app = create_app(str(tmp_path / "jobs.db"), poll_interval=0.02)
        seen: list[tuple[str, Any]] = []
        with (
            running_server(app) as url,
            httpx.stream("GET", f"{url}/api/jobs/{job_id}/events", timeout=WAIT) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            released = 0
            for event, data in _events(response):
                seen.append((event, data))
                # Each event is one the document describes (`api_models.JobEvent`).
                JobEvent.model_validate(
                    {"event": event, "id": str(len(seen)), "data": json.dumps(data)}
                )
                ready = (event == "snapshot" and data["status"] == "running" and released == 0) or (
                    event == "progress" and data["progress"] == 25 * released
                )
                if ready and released < len(gates):
                    worker.call(gates[released].set)
                    released += 1
            # The loop ends because the server closed the stream after the terminal state.
        app.state.read_model.close()
    finally:
        for gate in gates:
            worker.call(gate.set)
        worker.close()

    kinds = [
        (e, d["status"], d.get("progress"))
        for e, d in seen
        if not (e == "snapshot" and d["status"] == "pending")
    ]
    assert kinds == [
        ("snapshot", "running", None),
        ("progress", "running", 25),
        ("progress", "running", 50),
        ("progress", "running", 75),
        ("snapshot", "completed", 75),
    ]
    assert [d["progress_detail"] for e, d in seen if e == "progress"] == [
        "step 1/3",
        "step 2/3",
        "step 3/3",
    ]
    assert seen[-1][1]["output"] == "done"
    assert seen[-1][1]["id"] == job_id


def test_events_of_a_finished_job_are_one_snapshot(base_url: str, populated: Populated) -> None:
    with httpx.stream(
        "GET", f"{base_url}/api/jobs/{populated.ids['failed']}/events", timeout=WAIT
    ) as response:
        events = list(_events(response))
    assert [(e, d["status"]) for e, d in events] == [("snapshot", "failed")]


def test_events_carry_increasing_ids_and_a_ping_while_nothing_changes(
    base_url: str, populated: Populated, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pending job nobody runs: after its snapshot the stream stays open, and the only
    # thing it sends is the ping (the closure reads PING_SECONDS per request).
    monkeypatch.setattr(http, "PING_SECONDS", 0.05)
    lines: list[str] = []
    with httpx.stream(
        "GET", f"{base_url}/api/jobs/{populated.ids['pending']}/events", timeout=WAIT
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith(":"):
                break
    assert lines[:2] == ["retry: 2000", ""]
    assert lines[2:5] == ["id: 1", "event: snapshot", lines[4]]
    assert json.loads(lines[4].removeprefix("data: "))["status"] == "pending"
    assert lines[-1] == ": ping"


def test_the_stream_of_a_client_that_went_away_ends(populated: Populated) -> None:
    # A pending job nobody runs: its stream would go on for ever. The client reads the
    # first snapshot and leaves; the server must notice and end the stream, which is
    # the moment uvicorn's task for the request finishes.
    app = create_app(populated.path, poll_interval=0.02)
    try:
        with running_uvicorn(app) as (url, server):
            tasks = server.server_state.tasks
            with (
                httpx.Client(timeout=WAIT) as client,
                client.stream("GET", f"{url}/api/jobs/{populated.ids['pending']}/events") as r,
            ):
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        assert len(tasks) == 1  # the stream is being answered
                        break  # closing the line iterator closes the connection
            run(wait_until(lambda: not tasks, timeout=WAIT, what="the stream to end"))
    finally:
        app.state.read_model.close()


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(family: Any, name: str, **labels: str) -> float:
    for sample in family.samples:
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return float(sample.value)
    raise AssertionError(f"no sample {name} {labels}")


def test_metrics_parse_as_prometheus_text(base_url: str) -> None:
    r = httpx.get(f"{base_url}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = _families(r.text)

    jobs = families["jobledger_jobs"]
    assert jobs.type == "gauge"
    assert _value(jobs, "jobledger_jobs", queue="fast", state="completed") == 3
    assert _value(jobs, "jobledger_jobs", queue="fast", state="delayed") == 1
    assert _value(jobs, "jobledger_jobs", queue="http.fail", state="failed") == 1
    assert _value(jobs, "jobledger_jobs", queue="http.nobody", state="running") == 0

    completed = families["jobledger_jobs_completed"]
    assert completed.type == "counter"
    assert _value(completed, "jobledger_jobs_completed_total", queue="fast") == 3
    failed = families["jobledger_jobs_failed"]
    assert _value(failed, "jobledger_jobs_failed_total", queue="http.fail") == 1
    assert _value(failed, "jobledger_jobs_failed_total", queue="fast") == 0
    retried = families["jobledger_jobs_retried"]
    assert _value(retried, "jobledger_jobs_retried_total", queue="http.fail") == 1
    started = families["jobledger_jobs_started"]
    assert _value(started, "jobledger_jobs_started_total", queue="http.fail") == 2
    assert _value(started, "jobledger_jobs_started_total", queue="http.nobody") == 0

    run = families["jobledger_job_run_seconds"]
    assert run.type == "histogram"
    assert _value(run, "jobledger_job_run_seconds_count", queue="fast") == 3
    buckets = [
        (float(s.labels["le"]), s.value)
        for s in run.samples
        if s.name == "jobledger_job_run_seconds_bucket" and s.labels["queue"] == "fast"
    ]
    assert buckets == sorted(buckets)  # cumulative: never decreasing
    assert buckets[-1] == (float("inf"), 3)
    latency = families["jobledger_job_queue_latency_seconds"]
    assert _value(latency, "jobledger_job_queue_latency_seconds_count", queue="http.fail") == 1
    assert _value(families["jobledger_workers"], "jobledger_workers", state="stopped") == 1
    assert "jobledger_oldest_pending_age_seconds" in families


def test_token_and_host_checks(tmp_path: Path, populated: Populated) -> None:
    app = create_app(populated.path, token="s3cret")
    with running_server(app) as url:
        assert httpx.get(f"{url}/api/jobs", timeout=10).status_code == 401
        assert httpx.get(f"{url}/api/jobs", timeout=10).json()["error"]["code"] == "UNAUTHORIZED"
        wrong = {"authorization": "Bearer nope"}
        assert httpx.get(f"{url}/api/jobs", headers=wrong, timeout=10).status_code == 401
        ok = {"authorization": "Bearer s3cret"}
        assert httpx.get(f"{url}/api/jobs", headers=ok, timeout=10).status_code == 200
        assert httpx.get(f"{url}/api/health", timeout=10).status_code == 200
        assert httpx.get(f"{url}/", timeout=10).status_code == 401
        with httpx.Client(base_url=url, timeout=10) as browser:
            first = browser.get("/?token=s3cret")
            assert first.status_code == 200
            assert "HttpOnly" in first.headers["set-cookie"]
            assert browser.get("/api/queues").status_code == 200  # the cookie now
    app.state.read_model.close()

    local = create_app(populated.path, allowed_hosts=list(LOOPBACK_HOSTS))
    with running_server(local) as url:
        assert httpx.get(f"{url}/api/health", timeout=10).status_code == 200
        rebound = httpx.get(f"{url}/api/health", headers={"host": "evil.example"}, timeout=10)
        assert rebound.status_code == 400
    local.state.read_model.close()
    with pytest.raises(ValueError, match="needs an operator token"):
        create_app(populated.path, allow_actions=True)


def test_serve_command_prints_the_url_of_a_free_port_and_stops_on_sigterm(
    populated: Populated,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "--db", populated.path, "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        prefix = f"jobledger: serving {populated.path} at "
        assert line.startswith(prefix), line
        url = line[len(prefix) :]
        assert url.startswith("http://127.0.0.1:")
        assert not url.endswith(":8000/")
        health = httpx.get(f"{url}api/health", timeout=10)
        assert health.json()["status"] == "ok"
        page = httpx.get(url, timeout=10)
        assert "jobledger" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
