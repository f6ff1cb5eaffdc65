"""Every edge of the state machine, driven through the public API on a real file.

running -> delayed -> pending -> running (retry), running -> completed, running -> failed
(exhausted, permanent, timeout), pending/delayed/running -> cancelled (cancel, cancel_many,
forced after `cancel_timeout`). Attempt numbers follow DESIGN §7: `ctx.attempt` counts
from 0; a `delayed` retry row already carries the next attempt's number; a terminal row
carries the number of its last attempt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import pytest

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, fast_retry, make_manager, sql_one

OTHER = jl.JobType("test.other", Item)


def snapshot_log(jobs: jl.JobManager) -> list[jl.JobSnapshot]:
    """Every snapshot event the manager publishes, in order."""
    seen: list[jl.JobSnapshot] = []

    def on_event(event: jl.JobEvent) -> None:
        if event.snapshot is not None:
            seen.append(event.snapshot)

    jobs.subscribe(on_event)
    return seen


# -- retries, failures, timeouts ------------------------------------------------------


def test_retry_then_success_counts_attempts_from_zero(db: str) -> None:
    jobs = make_manager(db)
    seen: list[int] = []
    events = snapshot_log(jobs)

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(3))
    async def flaky(ctx: jl.JobContext[Item]) -> str:
        seen.append(ctx.attempt)
        if ctx.attempt < 2:
            raise RuntimeError(f"flake {ctx.attempt}")
        return "ok"

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert seen == [0, 1, 2]
    assert snap.status == jl.JobStatus.COMPLETED
    assert snap.output == "ok"
    assert snap.error is None
    assert snap.attempt == 2
    assert snap.max_attempts == 3
    trail = [(s.status, s.attempt) for s in events if s.status != "running"]
    assert trail == [("pending", 0), ("delayed", 1), ("delayed", 2), ("completed", 2)]
    delayed = [s for s in events if s.status == "delayed"]
    assert [s.error.message for s in delayed if s.error] == ["flake 0", "flake 1"]
    assert all(s.error is not None and s.error.retryable for s in delayed)


def test_exhausted_retries_fail_with_the_last_attempt_number(db: str) -> None:
    jobs = make_manager(db)
    seen: list[int] = []

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(3))
    async def boom(ctx: jl.JobContext[Item]) -> None:
        seen.append(ctx.attempt)
        raise ValueError("boom")

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert seen == [0, 1, 2]
    assert snap.status == jl.JobStatus.FAILED
    assert snap.attempt == 2
    assert snap.finished_at is not None
    # The kind of error is retryable even on the final failure.
    assert snap.error is not None
    assert snap.error.traceback is not None
    assert snap.error.traceback.endswith("ValueError: boom\n")
    assert dataclasses.replace(snap.error, traceback=None) == jl.JobErrorInfo(
        "JOB_HANDLER_THREW", "boom", True, {"exception": "ValueError"}
    )


@pytest.mark.parametrize("max_attempts", [1, 4])
def test_enqueue_max_attempts_overrides_the_policy(db: str, max_attempts: int) -> None:
    jobs = make_manager(db)
    seen: list[int] = []

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(2))
    async def boom(ctx: jl.JobContext[Item]) -> None:
        seen.append(ctx.attempt)
        raise ValueError("boom")

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item(), max_attempts=max_attempts).finished

    snap = run(main())
    assert seen == list(range(max_attempts))
    assert (snap.status, snap.attempt, snap.max_attempts) == (
        "failed",
        max_attempts - 1,
        max_attempts,
    )


def test_permanent_error_fails_at_once(db: str) -> None:
    jobs = make_manager(db)
    seen: list[int] = []

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(5))
    async def refuse(ctx: jl.JobContext[Item]) -> None:
        seen.append(ctx.attempt)
        if ctx.payload.n == 0:
            raise jl.PermanentError("bad input")
        raise jl.PermanentError("declined", code="PAYMENT_DECLINED", params={"amount": 3})

    async def main() -> tuple[jl.JobSnapshot, jl.JobSnapshot]:
        async with jobs:
            plain = await jobs.enqueue(ITEM, Item(n=0)).finished
            coded = await jobs.enqueue(ITEM, Item(n=1)).finished
            return plain, coded

    plain, coded = run(main())
    assert seen == [0, 0]
    assert (plain.status, plain.attempt) == ("failed", 0)
    # A PermanentError keeps its traceback too: the handler raised it.
    assert plain.error is not None
    assert coded.error is not None
    assert 'raise jl.PermanentError("bad input")' in (plain.error.traceback or "")
    assert dataclasses.replace(plain.error, traceback=None) == jl.JobErrorInfo(
        "JOB_HANDLER_THREW", "bad input", False, {}
    )
    assert (coded.status, coded.attempt) == ("failed", 0)
    assert dataclasses.replace(coded.error, traceback=None) == jl.JobErrorInfo(
        "PAYMENT_DECLINED", "declined", False, {"amount": 3}
    )


def test_timeout_is_retryable_and_fires_the_token_with_reason_timeout(db: str) -> None:
    jobs = make_manager(db)
    reasons: list[str | None] = []

    @jobs.handler(ITEM, recovery="retry", timeout=0.05, retry=fast_retry(2))
    async def slow(ctx: jl.JobContext[Item]) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            reasons.append(ctx.cancelled.reason)
            raise

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert reasons == ["timeout", "timeout"]
    assert (snap.status, snap.attempt, snap.timeout) == ("failed", 1, 0.05)
    assert snap.error is not None
    assert (snap.error.code, snap.error.retryable) == ("JOB_HANDLER_TIMEOUT", True)


def test_timeout_given_at_enqueue_overrides_the_handler(db: str) -> None:
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry", timeout=30.0)
    async def slow(ctx: jl.JobContext[Item]) -> None:
        # Raising anything after the token fired is classified by the token's reason.
        await ctx.cancelled.wait()
        ctx.raise_if_cancelled()

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item(), timeout=0.05, max_attempts=1).finished

    snap = run(main())
    assert snap.status == "failed"
    assert snap.timeout == 0.05
    assert snap.error is not None
    assert snap.error.code == "JOB_HANDLER_TIMEOUT"


def test_timeout_runs_on_the_injected_clock(db: str) -> None:
    clock = FakeClock()
    jobs = make_manager(db, clock=clock)
    entered = asyncio.Event()

    @jobs.handler(ITEM, recovery="retry", timeout=10.0, retry=fast_retry(1))
    async def slow(ctx: jl.JobContext[Item]) -> None:
        entered.set()
        await asyncio.sleep(60)

    async def main() -> jl.JobSnapshot:
        async with jobs:
            h = jobs.enqueue(ITEM, Item())
            await entered.wait()
            await clock.advance_async(9.9)
            assert jobs.get(h.id).status == "running"  # type: ignore[union-attr]
            await clock.advance_async(0.2)
            return await h.finished

    snap = run(main())
    assert snap.status == "failed"
    assert snap.error is not None
    assert snap.error.code == "JOB_HANDLER_TIMEOUT"
    assert snap.started_at is not None
    assert snap.finished_at is not None
    assert (snap.finished_at - snap.started_at).total_seconds() == pytest.approx(10.0, abs=0.2)


def test_jobs_with_different_timeouts_each_end_at_their_own(db: str) -> None:
    """One engine times every handler on one heap (`_runtime/deadlines.py`): a later
    job with an earlier deadline is timed out first, a job that ended before its
    deadline never is, and a long one still is, at its own."""
    clock = FakeClock()
    jobs = make_manager(db, clock=clock, global_max_concurrency=3)
    entered = {n: asyncio.Event() for n in range(3)}
    release = asyncio.Event()

    @jobs.handler(ITEM, recovery="retry", concurrency=3)
    async def hold(ctx: jl.JobContext[Item]) -> str:
        entered[ctx.payload.n].set()
        if ctx.payload.n == 0:
            await release.wait()
        else:
            await asyncio.sleep(60)
        return "done"

    async def main() -> dict[int, jl.JobSnapshot]:
        async with jobs:
            quick = jobs.enqueue(ITEM, Item(n=0), timeout=5.0, max_attempts=1)
            late = jobs.enqueue(ITEM, Item(n=1), timeout=10.0, max_attempts=1)
            await entered[0].wait()
            await entered[1].wait()
            early = jobs.enqueue(ITEM, Item(n=2), timeout=3.0, max_attempts=1)
            await entered[2].wait()
            await clock.advance_async(1.0)
            release.set()
            done = await quick.finished
            await clock.advance_async(2.1)  # 3.1 s after the third started
            first = await early.finished
            assert jobs.get(late.id).status == "running"  # type: ignore[union-attr]
            await clock.advance_async(5.0)  # past the first job's 5 s: it had ended
            assert jobs.get(late.id).status == "running"  # type: ignore[union-attr]
            await clock.advance_async(2.0)
            return {0: done, 1: await late.finished, 2: first}

    snaps = run(main())
    assert snaps[0].status == "completed"
    for n in (1, 2):
        error = snaps[n].error
        assert snaps[n].status == "failed"
        assert error is not None
        assert error.code == "JOB_HANDLER_TIMEOUT"


# -- cancel ---------------------------------------------------------------------------


class Recorder(jl.JobHandler[Item, str]):
    """Class-form handler: waits for `release` (or cancellation); records settlements."""

    recovery = "retry"
    cancel_timeout = 5.0

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.settled: list[jl.SettledEvent] = []
        self.cancel_reasons: list[str | None] = []

    async def execute(self, ctx: jl.JobContext[Item]) -> str:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancel_reasons.append(ctx.cancelled.reason)
            raise
        return f"done {ctx.payload.n}"

    def on_settled(self, event: jl.SettledEvent) -> None:
        self.settled.append(event)


def test_cancel_pending_delayed_and_running(db: str) -> None:
    jobs = make_manager(db)
    rec = Recorder()
    jobs.register_handler(ITEM, rec)

    async def main() -> None:
        async with jobs:
            running = jobs.enqueue(ITEM, Item(n=0))
            await rec.entered.wait()
            pending = jobs.enqueue(ITEM, Item(n=1))  # concurrency 1: it waits
            delayed = jobs.enqueue(ITEM, Item(n=2), delay=3600)
            assert jobs.get(pending.id).status == "pending"  # type: ignore[union-attr]
            assert jobs.get(delayed.id).status == "delayed"  # type: ignore[union-attr]

            assert await jobs.cancel(pending.id, reason="not needed") == "cancelled"
            assert await jobs.cancel(delayed.id) == "cancelled"
            assert await jobs.cancel(running.id, reason="user asked") == "cancelled"

            snaps = {h.id: await h.finished for h in (running, pending, delayed)}
            assert all(s.status == jl.JobStatus.CANCELLED for s in snaps.values())
            assert all(
                s.error is not None and s.error.code == "JOB_CANCELLED" and not s.error.retryable
                for s in snaps.values()
            )
            assert snaps[pending.id].error.message == "not needed"  # type: ignore[union-attr]
            assert snaps[delayed.id].error.message == "Cancelled by user"  # type: ignore[union-attr]
            assert "user asked" in snaps[running.id].error.message  # type: ignore[union-attr]
            assert snaps[running.id].output is None
            # Already terminal: nothing more to cancel.
            assert await jobs.cancel(running.id) == "not-cancellable"
            await wait_until(lambda: len(rec.settled) == 3, what="three on_settled calls")

    run(main())
    assert rec.cancel_reasons == ["cancel"]  # only the running one ever started
    assert sorted(e.payload["n"] for e in rec.settled) == [0, 1, 2]
    assert all(e.status == "cancelled" for e in rec.settled)


def test_cancel_of_a_plain_def_handler_is_seen_through_the_token(db: str) -> None:
    jobs = make_manager(db)
    entered = threading.Event()
    polls: list[int] = []

    @jobs.handler(ITEM, recovery="retry", cancel_timeout=5.0)
    def poll(ctx: jl.JobContext[Item]) -> None:
        entered.set()
        while not ctx.cancelled.wait_sync(0.005):
            polls.append(1)
        assert ctx.cancelled.reason == "cancel"
        ctx.raise_if_cancelled()

    async def main() -> jl.JobSnapshot:
        async with jobs:
            h = jobs.enqueue(ITEM, Item())
            await wait_until(entered.is_set, what="the handler to start")
            assert await jobs.cancel(h.id, reason="stop") == "cancelled"
            return await h.finished

    snap = run(main())
    assert snap.status == "cancelled"
    assert snap.error is not None
    assert snap.error.code == "JOB_CANCELLED"


def test_handler_ignoring_cancel_is_forced_cancelled_and_its_late_result_dropped(
    db: str,
) -> None:
    jobs = make_manager(db)
    entered = asyncio.Event()
    release = asyncio.Event()
    swallowed: list[int] = []
    settled: list[str] = []

    class Stubborn(jl.JobHandler[Item, str]):
        recovery = "retry"
        cancel_timeout = 0.05

        async def execute(self, ctx: jl.JobContext[Item]) -> str:
            entered.set()
            while not release.is_set():
                try:
                    await asyncio.sleep(0.005)
                except asyncio.CancelledError:
                    swallowed.append(1)
            return "late"

        def on_settled(self, event: jl.SettledEvent) -> None:
            settled.append(event.status)

    jobs.register_handler(ITEM, Stubborn())

    async def main() -> None:
        async with jobs:
            h = jobs.enqueue(ITEM, Item())
            await entered.wait()
            assert await jobs.cancel(h.id, reason="now") == "timed-out"
            snap = await asyncio.wait_for(h.finished, 5)
            assert snap.status == "cancelled"
            assert snap.error is not None
            assert snap.error.code == "JOB_CANCELLED"
            assert snap.error.message == "Cancel timed out after 0.05s (reason: now)"
            # Let the stubborn handler return; its result must not overwrite the row.
            release.set()
            verdict = await jobs.drain_in_flight(timeout=5)
            assert verdict.straggler_ids == ()
            after = jobs.get(h.id)
            assert after is not None
            assert (after.status, after.output, after.error) == ("cancelled", None, snap.error)
            # The slot the stubborn handler held is free again.
            assert (await jobs.enqueue(ITEM, Item(n=1)).finished).status == "completed"

    run(main())
    assert swallowed == [1]
    assert settled == ["cancelled", "completed"]


def test_cancel_many_finalizes_like_cancel(db: str) -> None:
    jobs = make_manager(db)
    rec = Recorder()
    jobs.register_handler(ITEM, rec)
    other_ran: list[int] = []

    @jobs.handler(OTHER, recovery="retry")
    async def other(ctx: jl.JobContext[Item]) -> None:
        other_ran.append(ctx.payload.n)

    async def main() -> None:
        async with jobs:
            running = jobs.enqueue(ITEM, Item(n=0))
            await rec.entered.wait()
            waiting = [jobs.enqueue(ITEM, Item(n=i)) for i in (1, 2)]
            waiting.append(jobs.enqueue(ITEM, Item(n=3), delay=3600))
            bystander = jobs.enqueue(OTHER, Item(n=9), delay=0.01)

            result = jobs.cancel_many(type=ITEM, reason="bulk")
            assert result == jl.CancelManyResult(aborted=1, transitioned=3, requested=1)
            for h in [running, *waiting]:
                snap = await h.finished
                assert snap.status == "cancelled"
                assert snap.error is not None
                assert snap.error.code == "JOB_CANCELLED"
            await wait_until(lambda: len(rec.settled) == 4, what="four on_settled calls")
            assert (await bystander.finished).status == "completed"

    run(main())
    assert sorted(e.payload["n"] for e in rec.settled) == [0, 1, 2, 3]
    assert rec.cancel_reasons == ["cancel"]
    assert other_ran == [9]


def test_cancel_many_by_queue_from_another_thread(db: str) -> None:
    jobs = make_manager(db)
    rec = Recorder()
    jobs.register_handler(ITEM, rec)

    async def main() -> None:
        async with jobs:
            running = jobs.enqueue(ITEM, Item(n=0), queue="bulk")
            await rec.entered.wait()
            waiting = jobs.enqueue(ITEM, Item(n=1), queue="bulk")
            elsewhere = jobs.enqueue(ITEM, Item(n=2), queue="elsewhere", delay=3600)
            result = await asyncio.to_thread(jobs.cancel_many, queue="bulk")
            assert result == jl.CancelManyResult(aborted=1, transitioned=1, requested=1)
            assert (await running.finished).status == "cancelled"
            assert (await waiting.finished).status == "cancelled"
            assert jobs.get(elsewhere.id).status == "delayed"  # type: ignore[union-attr]

    run(main())


def test_cancel_edge_cases(db: str) -> None:
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    async def main() -> None:
        h = jobs.enqueue(ITEM, Item())  # not started: stays pending
        assert await jobs.cancel("no-such-id") == "not-cancellable"
        with pytest.raises(jl.JobValidationError) as info:
            await jobs.cancel(h.id, reason="x" * 501)
        assert info.value.code == "JOB_CANCEL_REASON_TOO_LONG"
        with pytest.raises(jl.JobValidationError) as info:
            jobs.cancel_many(type=ITEM, reason="x" * 501)
        assert info.value.code == "JOB_CANCEL_REASON_TOO_LONG"
        with pytest.raises(jl.JobValidationError) as info:
            jobs.cancel_many()
        assert info.value.code == "JOB_FILTER_REQUIRED"
        # Nothing above touched the row.
        snap = jobs.get(h.id)
        assert snap is not None
        assert (snap.status, snap.cancel_requested) == ("pending", False)
        assert await jobs.cancel(h.id, reason="x" * 500) == "cancelled"
        await jobs.stop()

    run(main())
    assert sql_one(db, "SELECT status FROM jobs") == "cancelled"


# -- plain def handlers ---------------------------------------------------------------


def test_plain_def_handler_runs_in_a_thread_with_the_same_context(db: str) -> None:
    jobs = make_manager(db)
    seen: dict[str, Any] = {}

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(2))
    def work(ctx: jl.JobContext[Item]) -> dict[str, int]:
        seen["thread"] = threading.get_ident()
        seen.setdefault("attempts", []).append(ctx.attempt)
        seen["payload"] = ctx.payload
        seen["job_id"] = ctx.job_id
        ctx.report_progress(30, "a third")
        ctx.patch_metadata({"step": ctx.attempt})
        seen["metadata"] = dict(ctx.metadata)
        seen["cancelled"] = ctx.cancelled.is_set()
        if ctx.attempt == 0:
            raise RuntimeError("once")
        return {"n": ctx.payload.n}

    async def main() -> tuple[jl.JobSnapshot, int]:
        async with jobs:
            h = jobs.enqueue(ITEM, Item(n=7), metadata={"origin": "test"})
            snap = await h.finished
            assert seen["job_id"] == h.id
            return snap, threading.get_ident()

    snap, loop_thread = run(main())
    assert seen["thread"] != loop_thread
    assert seen["attempts"] == [0, 1]
    assert seen["payload"] == Item(n=7)
    assert seen["metadata"] == {"origin": "test", "step": 1}
    assert seen["cancelled"] is False
    assert (snap.status, snap.output, snap.progress) == ("completed", {"n": 7}, 30)
    assert snap.metadata == {"origin": "test", "step": 1}


def test_plain_def_handler_timeout_is_seen_through_the_token(db: str) -> None:
    jobs = make_manager(db)
    reasons: list[str | None] = []

    @jobs.handler(ITEM, recovery="retry", timeout=0.05, retry=fast_retry(1))
    def poll(ctx: jl.JobContext[Item]) -> None:
        ctx.cancelled.wait_sync(10)
        reasons.append(ctx.cancelled.reason)
        ctx.raise_if_cancelled()

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert reasons == ["timeout"]
    assert snap.status == "failed"
    assert snap.error is not None
    assert (snap.error.code, snap.error.retryable) == ("JOB_HANDLER_TIMEOUT", True)


def test_cancel_requested_while_the_attempt_fails_retryably_is_not_retried(db: str) -> None:
    """Another process asks for a cancel just as the handler fails retryably (before this
    worker's watcher fired the token): the job must end cancelled, not wait forever as a
    cancel-requested retry row that no claim will ever take."""
    # A slow watcher, so the handler fails before the worker notices the request.
    jobs = make_manager(db, poll_interval=5.0)
    other = jl.JobManager(db, startup_delay=0, poll_interval=0.01)  # never started
    entered = asyncio.Event()
    release = asyncio.Event()
    attempts: list[int] = []

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(3))
    async def fails(ctx: jl.JobContext[Item]) -> None:
        attempts.append(ctx.attempt)
        entered.set()
        await release.wait()
        raise RuntimeError("transient")

    async def main() -> tuple[str, jl.JobSnapshot]:
        async with jobs:
            h = jobs.enqueue(ITEM, Item())
            await entered.wait()
            cancel = asyncio.ensure_future(other.cancel(h.id, reason="elsewhere"))
            await wait_until(
                lambda: sql_one(db, "SELECT cancel_requested FROM jobs") == 1,
                what="the cancel request to be written",
            )
            release.set()
            snap = await asyncio.wait_for(h.finished, 5)
            outcome = await asyncio.wait_for(cancel, 5)
        await other.stop()
        return outcome, snap

    outcome, snap = run(main())
    assert attempts == [0]
    assert outcome == "cancelled"
    assert (snap.status, snap.attempt) == ("cancelled", 0)
    assert snap.error is not None
    assert (snap.error.code, snap.error.message, snap.error.retryable) == (
        "JOB_CANCELLED",
        "elsewhere",
        False,
    )
