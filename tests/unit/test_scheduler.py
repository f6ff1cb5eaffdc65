"""SchedulerService on a FakeClock: every timer is driven by `advance_async`, never real time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobledger._fake_clock import FakeClock
from jobledger._scheduling.scheduler import SchedulerService
from jobledger._scheduling.triggers import Cron, Interval, Once
from jobledger.errors import ScheduleError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def wrapper() -> None:
        await main()

    asyncio.run(wrapper())


async def advance(clock: FakeClock, seconds: float) -> None:
    # A timer task created by a registration has not reached its first sleep yet, and
    # advance_async only sees tasks that sleep: let the loop run them first.
    await clock.advance_async(0)
    await clock.advance_async(seconds)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Recorder:
    """A callback that remembers its fire times (and the clock time it actually ran)."""

    def __init__(self, clock: FakeClock, *, busy: float = 0, fail: bool = False) -> None:
        self.clock = clock
        self.busy = busy
        self.fail = fail
        self.fires: list[datetime] = []
        self.ran_at: list[datetime] = []

    async def __call__(self, fire_time: datetime) -> None:
        self.fires.append(fire_time)
        self.ran_at.append(self.clock.now())
        if self.busy:
            await self.clock.sleep(self.busy)
        if self.fail:
            raise RuntimeError("boom")


# --- interval ---------------------------------------------------------------------------


def test_interval_fires_on_the_anchor_grid() -> None:
    async def main() -> None:
        clock = FakeClock(at(7))
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("iv", Interval(10), rec, anchor=T0)
        assert sched.get_next_run("iv") == at(10)
        await advance(clock, 38)  # now T0+45
        assert rec.fires == [at(10), at(20), at(30), at(40)]
        assert rec.ran_at == rec.fires
        assert sched.get_next_run("iv") == at(50)
        assert sched.fire_count("iv") == 4
        await sched.stop()

    run(main)


def test_interval_anchor_defaults_to_registration_and_waits_a_full_period() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("iv", Interval(30), rec)
        assert sched.get_next_run("iv") == at(30)
        await advance(clock, 29)
        assert rec.fires == []
        await advance(clock, 1)
        assert rec.fires == [at(30)]
        await sched.stop()

    run(main)


def test_interval_skips_points_elapsed_during_a_slow_callback() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock, busy=25)
        sched.register_schedule("iv", Interval(10), rec, anchor=T0)
        await advance(clock, 12)
        assert sched.get_next_run("iv") == at(20)  # predicted while the callback runs
        await advance(clock, 58)  # now T0+70
        # fire at 10 runs until 35 (20, 30 skipped); fire at 40 runs until 65 (50, 60 skipped)
        assert rec.fires == [at(10), at(40), at(70)]
        await sched.stop()

    run(main)


def test_interval_skips_points_elapsed_during_a_clock_jump() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("iv", Interval(10), rec, anchor=T0)
        clock.advance(95)  # one jump over nine grid points
        await advance(clock, 0)
        assert rec.fires == [at(10)]  # the due fire runs late, once
        assert rec.ran_at == [at(95)]
        assert sched.get_next_run("iv") == at(100)
        await advance(clock, 5)
        assert rec.fires == [at(10), at(100)]
        await sched.stop()

    run(main)


# --- once -------------------------------------------------------------------------------


def test_once_in_the_past_fires_exactly_once() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("once", Once(T0 - timedelta(hours=1)), rec)
        assert sched.get_next_run("once") == T0 - timedelta(hours=1)
        await advance(clock, 0)
        assert rec.fires == [T0 - timedelta(hours=1)]
        assert not sched.has("once")
        assert sched.get_next_run("once") is None
        await advance(clock, 3600)
        assert len(rec.fires) == 1
        await sched.stop()

    run(main)


def test_once_leaves_the_map_before_its_callback_which_may_register_again() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        seen: list[tuple[datetime, bool]] = []

        def callback(fire_time: datetime) -> None:
            seen.append((fire_time, sched.has("once")))
            if len(seen) == 1:
                sched.register_schedule("once", Once(at(120)), callback)

        sched.register_schedule("once", Once(at(60)), callback)
        await advance(clock, 60)
        assert seen == [(at(60), False)]
        assert sched.get_next_run("once") == at(120)
        await advance(clock, 60)
        assert seen == [(at(60), False), (at(120), False)]
        assert sched.ids() == []
        await sched.stop()

    run(main)


def test_once_entry_is_gone_even_when_its_callback_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock, fail=True)
        sched.register_schedule("once", Once(at(5)), rec)
        await advance(clock, 5)
        assert rec.fires == [at(5)]
        assert not sched.has("once")
        await sched.stop()

    with caplog.at_level(logging.ERROR, logger="jobledger.scheduler"):
        run(main)
    assert len(caplog.records) == 1


# --- cron -------------------------------------------------------------------------------


def test_cron_limit_three_survives_a_pause() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("c", Cron("* * * * *", limit=3), rec)
        await advance(clock, 60)
        assert rec.fires == [at(60)]
        assert sched.pause("c") is True
        await advance(clock, 300)  # five fires skipped, none counted
        assert rec.fires == [at(60)]
        assert sched.fire_count("c") == 1
        assert sched.resume("c") is True
        await advance(clock, 0)
        assert rec.fires == [at(60)]  # missed fires are not made up
        await advance(clock, 600)
        assert rec.fires == [at(60), at(420), at(480)]
        assert not sched.has("c")
        assert sched.get_next_run("c") is None
        await sched.stop()

    run(main)


def test_cron_limit_counts_fires_so_far() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("c", Cron("* * * * *", limit=3), rec, fires_so_far=2)
        assert sched.fire_count("c") == 2
        await advance(clock, 300)
        assert rec.fires == [at(60)]
        sched.register_schedule("done", Cron("* * * * *", limit=3), rec, fires_so_far=3)
        assert not sched.has("done")
        await sched.stop()

    run(main)


def test_cron_fires_with_seconds_field_and_time_zone() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("s", Cron("*/20 * * * * *"), rec)
        sched.register_schedule("b", Cron("0 1 * * *", timezone="Europe/Berlin"), rec)
        assert sched.get_next_run("b") == at(0) + timedelta(hours=24)  # 01:00 CET = 00:00Z
        await advance(clock, 60)
        assert rec.fires == [at(20), at(40), at(60)]
        await sched.stop()

    run(main)


def test_protect_skips_fires_while_the_previous_callback_runs() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        guarded = Recorder(clock, busy=150)
        free = Recorder(clock, busy=150)
        sched.register_schedule("guarded", Cron("* * * * *"), guarded)
        sched.register_schedule("free", Cron("* * * * *"), free, protect=False)
        await advance(clock, 600)
        # 60 runs to 210 (120, 180 skipped), 240 to 390, 420 to 570, then 600.
        assert guarded.fires == [at(60), at(240), at(420), at(600)]
        assert sched.fire_count("guarded") == 4
        assert free.fires == [at(60 * k) for k in range(1, 11)]
        await sched.stop()

    run(main)


def test_pause_and_resume_only_apply_to_crons() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("iv", Interval(10), rec)
        sched.register_schedule("once", Once(at(10)), rec)
        assert sched.pause("iv") is False
        assert sched.resume("once") is False
        assert sched.pause("nope") is False
        await advance(clock, 10)
        assert rec.fires == [at(10), at(10)]
        await sched.stop()

    run(main)


# --- trigger_now ------------------------------------------------------------------------


def test_trigger_now_is_an_extra_uncounted_fire() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("c", Cron("0 * * * *", limit=1), rec)
        await advance(clock, 60)
        assert await sched.trigger_now("c") is True
        assert rec.fires == [at(60)]
        assert sched.fire_count("c") == 0
        assert sched.get_next_run("c") == at(3600)
        sched.pause("c")
        assert await sched.trigger_now("c") is True  # works while paused
        assert len(rec.fires) == 2
        sched.resume("c")
        await advance(clock, 3600)
        assert rec.fires[-1] == at(3600)  # the natural fire still comes, and uses the limit
        assert not sched.has("c")
        assert await sched.trigger_now("c") is False
        assert await sched.trigger_now("unknown") is False
        await sched.stop()

    run(main)


def test_trigger_now_blocks_a_protected_natural_fire_while_it_runs() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock, busy=90)
        sched.register_schedule("c", Cron("* * * * *"), rec)
        await advance(clock, 30)
        manual = asyncio.ensure_future(sched.trigger_now("c"))
        await advance(clock, 100)  # the 60 s fire is skipped; the manual run ends at 120
        assert await manual is True
        assert rec.fires == [at(30), at(120)]
        await sched.stop()

    run(main)


# --- replacement, errors, stop ----------------------------------------------------------


def test_register_replaces_and_stops_the_old_timer() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        old, new = Recorder(clock), Recorder(clock)
        sched.register_schedule("x", Interval(10), old)
        await advance(clock, 0)
        sched.register_schedule("x", Interval(10), new, anchor=T0 + timedelta(seconds=5))
        await advance(clock, 0)
        assert clock.sleepers == 1
        await advance(clock, 25)
        assert old.fires == []
        assert new.fires == [at(5), at(15), at(25)]
        assert sched.ids() == ["x"]
        await sched.stop()

    run(main)


def test_unregister_inside_an_interval_callback_ends_the_chain() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        fires: list[datetime] = []

        async def callback(fire_time: datetime) -> None:
            fires.append(fire_time)
            if len(fires) == 2:
                assert sched.unregister("iv") is True

        sched.register_schedule("iv", Interval(10), callback)
        await advance(clock, 100)
        assert fires == [at(10), at(20)]
        assert sched.unregister("iv") is False
        await sched.stop()

    run(main)


def test_callback_errors_are_logged_and_the_schedule_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)

        def sync_fail() -> None:
            calls.append("sync")
            raise ValueError("sync boom")

        async def async_fail() -> None:
            calls.append("async")
            raise ValueError("async boom")

        sched.register_schedule("sync", Interval(10), sync_fail)
        sched.register_schedule("async", Cron("*/10 * * * * *"), async_fail)
        await advance(clock, 30)
        assert sched.has("sync")
        assert sched.has("async")
        await sched.stop()

    with caplog.at_level(logging.ERROR, logger="jobledger.scheduler"):
        run(main)
    assert sorted(calls) == ["async"] * 3 + ["sync"] * 3
    assert len(caplog.records) == 6
    assert all(r.exc_info is not None for r in caplog.records)


def test_stop_disposes_every_timer_and_is_idempotent() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("c", Cron("* * * * *"), rec)
        sched.register_schedule("iv", Interval(5), rec)
        sched.register_schedule("once", Once(at(30)), rec)
        await advance(clock, 0)
        assert clock.sleepers == 3
        await sched.stop()
        assert sched.ids() == []
        assert clock.sleepers == 0
        for id in ("c", "iv", "once"):
            assert not sched.has(id)
            assert sched.get_next_run(id) is None
        await advance(clock, 600)
        assert rec.fires == []
        await sched.stop()

    run(main)


def test_stop_leaves_a_running_callback_to_finish() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        rec = Recorder(clock, busy=30)
        done: list[datetime] = []

        async def callback(fire_time: datetime) -> None:
            await rec(fire_time)
            done.append(clock.now())

        sched.register_schedule("iv", Interval(10), callback)
        await advance(clock, 10)
        await sched.stop()
        await advance(clock, 60)
        assert done == [at(40)]
        assert rec.fires == [at(10)]

    run(main)


# --- callbacks, validation, reads -------------------------------------------------------


def test_callback_arity_is_detected_at_registration() -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        sched = SchedulerService(clock)
        got: list[object] = []

        def none() -> None:
            got.append("none")

        async def one(fire_time: datetime) -> None:
            got.append(fire_time)

        def two(a: object, b: object) -> None:
            raise AssertionError("never called")

        sched.register_schedule("a", Once(at(1)), none)
        sched.register_schedule("b", Once(at(1)), one)
        with pytest.raises(TypeError):
            sched.register_schedule("c", Once(at(1)), two)  # type: ignore[arg-type]
        assert not sched.has("c")
        await advance(clock, 1)
        assert sorted(map(str, got)) == sorted(["none", str(at(1))])
        await sched.stop()

    run(main)


def test_registration_validates_and_needs_a_running_loop() -> None:
    sched = SchedulerService(FakeClock(T0))
    with pytest.raises(ScheduleError) as err:
        sched.validate_trigger(Interval(0))
    assert err.value.code == "JOB_SCHEDULE_TRIGGER_INVALID"
    with pytest.raises(RuntimeError):
        sched.register_schedule("x", Interval(10), lambda: None)
    assert not sched.has("x")

    async def main() -> None:
        with pytest.raises(ScheduleError):
            sched.register_schedule("x", Cron("nope"), lambda: None)
        with pytest.raises(ScheduleError):
            sched.register_schedule("x", Once(datetime(2026, 1, 1)), lambda: None)
        assert sched.ids() == []

    run(main)


def test_get_next_run_for_each_kind() -> None:
    async def main() -> None:
        clock = FakeClock(at(60))
        sched = SchedulerService(clock)
        rec = Recorder(clock)
        sched.register_schedule("c", Cron("*/5 * * * *"), rec)
        sched.register_schedule("iv", Interval(45), rec, anchor=T0)
        sched.register_schedule("once", Once(at(90).astimezone(ZoneInfo("Europe/Berlin"))), rec)
        assert sched.get_next_run("c") == at(300)
        assert sched.get_next_run("iv") == at(90)
        once_next = sched.get_next_run("once")
        assert once_next == at(90)
        assert once_next is not None
        assert once_next.tzinfo is UTC
        assert sched.get_next_run("unknown") is None
        sched.pause("c")
        assert sched.get_next_run("c") == at(300)  # a paused cron still reports its calendar
        assert sorted(sched.ids()) == ["c", "iv", "once"]
        await sched.stop()

    run(main)


def test_system_clock_is_the_default() -> None:
    async def main() -> None:
        sched = SchedulerService()
        hits: list[datetime] = []
        sched.register_schedule("now", Once(datetime.now(UTC) - timedelta(seconds=1)), hits.append)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(hits) == 1
        await sched.stop()

    run(main)
