"""pause() / drain_in_flight() / hold.dispose(): the write-quiesce contract (seed 001).

Every test but the backup one (it copies the SQLite file) runs on both backends.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

import jobledger as jl
from jobledger._scheduling.hooks import ScheduleHooks
from tests.conftest import db_rows
from tests.recovery import arun, wait_for_async

WORK = jl.JobType("pause.work", int)
SLOW = jl.JobType("pause.slow", int)


class BlockedCatchUp(ScheduleHooks):
    """Stands in for the scheduling layer: its catch-up step blocks until released."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def catch_up_and_arm(self) -> None:
        self.entered.set()
        await self.release.wait()


def _paused(jobs: jl.JobManager) -> bool:
    # A call, not the property, so the type checker does not narrow across dispose().
    return jobs.paused


def _disposed(hold: jl.Hold) -> bool:
    return hold.disposed


class Harness:
    """A started manager whose `pause.slow` handlers wait for `gate`, recording runs."""

    def __init__(self, db: str | Path, **options: float) -> None:
        self.jobs = jl.JobManager(db, poll_interval=0.02, **options)  # type: ignore[arg-type]
        self.ran: list[int] = []
        self.gate = asyncio.Event()
        self.saw_cancel: dict[str, bool] = {}

        @self.jobs.handler(WORK, recovery="retry", concurrency=4)
        async def work(ctx: jl.JobContext[int]) -> int:
            self.ran.append(ctx.payload)
            return ctx.payload

        @self.jobs.handler(SLOW, recovery="retry", concurrency=4)
        async def slow(ctx: jl.JobContext[int]) -> int:
            await self.gate.wait()
            self.saw_cancel[ctx.job_id] = ctx.cancelled.is_set()
            return ctx.payload

    def status(self, job_id: str) -> str:
        snap = self.jobs.get(job_id)
        assert snap is not None
        return str(snap.status)

    async def settle_loop(self, seconds: float = 0.25) -> None:
        """Let the watcher, promoter and dispatch run for several poll periods."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)


def test_drain_with_nothing_in_flight_is_clean(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            done = await jobs.enqueue(WORK, 1).finished
            assert done.status == "completed"
            hold = jobs.pause("backup")
            verdict = await jobs.drain_in_flight(timeout=1.0)
            assert verdict == jl.DrainVerdict(straggler_ids=(), startup_recovery_pending=False)
            assert verdict.clean
            hold.dispose()

    arun(body)


def test_drain_waits_for_in_flight_handlers_that_finish_in_time(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            handle = jobs.enqueue(SLOW, 1)
            await wait_for_async(lambda: h.status(handle.id) == "running")
            hold = jobs.pause()
            asyncio.get_running_loop().call_later(0.1, h.gate.set)
            started = time.monotonic()
            verdict = await jobs.drain_in_flight(timeout=10.0)
            assert verdict.clean
            assert time.monotonic() - started < 3.0, "drain returns when handlers settle"
            assert h.status(handle.id) == "completed"
            hold.dispose()

    arun(body)


def test_a_straggler_is_reported_never_aborted_and_finishes_later(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            handle = jobs.enqueue(SLOW, 7)
            await wait_for_async(lambda: h.status(handle.id) == "running")
            hold = jobs.pause("backup")
            verdict = await jobs.drain_in_flight(timeout=0.1)
            assert verdict.straggler_ids == (handle.id,)
            assert not verdict.startup_recovery_pending
            assert not verdict.clean
            assert h.status(handle.id) == "running"
            hold.dispose()  # the abort path gives the manager its autonomy back
            h.gate.set()
            snap = await handle.finished
            assert snap.status == "completed"
            assert snap.output == 7
            assert h.saw_cancel == {handle.id: False}, "a drain never fires the cancel token"

    arun(body)


def test_recovery_pending_while_a_step_runs_and_deferred_until_release(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        jobs = h.jobs
        hooks = BlockedCatchUp()
        jobs._lifecycle.schedules = hooks  # the hook the scheduling layer fills
        async with jobs:
            await asyncio.wait_for(hooks.entered.wait(), 10.0)
            hold = jobs.pause("backup")
            verdict = await jobs.drain_in_flight(timeout=0.1)
            assert verdict == jl.DrainVerdict(straggler_ids=(), startup_recovery_pending=True)
            assert not jobs.recovery_done.done()

            # The started step runs to completion (drain awaits it); the next waits.
            asyncio.get_running_loop().call_later(0.05, hooks.release.set)
            verdict = await jobs.drain_in_flight(timeout=10.0)
            assert verdict.clean
            handle = jobs.enqueue(WORK, 1)  # allowed while paused: lands at rest
            await h.settle_loop()
            assert not jobs.recovery_done.done(), "a pause defers the rest of the flow"
            assert h.status(handle.id) == "pending"
            assert h.ran == []

            hold.dispose()
            await asyncio.wait_for(jobs.recovery_done, 10.0)
            assert (await handle.finished).status == "completed"
            assert h.ran == [1]

    arun(body)


def test_work_enqueued_or_due_during_a_pause_waits_for_release(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            due = jobs.enqueue(WORK, 1, delay=0.05)
            hold = jobs.pause("backup")
            now = jobs.enqueue(WORK, 2)
            await h.settle_loop(0.3)
            assert h.status(now.id) == "pending"
            assert h.status(due.id) == "delayed", "promotion is an autonomous write: blocked"
            assert h.ran == []
            assert _paused(jobs)

            hold.dispose()
            assert not _paused(jobs)
            snaps = await asyncio.gather(now.finished, due.finished)
            assert [s.status for s in snaps] == ["completed", "completed"]
            assert sorted(h.ran) == [1, 2]

    arun(body)


def test_holds_are_refcounted_and_dispose_is_idempotent(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            first = jobs.pause("one")
            second = jobs.pause("two")
            handle = jobs.enqueue(WORK, 1)
            first.dispose()
            first.dispose()
            first.dispose()
            assert _disposed(first)
            assert _paused(jobs), "a second dispose of one hold must not release another"
            await h.settle_loop()
            assert h.status(handle.id) == "pending"
            with second:
                pass  # a hold is also a context manager; leaving it disposes it
            assert _disposed(second)
            assert not _paused(jobs)
            assert (await handle.finished).status == "completed"
            second.dispose()
            assert not _paused(jobs)

    arun(body)


def test_a_backup_between_drain_and_release_holds_every_committed_job(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    backup = tmp_path / "backup.db"

    async def body() -> tuple[set[str], dict[str, str]]:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            before = [jobs.enqueue(WORK, n) for n in range(20)]
            await asyncio.gather(*(x.finished for x in before))
            hold = jobs.pause("backup")
            verdict = await jobs.drain_in_flight(timeout=5.0)
            assert verdict.clean
            during = jobs.enqueue_many(WORK, list(range(20, 30)))
            with jobs.write_tx() as tx:
                jobs.enqueue_tx(tx, WORK, 99)
            committed = {s.id: str(s.status) for s in jobs.list(limit=1000)}

            src = sqlite3.connect(db)
            dst = sqlite3.connect(backup)
            try:
                src.backup(dst)
            finally:
                dst.close()
                src.close()

            hold.dispose()
            await asyncio.gather(*(x.finished for x in during))
            return {x.id for x in before + during}, committed

    ids, committed = arun(body)
    assert ids <= set(committed)
    conn = sqlite3.connect(backup)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        in_backup = dict(conn.execute("SELECT id, status FROM jobs").fetchall())
    finally:
        conn.close()
    assert in_backup == committed, "the backup is exactly the state committed at the drain"
    assert sorted(set(in_backup.values())) == ["completed", "pending"]


def test_no_api_raises_during_a_pause(db: str) -> None:
    async def body() -> None:
        h = Harness(db, startup_delay=0)
        async with h.jobs as jobs:
            await jobs.recovery_done
            running = jobs.enqueue(SLOW, 1)
            await wait_for_async(lambda: h.status(running.id) == "running")
            hold = jobs.pause("maintenance")

            waiting = jobs.enqueue(WORK, 1, priority=5, metadata={"k": "v"})
            many = jobs.enqueue_many(WORK, [2, 3], idempotency_key=None)
            with jobs.write_tx() as tx:
                in_tx = jobs.enqueue_tx(tx, WORK, 4)
            delayed = jobs.enqueue(WORK, 5, delay=3600)
            assert await jobs.cancel(waiting.id, reason="not now") == "cancelled"
            assert await jobs.cancel("no-such-job") == "not-cancellable"
            result = jobs.cancel_many(queue=WORK.name, reason="flush")
            assert result.transitioned == 4
            assert jobs.get(in_tx.id) is not None
            assert len(jobs.list(status="cancelled")) == 5
            assert jobs.count(type=WORK) == 5
            inner = jobs.pause("nested")
            verdict = await jobs.drain_in_flight(timeout=0.05)
            assert verdict.straggler_ids == (running.id,)

            sid = jobs.register_job_schedule(WORK, 6, trigger=jl.Interval(seconds=3600))
            assert await jobs.trigger_job_schedule_now_by_id(sid) is True
            manual = jobs.list(schedule_id=sid)
            assert [s.status for s in manual] == ["pending"]
            assert jobs.pause_job_schedule_by_id(sid) is True
            assert jobs.unregister_job_schedule_by_id(sid) is True
            assert (await jobs.cancel(running.id)) == "cancelled"

            inner.dispose()
            hold.dispose()
            hold.dispose()
            assert h.status(delayed.id) == "cancelled"
            assert {s.id for s in many} <= {s.id for s in jobs.list(status="cancelled")}
            await wait_for_async(lambda: not jobs._engine.inflight)

    arun(body)


@pytest.mark.parametrize("disposed_before_stop", [True, False])
def test_stop_with_a_hold_outstanding_is_clean(db: str, disposed_before_stop: bool) -> None:
    async def body() -> str:
        h = Harness(db, startup_delay=0)
        jobs = h.jobs
        await jobs.start()
        await jobs.recovery_done
        hold = jobs.pause("restore")
        handle = jobs.enqueue(WORK, 1)
        if disposed_before_stop:
            hold.dispose()
            assert (await handle.finished).status == "completed"
        started = time.monotonic()
        await jobs.stop()
        assert time.monotonic() - started < 3.0
        hold.dispose()  # after stop: a no-op, never an error
        return handle.id

    job_id = arun(body)
    rows = db_rows(db, "SELECT status FROM jobs WHERE id = ?", (job_id,))
    assert rows == [("completed" if disposed_before_stop else "pending",)]
