"""Schedules and pauses: the global `jobs.pause()` hold (seed 001 "Pause and drain",
reference §6.3) and the per-schedule pause, manual triggers, deletion."""

from __future__ import annotations

from datetime import timedelta

import jobledger as jl
from jobledger.testing import FakeClock
from tests.schedules import START, TICK, Tick, advance, keys_of, make_manager, run, settle, sid_key


def _timer(sid: str) -> str:
    return f"schedule:{sid}"


def _snap(jobs: jl.JobManager, sid: str) -> jl.ScheduleSnapshot:
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    return snap


def test_crons_are_paused_in_the_scheduler_so_their_quota_survives(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Cron("* * * * *", limit=2), name="a"
            )
            sched = jobs._schedules.sched
            hold = jobs.pause("restore")
            # Armed during the pause: paused at once, too.
            late = jobs.register_job_schedule(
                TICK, Tick(n=2), trigger=jl.Cron("*/2 * * * *"), name="b"
            )
            assert sched._entries[_timer(sid)].paused
            assert sched._entries[_timer(late)].paused
            await advance(clock, 600)
            assert jobs.list() == []
            assert sched.fire_count(_timer(sid)) == 0  # skipped fires are not counted
            hold.dispose()
            await settle()
            assert not sched._entries[_timer(sid)].paused
            # Missed cron fires are skipped, not made up; the calendar moved on.
            assert _snap(jobs, sid).next_run == START + timedelta(minutes=11)
            assert _snap(jobs, late).next_run == START + timedelta(minutes=12)
            assert jobs.list() == []
            await advance(clock, 600)
            assert keys_of(jobs, sid) == {
                sid_key(sid, START + timedelta(minutes=m)): 1 for m in (11, 12)
            }
            assert sum(keys_of(jobs, late).values()) == 5

    run(scenario())


def test_interval_fires_during_a_pause_are_no_ops_and_the_grid_holds(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
            hold = jobs.pause("restore")
            await advance(clock, 150)
            assert jobs.list() == []
            hold.dispose()
            await settle()
            assert _snap(jobs, sid).next_run == START + timedelta(seconds=180)
            await advance(clock, 30)
            assert keys_of(jobs, sid) == {sid_key(sid, START + timedelta(seconds=180)): 1}

    run(scenario())


def test_a_suppressed_once_fire_is_re_armed_exactly_once_on_release(db: str) -> None:
    clock = FakeClock(START)
    seen: list[int] = []

    async def scenario() -> None:
        jobs = make_manager(db, clock, seen=seen)
        async with jobs:
            await jobs.recovery_done
            at = START + timedelta(seconds=60)
            sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Once(at=at), name="a")
            # A suppressed one-shot paused per schedule during the hold stays off.
            off = jobs.register_job_schedule(TICK, Tick(n=2), trigger=jl.Once(at=at), name="b")
            # A historical, spent one-shot must not be replayed by the release.
            spent = jobs.register_job_schedule(
                TICK, Tick(n=3), trigger=jl.Once(at=START - timedelta(hours=1)), name="c"
            )
            await settle()
            assert sum(keys_of(jobs, spent).values()) == 1
            hold = jobs.pause("restore")
            await advance(clock, 120)
            assert jobs.count(type=TICK) == 1
            assert not jobs._schedules.sched.has(_timer(sid))  # the fire happened, suppressed
            assert _snap(jobs, sid).last_run is None
            assert jobs.pause_job_schedule_by_id(off) is True
            hold.dispose()
            await advance(clock, 1)
            assert keys_of(jobs, sid) == {sid_key(sid, at): 1}
            assert jobs.list(schedule_id=off) == []
            assert sum(keys_of(jobs, spent).values()) == 1
            snap = _snap(jobs, sid)
            assert (snap.last_run, snap.next_run) == (at, None)
            # Another pause/release cycle replays nothing.
            jobs.pause("again").dispose()
            await advance(clock, 3600)
            assert jobs.count(type=TICK) == 2
        assert sorted(seen) == [1, 3]

    run(scenario())


