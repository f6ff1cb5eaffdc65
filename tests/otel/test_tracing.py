"""OpenTelemetry (DESIGN §8.10): a `send` span at enqueue whose context the row keeps,
a `process` span per attempt linked to it, the messaging attributes and metrics, across
a retry and across two processes. Each case runs `traced_proc` in a process of its own
(the SDK's provider is global), on both backends; the SDK's in-memory exporter records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic

import jobledger as jl
from tests.conftest import run

REPO = Path(__file__).resolve().parents[2]


def traced(db: str, role: str, out: Path, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")) if p
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.otel.traced_proc", db, role, str(out), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


def test_send_and_process_spans_across_a_retry(db: str, tmp_path: Path) -> None:
    data = traced(db, "all", tmp_path / "all.json")
    spans = data["spans"]
    [send] = by_name(spans, "send otel.flaky")
    assert send["kind"] == "PRODUCER"
    assert send["parent"] is None
    attrs = send["attributes"]
    assert attrs["messaging.system"] == "jobledger"
    assert attrs["messaging.destination.name"] == "otel.flaky"
    assert attrs["messaging.operation.type"] == "send"
    assert attrs["jobledger.type"] == "otel.flaky"
    job_id = attrs["messaging.message.id"]

    first, second = sorted(
        by_name(spans, "process otel.flaky"), key=lambda s: s["attributes"]["jobledger.attempt"]
    )
    for span, number in ((first, 1), (second, 2)):
        assert span["kind"] == "CONSUMER"
        assert span["parent"] is None  # linked to the send span, not its child
        assert span["links"] == [[send["trace_id"], send["span_id"]]]
        assert span["attributes"]["messaging.message.id"] == job_id
        assert span["attributes"]["messaging.destination.name"] == "otel.flaky"
        assert span["attributes"]["jobledger.type"] == "otel.flaky"
        assert span["attributes"]["jobledger.attempt"] == number
    assert first["status"] == "ERROR"
    assert first["attributes"]["error.type"] == "builtins.ValueError"
    assert first["attributes"]["jobledger.outcome"] == "retry"
    assert "exception" in first["events"]
    assert second["status"] == "UNSET"
    assert "error.type" not in second["attributes"]

    # The handler's own spans nest under the attempt's, in a thread too.
    inside = by_name(spans, "inside flaky")
    assert sorted(s["parent"] for s in inside) == sorted([first["span_id"], second["span_id"]])
    [threaded] = by_name(spans, "process otel.threaded")
    [inside_thread] = by_name(spans, "inside threaded")
    assert inside_thread["parent"] == threaded["span_id"]
    assert inside_thread["trace_id"] == threaded["trace_id"]

    sent = data["metrics"]["messaging.client.sent.messages"]
    assert sum(p["value"] for p in sent) == 2
    assert {p["attributes"]["messaging.destination.name"] for p in sent} == {
        "otel.flaky",
        "otel.threaded",
    }
    durations = data["metrics"]["messaging.process.duration"]
    assert sum(p["count"] for p in durations) == 3
    failed = [p for p in durations if "error.type" in p["attributes"]]
    assert [(p["attributes"]["error.type"], p["count"]) for p in failed] == [
        ("builtins.ValueError", 1)
    ]


def test_the_row_carries_the_context_to_another_process(db: str, tmp_path: Path) -> None:
    produced = traced(db, "produce", tmp_path / "produce.json")
    job_id = (tmp_path / "produce.id").read_text()
    [send] = by_name(produced["spans"], "send otel.flaky")
    assert send["attributes"]["messaging.message.id"] == job_id

    consumed = traced(db, "consume", tmp_path / "consume.json", job_id)
    processes = by_name(consumed["spans"], "process otel.flaky")
    assert len(processes) == 2  # the retry's attempt is linked too
    assert all(p["links"] == [[send["trace_id"], send["span_id"]]] for p in processes)
    assert not by_name(consumed["spans"], "send otel.flaky")


class Plain(pydantic.BaseModel):
    n: int = 0


def test_without_a_provider_rows_carry_no_context(db: str) -> None:
    jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.01)
    kind = jl.JobType("otel.plain", Plain)

    @jobs.handler(kind, recovery="retry")
    async def plain(ctx: jl.JobContext[Plain]) -> None:
        return None

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(kind, Plain(), metadata={"k": 1}).finished

    done = run(main())
    assert done.metadata == {"k": 1}
