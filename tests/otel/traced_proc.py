"""A process with an OpenTelemetry SDK provider set (tests/otel/test_tracing.py).

`python -m tests.otel.traced_proc DB ROLE OUT [JOB_ID]`:

* `all`: enqueue one FLAKY job and one THREADED job, run them (FLAKY fails once, then
  completes), stop;
* `produce`: enqueue one FLAKY job (its id goes to OUT.id), stop without running it;
* `consume`: run the worker until the job JOB_ID has finished.

Every finished span and the metrics go to OUT as JSON. The provider is global and can
be set once per process, which is why each case runs in a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pydantic
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jobledger as jl


class Item(pydantic.BaseModel):
    n: int


FLAKY = jl.JobType("otel.flaky", Item)
THREADED = jl.JobType("otel.threaded", Item)

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
tracer = trace.get_tracer("tests")


def manager(db: str) -> jl.JobManager:
    jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.01)
    retry = jl.RetryPolicy(max_attempts=3, backoff="fixed", base_delay=0.001)

    @jobs.handler(FLAKY, recovery="retry", retry=retry)
    async def flaky(ctx: jl.JobContext[Item]) -> int:
        with tracer.start_as_current_span("inside flaky"):
            if ctx.attempt == 0:
                raise ValueError("first attempt fails")
        return ctx.payload.n

    @jobs.handler(THREADED, recovery="retry")
    def threaded(ctx: jl.JobContext[Item]) -> int:
        with tracer.start_as_current_span("inside threaded"):
            return ctx.payload.n

    return jobs


def _span(s: ReadableSpan) -> dict[str, Any]:
    ctx = s.get_span_context()
    assert ctx is not None
    return {
        "name": s.name,
        "kind": s.kind.name,
        "trace_id": ctx.trace_id,
        "span_id": ctx.span_id,
        "parent": None if s.parent is None else s.parent.span_id,
        "attributes": dict(s.attributes or {}),
        "links": [[link.context.trace_id, link.context.span_id] for link in s.links],
        "status": s.status.status_code.name,
        "events": [e.name for e in s.events],
    }


def _metrics() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for point in m.data.data_points:
                    value = getattr(point, "value", None)
                    count = getattr(point, "count", None)
                    out.setdefault(m.name, []).append(
                        {"attributes": dict(point.attributes or {}), "value": value, "count": count}
                    )
    return out


async def main(db: str, role: str, out: Path, job_id: str | None) -> str:
    jobs = manager(db)
    if role == "produce":
        handle = jobs.enqueue(FLAKY, Item(n=7))
        job_id = handle.id
    elif role == "all":
        async with jobs:
            done = await asyncio.gather(
                jobs.enqueue(FLAKY, Item(n=7)).finished,
                jobs.enqueue(THREADED, Item(n=8)).finished,
            )
            assert [d.status for d in done] == ["completed", "completed"], done
    else:
        assert job_id is not None
        async with jobs:
            while (snap := jobs.get(job_id)) is None or not snap.is_terminal:
                await asyncio.sleep(0.01)
    return job_id or ""


def dump(out: Path, job_id: str) -> None:
    provider.force_flush()
    spans = [_span(s) for s in exporter.get_finished_spans()]
    out.write_text(json.dumps({"spans": spans, "metrics": _metrics()}))
    out.with_suffix(".id").write_text(job_id)


if __name__ == "__main__":
    arg_job = sys.argv[4] if len(sys.argv) > 4 else None
    out_path = Path(sys.argv[3])
    dump(out_path, asyncio.run(main(sys.argv[1], sys.argv[2], out_path, arg_job)))
