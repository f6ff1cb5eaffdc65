"""Every attempt is recorded (docs/reference/api.md, "Attempts"): its outcome, worker,
times, error with the traceback of what the handler raised, and its `ctx.logger` lines;
across a retry, a PermanentError, a cancel, a shutdown interrupt and a `kill -9` rescue,
on both backends and real processes where a process must die."""

from __future__ import annotations

import asyncio
from pathlib import Path

import jobledger as jl
from jobledger.testing import FakeClock, drain
from tests.recovery import arun, read_markers, spawn, status_counts, wait_for, wait_for_async
from tests.recovery.worker_proc import RETRY

FLAKY = jl.JobType("att.flaky", int)
REFUSE = jl.JobType("att.refuse", int)
BLOCK = jl.JobType("att.block", int)
LOUD = jl.JobType("att.loud", int)


def _outcomes(jobs: jl.JobManager, job_id: str) -> list[tuple[int, str]]:
    return [(a.attempt, a.outcome) for a in jobs.attempts(job_id)]


def test_a_job_that_succeeds_on_its_third_attempt_keeps_both_failures(db: str) -> None:
    jobs = jl.JobManager(db, clock=FakeClock(), startup_delay=0)
    calls: list[int] = []

    @jobs.handler(FLAKY, recovery="retry", retry=jl.RetryPolicy(max_attempts=5))
    def flaky(ctx: jl.JobContext[int]) -> str:
        calls.append(ctx.attempt)
        ctx.logger.info("try %d", len(calls))
        if len(calls) < 3:
            raise ConnectionError(f"refused {len(calls)}")
        return "ok"

    async def main() -> tuple[jl.JobSnapshot, list[jl.AttemptSnapshot]]:
        async with jobs:
            handle = jobs.enqueue(FLAKY, 1)
            await drain(jobs)
            snap = jobs.get(handle.id)
            assert snap is not None
            return snap, jobs.attempts(handle.id)

    snap, attempts = arun(main)
    assert snap.status == "completed"
    assert [(a.attempt, a.outcome) for a in attempts] == [
        (1, "retry"),
        (2, "retry"),
        (3, "completed"),
    ]
    for n, a in enumerate(attempts[:2], start=1):
        assert a.error is not None
        assert a.error.code == "JOB_HANDLER_THREW"
        assert a.error.message == f"refused {n}"
        assert a.error.traceback is not None
        assert "raise ConnectionError" in a.error.traceback
        assert a.error.traceback.endswith(f"ConnectionError: refused {n}\n")
    assert attempts[2].error is None
    assert {a.worker_id for a in attempts} == {jobs.worker_id}
    for a in attempts:
        assert a.started_at is not None
        assert a.started_at <= a.finished_at
    # Each attempt keeps its own lines.
    assert [[line.message for line in a.logs] for a in attempts] == [
        ["try 1"],
        ["try 2"],
        ["try 3"],
    ]
    assert {line.level for a in attempts for line in a.logs} == {"INFO"}


def test_a_permanent_error_is_one_failed_attempt_with_its_traceback(db: str) -> None:
    jobs = jl.JobManager(db, clock=FakeClock(), startup_delay=0)

    @jobs.handler(REFUSE, recovery="retry")
    async def refuse(ctx: jl.JobContext[int]) -> None:
        raise jl.PermanentError("no such account", code="ACCOUNT_MISSING")

    async def main() -> list[jl.AttemptSnapshot]:
        async with jobs:
            handle = jobs.enqueue(REFUSE, 1)
            await drain(jobs)
            return jobs.attempts(handle.id)

    [attempt] = arun(main)
    assert (attempt.attempt, attempt.outcome) == (1, "failed")
    assert attempt.error is not None
    assert attempt.error.code == "ACCOUNT_MISSING"
    assert 'raise jl.PermanentError("no such account"' in (attempt.error.traceback or "")


