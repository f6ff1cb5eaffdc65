"""Quiet window, shutdown drain, fencing of rescued rows, and a full disk.

Every test but the full disk (SQLite's `max_page_count`) runs on both backends.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import jobledger as jl
from jobledger._storage.sqlite.store import SqliteStore
from jobledger.testing import FakeClock
from tests.conftest import db_rows
from tests.recovery import arun, status_counts, wait_for, wait_for_async

WORK = jl.JobType("life.work", int)
HONOURS = jl.JobType("life.honours", int)
IGNORES_RETRY = jl.JobType("life.ignores-retry", int)
IGNORES_ABANDON = jl.JobType("life.ignores-abandon", int)
HONOURS_ABANDON = jl.JobType("life.honours-abandon", int)
BIG = jl.JobType("life.big", str)


def _sql(db: str | Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return db_rows(str(db), sql, params)


def _plant_dead_worker(db: str, clock: FakeClock, n: int) -> list[str]:
    """`n` jobs left `running` by a worker that died without a word (stale heartbeat)."""
    producer = jl.JobManager(db, clock=clock)
    ids = [h.id for h in producer.enqueue_many(WORK, list(range(n)))]
    arun(producer.stop)
    _sql(
        db,
        "INSERT INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at) "
        "VALUES ('ghost', 'another-host', 1, '[]', 0, 0)",
    )
    _sql(
        db,
        "UPDATE jobs SET status = 'running', worker_id = 'ghost', started_at = 0, "
        "enqueued_by = 'ghost'",
    )
    return ids


async def _terminal(jobs: jl.JobManager, job_id: str) -> jl.JobSnapshot:
    """The job's terminal snapshot, read through the public API (polled)."""

    def done() -> jl.JobSnapshot | None:
        snap = jobs.get(job_id)
        terminal = snap is not None and snap.status in ("completed", "failed", "cancelled")
        return snap if terminal else None

    return await wait_for_async(done, what=f"job {job_id} to finish")


# -- the quiet window ---------------------------------------------------------------


def test_nothing_is_recovered_inside_the_quiet_window_and_everything_at_its_end(
    db: str,
) -> None:
    clock = FakeClock()
    ids = _plant_dead_worker(db, clock, 5)
    ran: list[int] = []

    async def body() -> None:
        jobs = jl.JobManager(db, clock=clock, startup_delay=60.0, poll_interval=0.02)

        @jobs.handler(WORK, recovery="retry")
        async def work(ctx: jl.JobContext[int]) -> int:
            ran.append(ctx.payload)
            return ctx.payload

        async with jobs:
            await clock.advance_async(59.9)
            await asyncio.sleep(0.1)  # the watcher and dispatch get real time too
            assert not jobs.recovery_done.done()
            assert status_counts(db) == {"running": 5}
            assert _sql(db, "SELECT id FROM workers WHERE id = 'ghost'") == [("ghost",)]
            assert ran == []

            await clock.advance_async(0.1)
            await asyncio.wait_for(jobs.recovery_done, 10.0)
            snaps = [await _terminal(jobs, i) for i in ids]
            assert {s.status for s in snaps} == {"completed"}
            assert sorted(ran) == list(range(5))
            assert _sql(db, "SELECT id FROM workers WHERE id = 'ghost'") == []

    arun(body)


def test_a_stop_inside_the_quiet_window_means_recovery_never_runs(db: str) -> None:
    clock = FakeClock()
    _plant_dead_worker(db, clock, 3)

    async def body() -> None:
        jobs = jl.JobManager(db, clock=clock, startup_delay=60.0, poll_interval=0.02)

        @jobs.handler(WORK, recovery="retry")
        async def work(ctx: jl.JobContext[int]) -> int:
            raise AssertionError("nothing may run")

        await jobs.start()
        await clock.advance_async(30.0)
        await jobs.stop()
        await clock.advance_async(120.0)
        await asyncio.sleep(0.1)
        assert not jobs.recovery_done.done()

    arun(body)
    assert status_counts(db) == {"running": 3}
    assert _sql(db, "SELECT id FROM workers WHERE id = 'ghost'") == [("ghost",)]


# -- shutdown -----------------------------------------------------------------------


GRACE = 0.3  # a short grace keeps these tests fast; the default is 4.5 s


