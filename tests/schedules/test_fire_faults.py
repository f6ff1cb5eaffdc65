"""A natural fire whose write fails is written again, not lost; schedules whose rows
cannot be read when the worker starts are armed once they can be.

The faults are real. For a fire, another connection holds the lock the fire's write
needs (SQLite: `BEGIN IMMEDIATE` on a second connection; PostgreSQL: `LOCK TABLE
job_schedules IN EXCLUSIVE MODE`, which lets the fire read its row but not update it),
past the manager's busy timeout, so the write raises `DatabaseBusy`. For arming, another
connection renames the schedule table away until the recovery flow has run. Time is a
`FakeClock`; only the lock wait is real (the busy timeout, 0.1 s).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timedelta

import pytest

import jobledger as jl
from jobledger.clock import to_ms
from jobledger.testing import FakeClock
from tests.conftest import db_rows, is_postgres
from tests.schedules import (
    START,
    TICK,
    Tick,
    advance,
    keys_of,
    make_manager,
    run,
    settle,
    sid_key,
)


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def _away(db: str) -> bool:
    """Whether the schedule table is still renamed away."""
    if is_postgres(db):
        sql = (
            "SELECT 1 FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name = 'job_schedules_away'"
        )
    else:
        sql = "SELECT 1 FROM sqlite_master WHERE name = 'job_schedules_away'"
    return bool(db_rows(db, sql))


@contextmanager
def _writes_blocked(db: str) -> Iterator[None]:
    """Hold what a schedule's fire must write through, from a connection of our own."""
    if is_postgres(db):
        import psycopg

        from jobledger._storage.open import split_schema

        with psycopg.connect(split_schema(db)[0], autocommit=True) as conn, conn.transaction():
            conn.execute("LOCK TABLE job_schedules IN EXCLUSIVE MODE")
            yield
        return
    with closing(sqlite3.connect(db, timeout=5.0, isolation_level=None)) as lite:
        lite.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            lite.execute("ROLLBACK")


# Both fire at 60 s and 120 s. A cron's next fire is skipped while a callback of the
# schedule still runs (`protect`); an interval's waits for the callback to end.
TRIGGERS = [jl.Interval(seconds=60), jl.Cron("* * * * *")]


def _fire_under(
    db: str,
    trigger: jl.Trigger,
    *,
    released_after: float,
    catch_up: jl.CatchUpPolicy | None = None,
) -> tuple[dict[str, int], jl.ScheduleSnapshot]:
    """The fire at 60 s meets the held lock, which is released `released_after` fake
    seconds later; then time runs to 130 s (past the second fire)."""
    clock = FakeClock(START)

    async def body() -> tuple[dict[str, int], jl.ScheduleSnapshot]:
        jobs = make_manager(db, clock, busy_timeout=0.1)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=trigger, catch_up=catch_up)
            with _writes_blocked(db):
                await advance(clock, 60)  # the fire fails
                assert keys_of(jobs, sid) == {}
                await advance(clock, released_after - 0.05)
            await advance(clock, 130 - 60 - released_after + 0.05)
            snap = jobs.get_job_schedule_by_id(sid)
            assert snap is not None
            return {str(k): n for k, n in keys_of(jobs, sid).items()}, snap

    return run(body())


@pytest.mark.parametrize("trigger", TRIGGERS, ids=["interval", "cron"])
def test_a_fire_that_met_a_held_lock_is_written_once_the_lock_is_gone(
    db: str, trigger: jl.Trigger
) -> None:
    fired, snap = _fire_under(db, trigger, released_after=3.0)
    assert fired == {sid_key(snap.id, _at(60)): 1, sid_key(snap.id, _at(120)): 1}
    assert snap.next_run == _at(180)
    assert snap.last_run == _at(120)