def test_a_cancelled_attempt_has_no_traceback(db: str) -> None:
    jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.01)
    started = asyncio.Event()

    @jobs.handler(BLOCK, recovery="retry")
    async def block(ctx: jl.JobContext[int]) -> None:
        started.set()
        await asyncio.sleep(3600)

    async def main() -> list[jl.AttemptSnapshot]:
        async with jobs:
            handle = jobs.enqueue(BLOCK, 1)
            await asyncio.wait_for(started.wait(), 10)
            assert await jobs.cancel(handle.id, "not needed") == "cancelled"
            await asyncio.wait_for(handle.finished, 10)
            return jobs.attempts(handle.id)

    [attempt] = arun(main)
    assert attempt.outcome == "cancelled"
    assert attempt.error is not None
    assert attempt.error.code == "JOB_CANCELLED"
    assert attempt.error.traceback is None


def test_a_shutdown_interrupt_is_recorded_and_the_next_attempt_has_the_same_number(
    db: str,
) -> None:
    first = jl.JobManager(db, startup_delay=0, poll_interval=0.01, shutdown_grace=0)
    started = asyncio.Event()

    @first.handler(BLOCK, recovery="retry")
    async def block(ctx: jl.JobContext[int]) -> None:
        started.set()
        await asyncio.sleep(3600)

    async def interrupt() -> str:
        await first.start()
        handle = first.enqueue(BLOCK, 1)
        await asyncio.wait_for(started.wait(), 10)
        await first.stop()
        return handle.id

    job_id = arun(interrupt)
    second = jl.JobManager(db, startup_delay=0, poll_interval=0.01)

    @second.handler(BLOCK, recovery="retry")
    async def finish(ctx: jl.JobContext[int]) -> str:
        return "done"

    async def resume() -> list[jl.AttemptSnapshot]:
        async with second:
            await drain(second)
            return second.attempts(job_id)

    attempts = arun(resume)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "interrupted"), (1, "completed")]
    assert [a.worker_id for a in attempts] == [first.worker_id, second.worker_id]
    assert attempts[0].error is None


def test_a_kill9_rescue_records_the_lost_attempt(db: str, tmp_path: Path) -> None:
    producer = jl.JobManager(db)
    job_id = producer.enqueue(RETRY, 7).id
    arun(producer.stop)

    child = spawn(db, "block", tmp_path, "w1", "--concurrency", "1")
    try:
        dead_id = child.wait_started()
        wait_for(lambda: len(read_markers(child.markers)) == 1, what="the child to run the job")
    finally:
        child.kill9()

    async def restart() -> list[jl.AttemptSnapshot]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(RETRY, recovery="retry")
        async def retry(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        async with jobs:
            await jobs.recovery_done
            await wait_for_async(
                lambda: status_counts(db).get("completed") == 1, what="the rescued job to end"
            )
            return jobs.attempts(job_id)

    attempts = arun(restart)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lost"), (1, "completed")]
    lost = attempts[0]
    assert lost.worker_id == dead_id
    assert lost.started_at is not None
    assert lost.error is not None
    assert lost.error.code == "JOB_WORKER_LOST"
    assert lost.error.traceback is None


def test_tracebacks_and_log_lines_are_capped(db: str) -> None:
    jobs = jl.JobManager(db, clock=FakeClock(), startup_delay=0)

    @jobs.handler(LOUD, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    def loud(ctx: jl.JobContext[int]) -> None:
        for i in range(250):
            ctx.logger.warning("line %d", i)

        def deep(n: int) -> None:
            if n == 0:
                raise ValueError("x" * 40_000)
            deep(n - 1)

        deep(50)

    async def main() -> list[jl.AttemptSnapshot]:
        async with jobs:
            handle = jobs.enqueue(LOUD, 1)
            await drain(jobs)
            return jobs.attempts(handle.id)

    [attempt] = arun(main)
    assert attempt.outcome == "failed"
    assert attempt.error is not None
    tb = attempt.error.traceback
    assert tb is not None
    assert len(tb.encode()) <= 16 * 1024
    assert tb.startswith("[... traceback cut to its last 16 KiB ...]")
    assert tb.endswith("x" * 100 + "\n")
    # The last 200 lines, led by a note of the 50 dropped.
    messages = [line.message for line in attempt.logs]
    assert messages[0] == "[50 earlier line(s) dropped]"
    assert messages[1:] == [f"line {i}" for i in range(50, 250)]