def test_a_manual_trigger_during_a_pause_enqueues_and_waits_pending(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(TICK, Tick(n=4), trigger=jl.Cron("0 * * * *"))
            await advance(clock, 90)
            hold = jobs.pause("restore")
            assert await jobs.trigger_job_schedule_now_by_id(sid) is True
            await advance(clock, 5)
            [job] = jobs.list(schedule_id=sid)
            assert (job.status, job.idempotency_key, job.payload) == (
                jl.JobStatus.PENDING,
                None,
                {"n": 4},
            )
            snap = _snap(jobs, sid)
            assert snap.last_run == START + timedelta(seconds=90)
            assert snap.next_run == START + timedelta(hours=1)
            hold.dispose()
            await advance(clock, 1)
            got = jobs.get(job.id)
            assert got is not None
            assert got.status == jl.JobStatus.COMPLETED

    run(scenario())


def test_a_manual_trigger_sets_last_run_and_leaves_next_run(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            triggers: dict[str, jl.Trigger] = {
                "interval": jl.Interval(seconds=60),
                "cron": jl.Cron("*/15 * * * *"),
                "future-once": jl.Once(at=START + timedelta(hours=2)),
            }
            sids = {
                name: jobs.register_job_schedule(TICK, Tick(n=1), trigger=t, name=name)
                for name, t in triggers.items()
            }
            disabled = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Interval(seconds=60), name="off", enabled=False
            )
            await advance(clock, 30)
            for name, sid in [*sids.items(), ("off", disabled)]:
                before = _snap(jobs, sid)
                assert await jobs.trigger_job_schedule_now_by_id(sid) is True, name
                after = _snap(jobs, sid)
                assert after.last_run == START + timedelta(seconds=30), name
                assert after.next_run == before.next_run, name
                [job] = jobs.list(schedule_id=sid)
                assert job.idempotency_key is None, name
            # The manual pre-fire did not spend the future one-shot.
            once = sids["future-once"]
            await advance(clock, 2 * 3600)
            assert keys_of(jobs, once)[sid_key(once, START + timedelta(hours=2))] == 1

    run(scenario())


def test_a_manual_fire_of_an_overdue_once_in_the_quiet_window_is_its_fire(
    db: str,
) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock, startup_delay=60)
        at = START - timedelta(minutes=5)
        sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Once(at=at))
        async with jobs:
            assert await jobs.trigger_job_schedule_now_by_id(sid) is True
            snap = _snap(jobs, sid)
            assert (snap.last_run, snap.next_run) == (START, None)
            await advance(clock, 60)
            await jobs.recovery_done
            await advance(clock, 600)
            assert [j.idempotency_key for j in jobs.list(schedule_id=sid)] == [None]
            assert not jobs._schedules.sched.has(_timer(sid))

    run(scenario())


def test_pausing_a_schedule_clears_next_run_and_resuming_re_arms_on_the_grid(
    db: str,
) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
            await advance(clock, 60)
            assert jobs.pause_job_schedule_by_id(sid) is True
            snap = _snap(jobs, sid)
            assert (snap.enabled, snap.next_run) == (False, None)
            assert snap.last_run == START + timedelta(seconds=60)
            assert not jobs._schedules.sched.has(_timer(sid))
            await advance(clock, 200)
            assert sum(keys_of(jobs, sid).values()) == 1
            assert jobs.pause_job_schedule_by_id(sid) is True  # idempotent
            assert jobs.resume_job_schedule_by_id(sid) is True
            snap = _snap(jobs, sid)
            assert (snap.enabled, snap.next_run) == (True, START + timedelta(seconds=300))
            await advance(clock, 40)
            assert keys_of(jobs, sid) == {
                sid_key(sid, START + timedelta(seconds=s)): 1 for s in (60, 300)
            }

    run(scenario())


def test_deleting_a_schedule_keeps_its_jobs_without_a_schedule_id(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
            await advance(clock, 180)
            fired = {j.id for j in jobs.list(schedule_id=sid)}
            assert len(fired) == 3
            assert jobs.unregister_job_schedule_by_id(sid) is True
            assert jobs.unregister_job_schedule_by_id(sid) is False
            assert not jobs._schedules.sched.has(_timer(sid))
            assert jobs.get_job_schedule_by_id(sid) is None
            assert jobs.list(schedule_id=sid) == []
            left = jobs.list(type=TICK)
            assert {j.id for j in left} == fired
            assert {j.schedule_id for j in left} == {None}
            await advance(clock, 600)
            assert jobs.count(type=TICK) == 3

    run(scenario())
