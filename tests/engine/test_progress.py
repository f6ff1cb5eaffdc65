"""Progress, metadata and events of a running job, as other readers see them.

Progress writes are throttled on the clock's monotonic time, so a `FakeClock` (which
only moves when told) makes the throttle exact: the first report is written, the rest
within the interval are not, and the last one always lands with the outcome.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager


def test_progress_is_throttled_and_the_last_value_always_persisted(db: str) -> None:
    clock = FakeClock()
    jobs = make_manager(db, clock=clock)
    step = asyncio.Event()
    go_on = asyncio.Event()
    progress_events: list[tuple[float | None, str | None]] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        for value in range(10, 100, 10):
            await ctx.report_progress(value, f"at {value}")
        step.set()
        await go_on.wait()
        go_on.clear()
        await ctx.report_progress(95, "almost")  # the interval has passed: written now
        await ctx.report_progress(100, "done")  # throttled: lands with the outcome
        step.set()
        await go_on.wait()

    async def main() -> jl.JobSnapshot:
        async with jobs:
            h = jobs.enqueue(ITEM, Item())
            jobs.subscribe(
                lambda e: (
                    progress_events.append((e.progress, e.detail)) if e.kind == "progress" else None
                ),
                job_id=h.id,
            )
            await step.wait()
            step.clear()
            snap = jobs.get(h.id)
            assert snap is not None
            # Only the first report reached the row; the throttle held back the rest.
            assert (snap.status, snap.progress, snap.progress_detail) == ("running", 10, "at 10")
            clock.advance(1.0)
            go_on.set()
            await step.wait()
            snap = jobs.get(h.id)
            assert snap is not None
            assert (snap.progress, snap.progress_detail) == (95, "almost")
            go_on.set()
            return await h.finished

    snap = run(main())
    assert (snap.status, snap.progress, snap.progress_detail) == ("completed", 100, "done")
    # Events are not throttled: every report is published.
    assert progress_events == [
        *((float(v), f"at {v}") for v in range(10, 100, 10)),
        (95.0, "almost"),
        (100.0, "done"),
    ]


def test_last_progress_lands_on_failure_too(db: str) -> None:
    jobs = make_manager(db, clock=FakeClock())

    @jobs.handler(ITEM, recovery="retry")
    def work(ctx: jl.JobContext[Item]) -> None:
        ctx.report_progress(5)
        ctx.report_progress(42.5, "stuck")
        raise jl.PermanentError("gave up")

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert (snap.status, snap.progress, snap.progress_detail) == ("failed", 42.5, "stuck")


def test_progress_is_clamped_and_validated(db: str) -> None:
    jobs = make_manager(db)
    errors: list[str] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        bad: Any = "half"
        with pytest.raises(jl.JobValidationError) as info:
            await ctx.report_progress(bad)
        errors.append(info.value.code)
        await ctx.report_progress(250)

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert errors == ["JOB_INVALID_OPTION"]
    assert snap.progress == 100


def test_patch_metadata_writes_the_row_first_then_the_context(db: str) -> None:
    jobs = make_manager(db)
    inside: dict[str, Any] = {}
    patched = asyncio.Event()
    finish = asyncio.Event()
    settled: list[jl.SettledEvent] = []

    class Meta(jl.JobHandler[Item, None]):
        recovery = "retry"

        async def execute(self, ctx: jl.JobContext[Item]) -> None:
            inside["before"] = dict(ctx.metadata)
            await ctx.patch_metadata({"remote_id": "abc", "origin": "patched"})
            # Database first: by the time the call returns, every reader sees the patch.
            row = jobs.get(ctx.job_id)
            inside["row_after_patch"] = None if row is None else dict(row.metadata)
            inside["after"] = dict(ctx.metadata)
            bad: Any = {"x": object()}
            with pytest.raises(jl.JobValidationError):
                await ctx.patch_metadata(bad)
            inside["after_bad"] = dict(ctx.metadata)
            patched.set()
            await finish.wait()

        def on_settled(self, event: jl.SettledEvent) -> None:
            settled.append(event)

    jobs.register_handler(ITEM, Meta())

    async def main() -> jl.JobSnapshot:
        async with jobs:
            h = jobs.enqueue(ITEM, Item(), metadata={"origin": "enqueue", "keep": 1})
            await patched.wait()
            snap = jobs.get(h.id)
            assert snap is not None
            assert (snap.status, dict(snap.metadata)) == (
                "running",
                {"origin": "patched", "keep": 1, "remote_id": "abc"},
            )
            finish.set()
            done = await h.finished
            await wait_until(lambda: settled, what="on_settled")
            return done

    snap = run(main())
    want = {"origin": "patched", "keep": 1, "remote_id": "abc"}
    assert inside["before"] == {"origin": "enqueue", "keep": 1}
    assert inside["row_after_patch"] == want
    assert inside["after"] == want
    assert inside["after_bad"] == want
    assert dict(snap.metadata) == want
    assert dict(settled[0].metadata) == want


def test_snapshot_and_progress_events_via_subscribe(db: str) -> None:
    jobs = make_manager(db)
    every: list[jl.JobEvent] = []
    mine: list[jl.JobEvent] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> int:
        await ctx.report_progress(50, "half")
        return ctx.payload.n

    async def main() -> str:
        async with jobs:
            unsubscribe = jobs.subscribe(every.append)
            first = jobs.enqueue(ITEM, Item(n=1))
            jobs.subscribe(mine.append, job_id=first.id)
            await first.finished
            unsubscribe()
            second = jobs.enqueue(ITEM, Item(n=2))
            await second.finished
            return first.id

    first_id = run(main())
    assert {e.job_id for e in every} == {first_id}  # unsubscribed before the second
    kinds = [(e.kind, e.snapshot.status if e.snapshot else e.progress) for e in every]
    assert kinds[0] == ("snapshot", "pending")
    assert ("progress", 50.0) in kinds
    assert kinds[-1] == ("snapshot", "completed")
    last = every[-1].snapshot
    assert last is not None
    assert last.output == 1
    assert [(e.kind, e.progress, e.detail) for e in mine if e.kind == "progress"] == [
        ("progress", 50.0, "half")
    ]
    assert mine[-1].snapshot is not None
    assert mine[-1].snapshot.status == "completed"


def test_a_failing_subscriber_does_not_break_the_engine(db: str) -> None:
    jobs = make_manager(db)
    calls = threading.Event()

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        await ctx.report_progress(1)

    def explode(event: jl.JobEvent) -> None:
        calls.set()
        raise RuntimeError("subscriber bug")

    async def main() -> jl.JobSnapshot:
        async with jobs:
            jobs.subscribe(explode)
            return await jobs.enqueue(ITEM, Item()).finished

    assert run(main()).status == "completed"
    assert calls.is_set()