def test_stop_interrupts_cooperative_handlers_and_leaves_stubborn_ones_to_recovery(
    db: str,
) -> None:
    release = threading.Event()
    exited = threading.Event()
    # A plain handler that ignores its cancel token: stop() cannot end it.

    def stubborn(ctx: jl.JobContext[int]) -> int:
        try:
            release.wait(60.0)
            return -1
        finally:
            exited.set()

    async def first() -> tuple[dict[str, str], float]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, shutdown_grace=GRACE)

        @jobs.handler(HONOURS, recovery="retry")
        async def honours(ctx: jl.JobContext[int]) -> None:
            await asyncio.Event().wait()

        @jobs.handler(HONOURS_ABANDON, recovery="abandon")
        async def honours_abandon(ctx: jl.JobContext[int]) -> None:
            await asyncio.Event().wait()

        jobs.handler(IGNORES_RETRY, recovery="retry")(stubborn)
        jobs.handler(IGNORES_ABANDON, recovery="abandon")(stubborn)

        await jobs.start()
        await jobs.recovery_done
        ids = {
            "honours": jobs.enqueue(HONOURS, 1).id,
            "honours_abandon": jobs.enqueue(HONOURS_ABANDON, 4).id,
            "retry": jobs.enqueue(IGNORES_RETRY, 2).id,
            "abandon": jobs.enqueue(IGNORES_ABANDON, 3).id,
        }
        await wait_for_async(lambda: status_counts(db) == {"running": 4})
        started = time.monotonic()
        await jobs.stop()
        took = time.monotonic() - started
        # The stubborn threads finish only now, after stop(): their late results are dropped.
        release.set()
        await wait_for_async(exited.is_set)
        await asyncio.sleep(0.05)
        return ids, took

    ids, took = arun(first)
    # The grace, then the interrupt and at most 1 s for the handlers to settle.
    assert GRACE + 1.0 - 0.1 <= took < GRACE + 1.0 + 2.0, took
    found = _sql(db, "SELECT id, status, attempt, error FROM jobs")
    rows = {i: (st, a, e) for i, st, a, e in found}
    # Interrupted by the deploy, under retry: work again, its attempt not spent.
    assert rows[ids["honours"]] == ("pending", 0, None)
    # Under abandon: cancelled as before.
    status, _, error = rows[ids["honours_abandon"]]
    assert status == "cancelled"
    assert '"JOB_CANCELLED"' in error
    assert '"shutdown"' in error
    assert rows[ids["retry"]][0] == "running"
    assert rows[ids["abandon"]][0] == "running"

    async def second() -> tuple[dict[str, jl.JobSnapshot], float]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(HONOURS, recovery="retry")
        async def honours(ctx: jl.JobContext[int]) -> str:
            return f"attempt {ctx.attempt}"

        @jobs.handler(HONOURS_ABANDON, recovery="abandon")
        async def honours_abandon(ctx: jl.JobContext[int]) -> None:
            raise AssertionError("a cancelled job never runs again")

        @jobs.handler(IGNORES_RETRY, recovery="retry")
        async def retry(ctx: jl.JobContext[int]) -> str:
            return "second run"

        @jobs.handler(IGNORES_ABANDON, recovery="abandon")
        async def abandon(ctx: jl.JobContext[int]) -> str:
            raise AssertionError("an abandoned job never runs again")

        await jobs.start()
        await jobs.recovery_done
        snaps = {k: await _terminal(jobs, v) for k, v in ids.items()}
        started = time.monotonic()
        await jobs.stop()
        return snaps, time.monotonic() - started

    snaps, took = arun(second)
    assert snaps["honours"].status == "completed"
    assert snaps["honours"].output == "attempt 0"
    assert snaps["retry"].status == "completed"
    assert snaps["retry"].output == "second run"
    assert snaps["abandon"].status == "cancelled"
    assert snaps["honours_abandon"].status == "cancelled"
    assert took < 3.0, "with nothing running, stop() does not wait for the grace"