@pytest.mark.parametrize("trigger", TRIGGERS, ids=["interval", "cron"])
@pytest.mark.parametrize(
    ("catch_up", "made_up"), [(None, False), (jl.AllMissed(), True)], ids=["skip", "all-missed"]
)
def test_a_fire_still_unwritten_when_the_next_is_due_is_given_up(
    db: str, trigger: jl.Trigger, catch_up: jl.CatchUpPolicy | None, made_up: bool
) -> None:
    """Held for 59.5 s: the retries stop before the next fire (at 120 s), which writes
    its own job and moves the calendar on (a cron's is not skipped as overlapping a
    callback still retrying). The first fire alone is lost; under `AllMissed` the fire
    at 120 s finds `next_run` still at 60 s, a point nobody wrote, and writes it too,
    under its natural key."""
    fired, snap = _fire_under(db, trigger, released_after=59.5, catch_up=catch_up)
    expected = {sid_key(snap.id, _at(120)): 1}
    if made_up:
        expected[sid_key(snap.id, _at(60))] = 1
    assert fired == expected
    assert snap.next_run == _at(180)
    assert snap.last_run == _at(120)


@pytest.mark.parametrize("trigger", TRIGGERS, ids=["interval", "cron"])
def test_under_all_missed_the_points_a_late_fire_passed_are_written_by_the_next(
    db: str, trigger: jl.Trigger
) -> None:
    """The fire at 60 s runs only at 125 s (a loop held up by a write that waited; here
    fake time jumps over 120 s at once), so the timer's next callback is at 180 s. The
    row names 120 s as its `next_run`, not 180 s, and the fire at 180 s writes it."""
    clock = FakeClock(START)

    async def body() -> tuple[dict[str, int], datetime | None, dict[str, int], str]:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=trigger, catch_up=jl.AllMissed()
            )
            await settle()
            clock.advance(125)  # every sleeper due by then wakes at 125 s
            await settle()
            late = {str(k): n for k, n in keys_of(jobs, sid).items()}
            snap = jobs.get_job_schedule_by_id(sid)
            assert snap is not None
            await advance(clock, 60)
            return late, snap.next_run, {str(k): n for k, n in keys_of(jobs, sid).items()}, sid

    late, next_run, fired, sid = run(body())
    assert late == {sid_key(sid, _at(60)): 1}
    assert next_run == _at(120)
    assert fired == {sid_key(sid, _at(t)): 1 for t in (60, 120, 180)}


def test_a_limited_cron_makes_up_nothing(db: str) -> None:
    """The timer counts a callback toward a cron's limit whether or not its write went
    through: with a limit of 2 the fire at 120 s is the last, and a make-up of 60 s
    beside it would put the schedule at 2 jobs with 1 natural fire counted, one more to
    come after a restart. So a limited cron's given-up fire stays lost."""
    trigger = jl.Cron("* * * * *", limit=2)
    fired, snap = _fire_under(db, trigger, released_after=59.5, catch_up=jl.AllMissed())
    assert fired == {sid_key(snap.id, _at(120)): 1}


def test_schedules_unreadable_when_the_worker_starts_are_armed_once_readable(db: str) -> None:
    """The schedule table is away (renamed by another connection) when the recovery flow
    catches up and arms: the step fails, dispatch goes on, and arming is tried again in
    the background, so the schedule fires once the table is back."""
    clock = FakeClock(START)

    async def body() -> tuple[dict[str, int], str]:
        jobs = make_manager(db, clock)
        sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
        db_rows(db, "ALTER TABLE job_schedules RENAME TO job_schedules_away")
        try:
            async with jobs:
                await jobs.recovery_done
                assert not jobs._schedules.sched.has(f"schedule:{sid}")
                db_rows(db, "ALTER TABLE job_schedules_away RENAME TO job_schedules")
                await advance(clock, 61)
                return {str(k): n for k, n in keys_of(jobs, sid).items()}, sid
        finally:
            if _away(db):  # the test failed before putting it back
                db_rows(db, "ALTER TABLE job_schedules_away RENAME TO job_schedules")

    fired, sid = run(body())
    assert fired == {sid_key(sid, _at(60)): 1}


