"""The worker's records: one per job start and one per end, on logger `jobledger.worker`
(DESIGN §8.2, `_runtime/joblog.py`). A FakeClock makes `duration_ms` exact: it runs from
the claim (the row's `started_at`) to the outcome's write."""

from __future__ import annotations

import asyncio
import logging

import pytest

import jobledger as jl
from jobledger.testing import FakeClock, drain
from tests.conftest import run
from tests.engine import fast_retry, make_manager

OK = jl.JobType("rec.ok", float)
BAD = jl.JobType("rec.bad", int)
FLAKY = jl.JobType("rec.flaky", int)
BLOCKS = jl.JobType("rec.blocks", int)

FIELDS = ("job_id", "type", "queue", "attempt")


def _worker_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jobledger.worker"]


def _fields(record: logging.LogRecord, *names: str) -> dict[str, object]:
    return {name: getattr(record, name, "<missing>") for name in names}


def _manager(db_path: str, clock: FakeClock) -> jl.JobManager:
    jobs = make_manager(db_path, clock=clock)

    @jobs.handler(OK, recovery="retry")
    async def ok(ctx: jl.JobContext[float]) -> None:
        clock.advance(ctx.payload)

    @jobs.handler(BAD, recovery="retry")
    async def bad(ctx: jl.JobContext[int]) -> None:
        raise jl.PermanentError("no such account", code="ACCOUNT_MISSING")

    @jobs.handler(FLAKY, recovery="retry", retry=fast_retry(2))
    def flaky(ctx: jl.JobContext[int]) -> None:
        if ctx.attempt == 0:
            raise RuntimeError("upstream said 503")

    return jobs


def test_the_worker_logs_one_start_and_one_end_per_attempt(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    jobs = _manager(db_path, clock)

    async def main() -> dict[str, str]:
        async with jobs:
            ids = {"ok": jobs.enqueue(OK, 1.5).id}
            await drain(jobs)  # alone: the others' durations do not see its 1.5 s
            ids["bad"] = jobs.enqueue(BAD, 1).id
            ids["flaky"] = jobs.enqueue(FLAKY, 1).id
            await drain(jobs)
            return ids

    caplog.set_level(logging.INFO, logger="jobledger.worker")
    ids = run(main())
    by_job: dict[str, list[logging.LogRecord]] = {}
    for record in _worker_records(caplog):
        by_job.setdefault(getattr(record, "job_id", "?"), []).append(record)
    assert set(by_job) == set(ids.values())

    start, end = by_job[ids["ok"]]
    assert start.levelno == logging.INFO
    assert _fields(start, *FIELDS, "outcome", "duration_ms") == {
        "job_id": ids["ok"],
        "type": "rec.ok",
        "queue": "rec.ok",
        "attempt": 0,
        "outcome": "<missing>",
        "duration_ms": "<missing>",
    }
    assert start.getMessage() == f"job {ids['ok']} started (type rec.ok, queue rec.ok, attempt 0)"
    assert end.levelno == logging.INFO
    assert _fields(end, *FIELDS, "outcome", "duration_ms") == {
        "job_id": ids["ok"],
        "type": "rec.ok",
        "queue": "rec.ok",
        "attempt": 0,
        "outcome": "completed",
        "duration_ms": 1500,
    }
    assert end.getMessage() == (
        f"job {ids['ok']} completed after 1500 ms (type rec.ok, queue rec.ok, attempt 0)"
    )

    start, end = by_job[ids["bad"]]
    assert end.levelno == logging.WARNING  # failures stand out at a worker run at WARNING
    assert _fields(end, "outcome", "duration_ms", "error_code", "error_message") == {
        "outcome": "failed",
        "duration_ms": 0,
        "error_code": "ACCOUNT_MISSING",
        "error_message": "no such account",
    }
    assert end.getMessage().endswith(
        "(type rec.bad, queue rec.bad, attempt 0): ACCOUNT_MISSING: no such account"
    )

    records = by_job[ids["flaky"]]
    assert [(r.levelno, _fields(r, "attempt", "outcome")) for r in records] == [
        (logging.INFO, {"attempt": 0, "outcome": "<missing>"}),
        (logging.WARNING, {"attempt": 0, "outcome": "retry"}),
        (logging.INFO, {"attempt": 1, "outcome": "<missing>"}),
        (logging.INFO, {"attempt": 1, "outcome": "completed"}),
    ]
    assert getattr(records[1], "error_code", None) == "JOB_HANDLER_THREW"
    assert "retry" in records[1].getMessage()
    assert "upstream said 503" in records[1].getMessage()


def test_a_worker_at_warning_logs_only_the_failed_ends(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = _manager(db_path, FakeClock())

    async def main() -> str:
        async with jobs:
            jobs.enqueue(OK, 0.0)
            bad = jobs.enqueue(BAD, 1).id
            await drain(jobs)
            return bad

    caplog.set_level(logging.WARNING, logger="jobledger.worker")
    bad = run(main())
    (record,) = _worker_records(caplog)
    assert _fields(record, "job_id", "outcome") == {"job_id": bad, "outcome": "failed"}


def test_a_job_interrupted_by_shutdown_ends_interrupted(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = make_manager(db_path, shutdown_grace=0)
    started = asyncio.Event()

    @jobs.handler(BLOCKS, recovery="retry")
    async def blocks(ctx: jl.JobContext[int]) -> None:
        started.set()
        await asyncio.Event().wait()

    async def main() -> str:
        await jobs.start()
        job = jobs.enqueue(BLOCKS, 1).id
        await started.wait()
        await jobs.stop()
        return job

    caplog.set_level(logging.INFO, logger="jobledger.worker")
    job = run(main())
    _, end = _worker_records(caplog)
    assert _fields(end, "job_id", "outcome") == {"job_id": job, "outcome": "interrupted"}
    assert end.levelno == logging.INFO