def test_stop_waits_the_grace_for_running_jobs_to_finish(db: str) -> None:
    """A deploy lets a job that is 0.2 s from done finish (today it is cancelled)."""

    async def body() -> tuple[jl.JobSnapshot | None, float]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, shutdown_grace=5.0)
        started = asyncio.Event()

        @jobs.handler(HONOURS, recovery="retry")
        async def almost_done(ctx: jl.JobContext[int]) -> str:
            started.set()
            await asyncio.sleep(0.2)
            return "finished"

        await jobs.start()
        h = jobs.enqueue(HONOURS, 1)
        await started.wait()
        t0 = time.monotonic()
        await jobs.stop()
        return jobs.get(h.id), time.monotonic() - t0

    snap, took = arun(body)
    assert snap is not None
    assert snap.status == "completed"
    assert snap.output == "finished"
    assert took < 2.0, "stop() returns as soon as the handlers end, not after the grace"


def test_a_stop_during_the_grace_claims_nothing_new(db: str) -> None:
    async def body() -> tuple[list[int], int]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, shutdown_grace=5.0)
        ran: list[int] = []
        gate = asyncio.Event()

        @jobs.handler(HONOURS, recovery="retry", concurrency=1)
        async def one_at_a_time(ctx: jl.JobContext[int]) -> None:
            ran.append(ctx.payload)
            gate.set()
            await asyncio.sleep(0.2)

        await jobs.start()
        jobs.enqueue(HONOURS, 1)
        await gate.wait()
        jobs.enqueue_many(HONOURS, [2, 3])
        await jobs.stop()
        return ran, jobs.count(status="pending")

    ran, pending = arun(body)
    assert ran == [1]
    assert pending == 2


# -- fencing ------------------------------------------------------------------------


def test_a_rescued_rows_late_result_from_its_old_worker_is_dropped(db: str) -> None:
    async def body() -> None:
        gate = asyncio.Event()
        late: dict[str, Any] = {}
        # A: alive but silent (no heartbeat for an hour), like a process stuck in a long pause.
        a = jl.JobManager(db, startup_delay=0, heartbeat_interval=3600.0, poll_interval=0.02)

        @a.handler(WORK, recovery="retry")
        async def slow(ctx: jl.JobContext[int]) -> str:
            await gate.wait()
            try:
                await ctx.patch_metadata({"from": "a"})
            except jl.JobError as exc:
                late["patch"] = exc.code
            return "from a"

        await a.start()
        await a.recovery_done
        handle = a.enqueue(WORK, 1)
        await wait_for_async(lambda: status_counts(db) == {"running": 1})
        hold = a.pause("do not re-claim what B is about to rescue")
        await asyncio.sleep(0.3)  # A's one heartbeat is now older than B's worker_timeout

        b = jl.JobManager(db, startup_delay=0, worker_timeout=0.2, poll_interval=0.02)

        @b.handler(WORK, recovery="retry")
        async def quick(ctx: jl.JobContext[int]) -> str:
            return "from b"

        await b.start()
        await b.recovery_done
        rescued = await _terminal(b, handle.id)
        assert rescued.status == "completed"
        assert rescued.output == "from b"
        assert rescued.worker_id == b.worker_id

        gate.set()
        await wait_for_async(lambda: not a._engine.inflight, what="A's late finish")
        row = b.get(handle.id)
        assert row is not None
        assert (row.status, row.output, row.worker_id) == ("completed", "from b", b.worker_id)
        assert row.metadata == {}
        assert late == {"patch": "JOB_CLAIM_LOST"}
        hold.dispose()
        await b.stop()
        await a.stop()

    arun(body)


# -- a full disk --------------------------------------------------------------------


