"""The demo application behind `make demo` / `jobledger --db demo.db demo`.

It is also a small example of an app: a `JobManager` at module level (so
`jobledger worker examples.demo_app:jobs` can run it), typed job types, handlers with
progress, retries and a permanent failure, a delayed job and a cron schedule.

    demo.report    a slow job reporting progress, section by section
    demo.flaky     fails twice (exponential backoff), then succeeds
    demo.invoice   fails for good with a PermanentError (shows the error view)
    demo.reminder  a plain `def` handler, enqueued with a delay
    demo.cleanup   fired every minute by a cron schedule
    demo.ingest    fired every 4 seconds by an interval schedule; each run takes about 3 s
                   and reports progress, so the dashboard always has live work to show
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pydantic

import jobledger as jl

jobs = jl.JobManager(
    os.environ.get("JOBLEDGER_DB", "demo.db"),
    startup_delay=0.5,
    heartbeat_interval=2.0,
)


class Report(pydantic.BaseModel):
    title: str
    sections: int = 20
    seconds_per_section: float = 0.5


REPORT = jl.JobType("demo.report", Report)


@jobs.handler(REPORT, recovery="retry", concurrency=2, timeout=600)
async def build_report(ctx: jl.JobContext[Report]) -> dict[str, Any]:
    p = ctx.payload
    for i in range(p.sections):
        await asyncio.sleep(p.seconds_per_section)
        await ctx.report_progress(100 * (i + 1) / p.sections, f"section {i + 1}/{p.sections}")
    return {"title": p.title, "pages": p.sections * 3}


class Fetch(pydantic.BaseModel):
    url: str


FLAKY = jl.JobType("demo.flaky", Fetch)


@jobs.handler(
    FLAKY,
    recovery="retry",
    retry=jl.RetryPolicy(max_attempts=5, backoff="exponential", base_delay=2.0, max_delay=10.0),
)
async def fetch(ctx: jl.JobContext[Fetch]) -> dict[str, Any]:
    await ctx.report_progress(10, f"attempt {ctx.attempt + 1}: connecting")
    await asyncio.sleep(0.5)
    if ctx.attempt < 2:
        raise ConnectionError(f"{ctx.payload.url} is unavailable (attempt {ctx.attempt + 1})")
    return {"status": 200, "attempts": ctx.attempt + 1}


class Invoice(pydantic.BaseModel):
    customer: str
    cents: int


INVOICE = jl.JobType("demo.invoice", Invoice)


@jobs.handler(INVOICE, recovery="abandon")
async def charge(ctx: jl.JobContext[Invoice]) -> dict[str, Any]:
    await asyncio.sleep(0.3)
    if ctx.payload.cents > 100_000:
        raise jl.PermanentError(
            "the card was declined", code="PAYMENT_DECLINED", params={"cents": ctx.payload.cents}
        )
    return {"charged": ctx.payload.cents}


class Reminder(pydantic.BaseModel):
    to: str
    text: str


REMINDER = jl.JobType("demo.reminder", Reminder)


@jobs.handler(REMINDER, recovery="abandon")
def send_reminder(ctx: jl.JobContext[Reminder]) -> dict[str, str]:
    # A plain function: it runs in the worker's thread pool.
    return {"sent_to": ctx.payload.to}


class Cleanup(pydantic.BaseModel):
    older_than_days: int = 7


CLEANUP = jl.JobType("demo.cleanup", Cleanup)


@jobs.handler(CLEANUP, recovery="singleton")
async def cleanup(ctx: jl.JobContext[Cleanup]) -> dict[str, int]:
    await ctx.report_progress(100, "nothing to clean")
    return {"deleted": 0}


class Ingest(pydantic.BaseModel):
    source: str
    batches: int = 12
    seconds_per_batch: float = 0.25


INGEST = jl.JobType("demo.ingest", Ingest)


@jobs.handler(INGEST, recovery="retry", concurrency=2, timeout=60)
async def ingest(ctx: jl.JobContext[Ingest]) -> dict[str, Any]:
    p = ctx.payload
    for i in range(p.batches):
        await asyncio.sleep(p.seconds_per_batch)
        await ctx.report_progress(100 * (i + 1) / p.batches, f"batch {i + 1}/{p.batches}")
    return {"source": p.source, "rows": p.batches * 500}


def seed(manager: jl.JobManager) -> list[str]:
    """Enqueue the sample jobs and declare the schedules; return the job ids."""
    ids = [
        manager.enqueue(REPORT, Report(title="Quarterly report", sections=40)).id,
        manager.enqueue(REPORT, Report(title="Weekly digest", sections=12)).id,
        manager.enqueue(FLAKY, Fetch(url="https://example.com/flaky")).id,
        manager.enqueue(INVOICE, Invoice(customer="ACME", cents=4200)).id,
        manager.enqueue(INVOICE, Invoice(customer="Globex", cents=250_000)).id,
        manager.enqueue(
            REMINDER, Reminder(to="ops@example.com", text="<script>alert('hi')</script>"), delay=20
        ).id,
    ]
    manager.ensure_job_schedule(CLEANUP, Cleanup(), trigger=jl.Cron("* * * * *"))
    manager.ensure_job_schedule(INGEST, Ingest(source="events"), trigger=jl.Interval(4))
    return ids