def test_a_catch_up_that_loses_to_a_moved_next_run_catches_up_from_there(db: str) -> None:
    """The race `bench/chaos.py` found: a new leader read the row (`next_run` 60 s,
    overdue) while the old leader's late fire moved it to 120 s, still overdue. The
    catch-up's compare-and-set (from 60 s) lost, and arming then stored the timer's next
    fire over 120 s: the points from 120 s on were never written. Now the catch-up reads
    the row again and catches up from 120 s."""
    clock = FakeClock(START)

    async def body() -> tuple[dict[str, int], datetime | None, str]:
        jobs = make_manager(db, clock)  # never started: no timer fires here
        sid = jobs.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AllMissed()
        )
        store, schedules = jobs._store, jobs._schedules
        store.set_schedule_next_run(sid, to_ms(_at(60)), to_ms(START))
        stale = schedules.get_row(sid)
        assert stale is not None
        store.set_schedule_next_run(sid, to_ms(_at(120)), to_ms(START))  # the old leader
        clock.advance(250)
        try:
            await schedules._catch_up(stale)
            snap = jobs.get_job_schedule_by_id(sid)
            assert snap is not None
            return {str(k): n for k, n in keys_of(jobs, sid).items()}, snap.next_run, sid
        finally:
            await jobs.stop()

    fired, next_run, sid = run(body())
    assert fired == {sid_key(sid, _at(t)): 1 for t in (120, 180, 240)}
    assert next_run == _at(300)


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgres"], indirect=True)  # a lock on `jobs` alone
def test_a_catch_up_whose_write_failed_is_retried_before_anything_is_armed(db: str) -> None:
    """The catch-up's jobs cannot be written (their table locked: PostgreSQL's `LOCK
    TABLE jobs IN EXCLUSIVE MODE`, which leaves `job_schedules` writable) while arming
    could store the timer's next fire. Before, the failure was logged, the schedule
    armed over its overdue `next_run`, and the missed fires were lost; now the whole
    step is tried again and writes them once the lock is gone."""
    import psycopg

    from jobledger._storage.open import split_schema

    clock = FakeClock(START)

    async def body() -> tuple[dict[str, int], str]:
        setup = make_manager(db, clock)
        sid = setup.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AllMissed()
        )
        setup._store.set_schedule_next_run(sid, to_ms(_at(60)), to_ms(START))
        await setup.stop()
        clock.advance(150)  # 60 s and 120 s missed while no worker ran
        jobs = make_manager(db, clock, busy_timeout=0.1)
        with psycopg.connect(split_schema(db)[0], autocommit=True) as conn:
            with conn.transaction():
                conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
                await jobs.start()
                await settle()
                await jobs.recovery_done  # its catch-up failed: retried in the background
                assert keys_of(jobs, sid) == {}
            await advance(clock, 0.5)  # the lock is gone: the retry writes them
        try:
            return {str(k): n for k, n in keys_of(jobs, sid).items()}, sid
        finally:
            await jobs.stop()

    fired, sid = run(body())
    assert fired == {sid_key(sid, _at(60)): 1, sid_key(sid, _at(120)): 1}


class _SlowMissed(jl.JobHandler[Tick, None]):
    """`on_missed` that takes 40 s of fake time, as a slow hook (or a slow database, or
    a loop held up) would between a catch-up and the arming after it."""

    recovery = "retry"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    async def execute(self, ctx: jl.JobContext[Tick]) -> None:
        return None

    async def on_missed(self, event: jl.MissedEvent) -> None:
        self.clock.advance(40)


def test_a_point_gone_by_between_a_catch_up_and_arming_is_written_by_the_first_fire(
    db: str,
) -> None:
    """Down over 60 s and 120 s, the worker starts at 150 s: the catch-up writes both and
    leaves `next_run` at 180 s; its `on_missed` takes until 190 s. Arming then stored
    the timer's first fire (240 s) over 180 s, which nobody wrote. Now arming keeps an
    overdue point of the calendar under `AllMissed`, and the fire at 240 s writes it."""
    clock = FakeClock(START)

    async def body() -> tuple[dict[str, int], datetime | None, str]:
        setup = make_manager(db, clock)
        sid = setup.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AllMissed()
        )
        setup._store.set_schedule_next_run(sid, to_ms(_at(60)), to_ms(START))
        await setup.stop()
        clock.advance(150)
        jobs = make_manager(db, clock, handler=_SlowMissed(clock))
        async with jobs:
            await jobs.recovery_done
            await settle()
            snap = jobs.get_job_schedule_by_id(sid)
            assert snap is not None
            await advance(clock, 55)  # to 245 s
            return {str(k): n for k, n in keys_of(jobs, sid).items()}, snap.next_run, sid

    fired, armed_next, sid = run(body())
    assert armed_next == _at(180)
    assert fired == {sid_key(sid, _at(t)): 1 for t in (60, 120, 180, 240)}