def test_a_full_database_fails_enqueue_cleanly_and_keeps_outcomes_until_it_fits(
    tmp_path: Path,
) -> None:
    """SQLite's `max_page_count` makes the file full: an enqueue fails with DB_FULL and
    nothing is written; finished jobs keep their outcomes (rows `running`, handles
    unresolved, slots held) and write them once there is room, with no restart."""
    db = tmp_path / "jobs.db"
    big_output = "x" * 256_000

    async def body() -> tuple[list[str], list[str], jl.JobError, list[jl.JobSnapshot]]:
        gate = asyncio.Event()
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(BIG, recovery="retry", concurrency=3)
        async def big(ctx: jl.JobContext[str]) -> str:
            await gate.wait()
            return big_output

        await jobs.start()
        await jobs.recovery_done
        running = [jobs.enqueue(BIG, f"r{n}") for n in range(3)]
        await wait_for_async(lambda: status_counts(db) == {"running": 3})
        waiting = [jobs.enqueue(BIG, f"w{n}", delay=3600) for n in range(5)]

        store = jobs._store
        assert isinstance(store, SqliteStore)
        conn = store.conn
        with store.lock:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(jl.JobError) as caught:
            jobs.enqueue(BIG, "y" * 256_000)
        waits = [asyncio.ensure_future(h.finished) for h in running]
        gate.set()  # every handler now returns 256 kB that no longer fits
        verdict = await jobs.drain_in_flight(timeout=0.5)
        assert set(verdict.straggler_ids) == {h.id for h in running}, "outcomes are kept"
        assert not any(w.done() for w in waits), "no handle resolves before its write"
        assert status_counts(db) == {"running": 3, "delayed": 5}
        with store.lock:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            conn.execute("PRAGMA max_page_count = 1073741823")
        finished = [await asyncio.wait_for(w, 10.0) for w in waits]
        await jobs.stop()
        return [h.id for h in running], [h.id for h in waiting], caught.value, finished

    running, waiting, error, finished = arun(body)
    assert isinstance(error, jl.DatabaseFull)
    assert error.code == "DB_FULL"
    for snap in finished:
        assert (snap.status, len(snap.output)) == ("completed", len(big_output))
    rows = dict(_sql(db, "SELECT id, status FROM jobs"))
    assert rows == {**dict.fromkeys(running, "completed"), **dict.fromkeys(waiting, "delayed")}
    assert _sql(db, "PRAGMA integrity_check") == [("ok",)]


def test_wait_helper_bounds(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="timed out"):
        wait_for(lambda: False, timeout=0.05, what="never")


# -- whose rows recovery touches ----------------------------------------------------


def test_a_dead_workers_waiting_rows_follow_its_strategy_a_producers_never(
    db: str,
) -> None:
    abandon_type = jl.JobType("life.abandon", int)

    async def first_worker() -> list[str]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(abandon_type, recovery="abandon")
        async def never(ctx: jl.JobContext[int]) -> None:
            raise AssertionError("held by the pause")

        @jobs.handler(WORK, recovery="retry")
        async def work(ctx: jl.JobContext[int]) -> None:
            raise AssertionError("held by the pause")

        await jobs.start()
        await jobs.recovery_done
        jobs.pause("keep these rows waiting")
        ids = [jobs.enqueue(abandon_type, 1).id, jobs.enqueue(WORK, 2).id]
        await jobs.stop()  # a stopped worker counts as dead from then on
        return ids

    mine_abandon, mine_retry = arun(first_worker)
    producer = jl.JobManager(db)  # never started: not a worker, its rows are nobody's
    theirs = producer.enqueue(abandon_type, 3).id
    arun(producer.stop)
    assert status_counts(db) == {"pending": 3}

    async def second_worker() -> dict[str, jl.JobSnapshot]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(abandon_type, recovery="abandon")
        async def run_abandon(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        @jobs.handler(WORK, recovery="retry")
        async def run_work(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        async with jobs:
            await jobs.recovery_done
            return {i: await _terminal(jobs, i) for i in (mine_abandon, mine_retry, theirs)}

    snaps = arun(second_worker)
    assert snaps[mine_abandon].status == "cancelled", "abandon: a dead worker's row is dropped"
    assert (snaps[mine_retry].status, snaps[mine_retry].output) == ("completed", 2)
    assert (snaps[theirs].status, snaps[theirs].output) == ("completed", 3)


def test_a_worker_recovered_as_dead_registers_again(db: str) -> None:
    async def body() -> None:
        jobs = jl.JobManager(db, startup_delay=0, heartbeat_interval=0.05, poll_interval=0.02)
        async with jobs:
            await jobs.recovery_done
            registered = (jobs.worker_id,)
            assert registered in _sql(db, "SELECT id FROM workers")
            # What a rescuer does to a worker it judged dead (a stall > worker_timeout).
            _sql(db, "DELETE FROM workers WHERE id = ?", registered)
            await wait_for_async(
                lambda: registered in _sql(db, "SELECT id FROM workers"),
                timeout=5.0,
                what="the worker to register again",
            )

    arun(body)
