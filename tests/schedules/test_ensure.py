"""`ensure_job_schedule`: the idempotent upsert by `(type, name)` for schedules declared
in code (DESIGN §8.4), on both backends.

A call creates the schedule, or brings the stored one's trigger, payload, catch-up and
metadata to the call's where they differ; an unchanged trigger keeps the armed timer, its
phase and `next_run`; `enabled` changes only when given. The race of many processes is
in `test_ensure_processes.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import jobledger as jl
from jobledger._storage.records import ScheduleRow
from jobledger.testing import FakeClock
from tests.schedules import START, TICK, Tick, advance, make_manager, run, sid_key

EVERY_MINUTE = jl.Interval(seconds=60)


@pytest.fixture
def jobs(db: str) -> jl.JobManager:
    """A never-started manager (ensure works before start, like register)."""
    return make_manager(db, FakeClock(START))


def _rows(jobs: jl.JobManager) -> list[ScheduleRow]:
    return jobs._schedules.list_rows()


def _snap(jobs: jl.JobManager, sid: str) -> jl.ScheduleSnapshot:
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    return snap


def _code(fn: Callable[[], object]) -> str:
    with pytest.raises(jl.JobError) as info:
        fn()
    return info.value.code


def test_ensure_creates_then_finds_the_same_schedule(jobs: jl.JobManager) -> None:
    sid = jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name="minutely")
    snap = _snap(jobs, sid)
    assert (snap.type, snap.name, snap.trigger, snap.payload) == (
        TICK.name, "minutely", EVERY_MINUTE, {"n": 1},
    )  # fmt: skip
    assert (snap.catch_up, snap.enabled, snap.metadata) == (jl.SkipMissed(), True, {})
    before = _rows(jobs)
    assert jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name="minutely") == sid
    assert _rows(jobs) == before  # nothing rewritten, not even updated_at
    # The singleton and another name are other schedules.
    single = jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE)
    assert single != sid
    assert jobs.ensure_job_schedule(TICK.name, {"n": 1}, trigger=EVERY_MINUTE) == single
    assert len(_rows(jobs)) == 2


def test_ensure_finds_a_registered_schedule(jobs: jl.JobManager) -> None:
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name="a")
    assert jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name="a") == sid
    assert [r.id for r in _rows(jobs)] == [sid]


def test_ensure_updates_what_differs_and_keeps_the_rest(jobs: jl.JobManager) -> None:
    sid = jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, metadata={"v": 1})
    created = _snap(jobs, sid)
    clock = jobs.clock
    assert isinstance(clock, FakeClock)
    clock.advance(5)
    hourly = jl.Cron("0 * * * *", timezone="Europe/Berlin")
    again = jobs.ensure_job_schedule(
        TICK, Tick(n=2), trigger=hourly, catch_up=jl.AfterStartup(minutes=5)
    )
    assert again == sid
    snap = _snap(jobs, sid)
    assert (snap.trigger, snap.payload, snap.catch_up) == (
        hourly, {"n": 2}, jl.AfterStartup(minutes=5),
    )  # fmt: skip
    assert snap.metadata == {}  # metadata=None declares none
    assert snap.created_at == created.created_at
    assert snap.updated_at == created.updated_at + timedelta(seconds=5)


def test_enabled_is_left_alone_unless_given(jobs: jl.JobManager) -> None:
    sid = jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE)
    assert jobs.pause_job_schedule_by_id(sid)
    # A redeploy declaring the schedule again does not undo the operator's pause...
    assert jobs.ensure_job_schedule(TICK, Tick(n=2), trigger=EVERY_MINUTE) == sid
    assert (_snap(jobs, sid).enabled, _snap(jobs, sid).payload) == (False, {"n": 2})
    # ...but a declaration that says so does.
    assert jobs.ensure_job_schedule(TICK, Tick(n=2), trigger=EVERY_MINUTE, enabled=True) == sid
    assert _snap(jobs, sid).enabled is True
    assert jobs.ensure_job_schedule(TICK, Tick(n=2), trigger=EVERY_MINUTE, enabled=False) == sid
    paused = _snap(jobs, sid)
    assert (paused.enabled, paused.next_run) == (False, None)
    # Created disabled when it says so.
    off = jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name="off", enabled=False)
    assert _snap(jobs, off).enabled is False


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_bad_input_raises_its_code_and_writes_nothing(jobs: jl.JobManager, existing: bool) -> None:
    if existing:
        jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name="n")
    before = _rows(jobs)
    ok: dict[str, Any] = {"trigger": EVERY_MINUTE, "name": "n"}
    cases: list[tuple[str, Callable[[], object]]] = [
        ("JOB_UNKNOWN_TYPE", lambda: jobs.ensure_job_schedule("sched.nobody", {"n": 1}, **ok)),
        ("JOB_PAYLOAD_INVALID", lambda: jobs.ensure_job_schedule(TICK.name, {"n": "x"}, **ok)),
        (
            "JOB_SCHEDULE_NAME_INVALID",
            lambda: jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, name=" n"),
        ),
        (
            "JOB_SCHEDULE_TRIGGER_INVALID",
            lambda: jobs.ensure_job_schedule(TICK, Tick(n=1), trigger="hourly", name="n"),  # type: ignore[arg-type]
        ),
        (
            "JOB_SCHEDULE_TRIGGER_INVALID",
            lambda: jobs.ensure_job_schedule(TICK, Tick(n=1), catch_up="all", **ok),  # type: ignore[arg-type]
        ),
        (
            "JOB_INVALID_OPTION",
            lambda: jobs.ensure_job_schedule(TICK, Tick(n=1), enabled="yes", **ok),  # type: ignore[arg-type]
        ),
    ]
    for code, call in cases:
        assert _code(call) == code
    assert _rows(jobs) == before


# --- on a started manager: the timer -------------------------------------------------------


def _started(db: str, body: Callable[[jl.JobManager, FakeClock, str], Any]) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE)
            await body(jobs, clock, sid)

    run(scenario())


def test_an_unchanged_trigger_keeps_its_timer_phase_and_next_run(db: str) -> None:
    async def body(jobs: jl.JobManager, clock: FakeClock, sid: str) -> None:
        timers = jobs._schedules.sched
        await advance(clock, 45)
        entry = timers._entries[f"schedule:{sid}"]
        assert jobs.ensure_job_schedule(TICK, Tick(n=2), trigger=EVERY_MINUTE) == sid
        assert timers._entries[f"schedule:{sid}"] is entry
        assert _snap(jobs, sid).next_run == START + timedelta(seconds=60)
        await advance(clock, 15)
        [job] = jobs.list(schedule_id=sid)
        assert job.idempotency_key == sid_key(sid, START + timedelta(seconds=60))
        assert job.payload == {"n": 2}  # the new payload, on the old phase

    _started(db, body)


def test_a_changed_trigger_re_arms_the_timer(db: str) -> None:
    async def body(jobs: jl.JobManager, clock: FakeClock, sid: str) -> None:
        await advance(clock, 45)
        every_ten = jl.Interval(seconds=600)
        assert jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=every_ten) == sid
        # The interval grid is anchored at the schedule's creation (START).
        assert _snap(jobs, sid).next_run == START + timedelta(seconds=600)
        assert jobs._schedules.sched.get_next_run(f"schedule:{sid}") == START + timedelta(
            seconds=600
        )
        await advance(clock, 15)
        assert jobs.list(schedule_id=sid) == []

    _started(db, body)


def test_ensure_of_a_paused_schedule_with_enabled_re_arms_it(db: str) -> None:
    async def body(jobs: jl.JobManager, clock: FakeClock, sid: str) -> None:
        assert jobs.pause_job_schedule_by_id(sid)
        assert not jobs._schedules.sched.has(f"schedule:{sid}")
        jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE)
        assert not jobs._schedules.sched.has(f"schedule:{sid}")
        jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=EVERY_MINUTE, enabled=True)
        assert jobs._schedules.sched.has(f"schedule:{sid}")
        assert _snap(jobs, sid).next_run == START + timedelta(seconds=60)

    _started(db, body)
