"""Issue 24 beyond overlap (DESIGN §8.11): every missed fire (`AllMissed`), backfill,
jitter, the options' validation, and the 6-field cron rule on DST days through a manager.

Keys carry the fire time (DESIGN §7), so "written once" and "for the right fire" are read
off the job rows' keys; every test runs on both backends on a `FakeClock`, except the
cross-process jitter check, which only needs a second interpreter.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobledger as jl
from jobledger._scheduling.triggers import jitter_offset_ms
from jobledger.testing import FakeClock
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

ROOT = Path(__file__).resolve().parents[2]


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def _ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


def _code(fn: Any) -> str:
    with pytest.raises(jl.JobError) as info:
        fn()
    return info.value.code


class MissedRecorder(jl.JobHandler[Tick, None]):
    recovery = "retry"

    def __init__(self) -> None:
        self.missed: list[jl.MissedEvent] = []

    def execute(self, ctx: jl.JobContext[Tick]) -> None:
        return None

    def on_missed(self, event: jl.MissedEvent) -> None:
        self.missed.append(event)


# --- AllMissed ---------------------------------------------------------------------------


def test_all_missed_writes_the_newest_n_missed_fires_under_their_natural_keys(db: str) -> None:
    clock = FakeClock(START)
    handler = MissedRecorder()

    async def scenario() -> tuple[str, Any, Any]:
        first = make_manager(db, clock, handler=MissedRecorder())
        sid = first.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AllMissed(max=3)
        )
        async with first:
            await first.recovery_done
            await advance(clock, 60)
        # Down from +60 s to +690 s: the grid points +120 ... +660 (10 of them) are missed.
        await advance(clock, 630)
        second = make_manager(db, clock, handler=handler)
        async with second:
            await second.recovery_done
            await settle()
            made = keys_of(second, sid)
            await advance(clock, 30)  # the first natural fire after catch-up, +720
            after = keys_of(second, sid)
            snap = second.get_job_schedule_by_id(sid)
        return sid, (made, after), snap

    sid, (made, after), snap = run(scenario())
    # The real count, not the number written.
    assert handler.missed == [jl.MissedEvent(sid, TICK.name, missed_count=10, last_fire_at=_at(60))]
    assert made == {sid_key(sid, _at(s)): 1 for s in (60, 540, 600, 660)}
    assert after == made | {sid_key(sid, _at(720)): 1}
    assert snap is not None
    assert snap.catch_up == jl.AllMissed(max=3)


def test_all_missed_of_a_limited_cron_makes_up_only_what_its_quota_had_left(db: str) -> None:
    clock = FakeClock(START)
    handler = MissedRecorder()

    async def scenario() -> tuple[str, Any]:
        first = make_manager(db, clock)
        sid = first.register_job_schedule(
            TICK,
            Tick(n=1),
            trigger=jl.Cron("* * * * *", limit=4),
            catch_up=jl.AllMissed(max=100),
        )
        async with first:
            await first.recovery_done
            await advance(clock, 60)  # one natural fire; three left
        await advance(clock, 600)
        second = make_manager(db, clock, handler=handler)
        async with second:
            await second.recovery_done
            await settle()
            return sid, keys_of(second, sid)

    sid, made = run(scenario())
    assert made == {sid_key(sid, _at(60 * m)): 1 for m in (1, 2, 3, 4)}
    assert [e.missed_count for e in handler.missed] == [3]


# --- backfill ----------------------------------------------------------------------------


def test_a_backfill_writes_each_fire_once_and_a_second_one_nothing(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        sid = jobs.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), enabled=False
        )
        async with jobs:
            await jobs.recovery_done
            await advance(clock, 600)
            assert jobs.backfill_job_schedule(sid, _at(0), _at(300)) == 5  # +0 ... +240
            assert jobs.backfill_job_schedule(sid, _at(0), _at(300)) == 0
            await settle()
            assert {s.status for s in jobs.list(schedule_id=sid)} == {jl.JobStatus.COMPLETED}
            # Their jobs ended: still not written again; the rest of the range is.
            assert jobs.backfill_job_schedule(sid, _at(0), _at(600)) == 5
            assert jobs.backfill_job_schedule(sid, _at(0), _at(600)) == 0
            assert keys_of(jobs, sid) == {sid_key(sid, _at(60 * k)): 1 for k in range(10)}
            # Made-up jobs are due at their fire time (past): they ran at once, in order.
            snaps = sorted(jobs.list(schedule_id=sid), key=lambda s: s.scheduled_at)
            assert [s.scheduled_at for s in snaps] == [_at(60 * k) for k in range(10)]

    run(scenario())


def test_a_backfill_never_writes_a_fire_the_calendar_wrote_or_will_write(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
        async with jobs:
            await jobs.recovery_done
            await advance(clock, 190)  # natural fires at +60, +120, +180; next_run +240
            assert jobs.backfill_job_schedule(sid, _at(-120), _at(190)) == 3  # -120, -60, 0
            await advance(clock, 60)
            assert keys_of(jobs, sid) == {
                sid_key(sid, _at(s)): 1 for s in (-120, -60, 0, 60, 120, 180, 240)
            }

    run(scenario())


def test_a_backfill_ending_in_the_current_millisecond_is_not_the_future(db: str) -> None:
    """An end read from the clock a moment before the call (here 0.6 ms into the
    current millisecond, which rounds to the next) is now, not the future; an end one
    millisecond on is refused."""
    clock = FakeClock(START + timedelta(minutes=10))
    jobs = make_manager(db, clock)
    sid = jobs.register_job_schedule(
        TICK, Tick(n=1), trigger=jl.Interval(seconds=60), enabled=False
    )
    now = clock.now()
    start = now - timedelta(minutes=5)
    # -5 ... 0 minutes: the fire at now is inside [start, end).
    assert jobs.backfill_job_schedule(sid, start, now + timedelta(microseconds=600)) == 6
    late = now + timedelta(milliseconds=1)
    assert _code(lambda: jobs.backfill_job_schedule(sid, start, late)) == "JOB_INVALID_OPTION"


def test_bad_backfills_raise_and_write_nothing(db: str) -> None:
    clock = FakeClock(START + timedelta(days=2))
    jobs = make_manager(db, clock)
    every = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
    once = jobs.register_job_schedule(
        TICK, Tick(n=1), trigger=jl.Once(at=START), name="once", enabled=False
    )
    now = clock.now()
    invalid = [
        lambda: jobs.backfill_job_schedule(every, now, now - timedelta(minutes=1)),
        lambda: jobs.backfill_job_schedule(every, now, now),
        lambda: jobs.backfill_job_schedule(every, now - timedelta(minutes=5), now + timedelta(1)),
        lambda: jobs.backfill_job_schedule(every, datetime(2026, 1, 1), now),  # naive
        lambda: jobs.backfill_job_schedule(every, "yesterday", now),  # type: ignore[arg-type]
        # 1441 fires: over the cap of one call.
        lambda: jobs.backfill_job_schedule(every, now - timedelta(hours=24, minutes=1), now),
        lambda: jobs.backfill_job_schedule(once, START - timedelta(1), now),
    ]
    for call in invalid:
        assert _code(call) == "JOB_INVALID_OPTION"
    for missing in ("no-such-id", ""):
        assert (
            _code(lambda m=missing: jobs.backfill_job_schedule(m, START, now))
            == "JOB_SCHEDULE_NOT_FOUND"
        )
    assert jobs.count() == 0
    # The cap is exactly 1000 fires.
    assert jobs.backfill_job_schedule(every, now - timedelta(minutes=1000), now) == 1000
    run(jobs.stop())


# --- jitter ------------------------------------------------------------------------------


def test_jitter_delays_each_fire_by_the_same_offset_in_every_manager(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> tuple[str, list[jl.JobSnapshot]]:
        a, b = make_manager(db, clock), make_manager(db, clock)
        sid = a.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60), jitter=45.0)
        async with a, b:
            await a.recovery_done
            await b.recovery_done
            for m in (a, b):  # both arm, as in a leadership race
                m._schedules.on_leadership(True)
            await advance(clock, 60)
            for _ in range(9):
                await advance(clock, 60)
            return sid, a.list(schedule_id=sid, limit=1000)

    sid, snaps = run(scenario())
    assert len(snaps) == 10
    assert keys_of_list(snaps) == {sid_key(sid, _at(60 * k)): 1 for k in range(1, 11)}
    offsets = []
    for s in snaps:
        fire_ms = int(str(s.idempotency_key).rpartition(":")[2])
        offset = _ms(s.scheduled_at) - fire_ms
        assert 0 <= offset < 45_000
        assert offset == jitter_offset_ms(sid, fire_ms, 45_000)
        offsets.append(offset)
    assert len(set(offsets)) > 1  # not one constant delay


def keys_of_list(snaps: list[jl.JobSnapshot]) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for s in snaps:
        out[s.idempotency_key] = out.get(s.idempotency_key, 0) + 1
    return out


def test_the_jitter_offset_is_the_same_in_another_process() -> None:
    points = [(f"sid-{i}", 1_767_225_600_000 + 60_000 * i) for i in range(20)]
    code = (
        "from jobledger._scheduling.triggers import jitter_offset_ms\n"
        f"for sid, at in {points!r}:\n"
        "    print(jitter_offset_ms(sid, at, 30_000))\n"
    )
    # A fresh interpreter with another hash seed: the offset is no `hash()`.
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
        timeout=60,
    ).stdout.split()
    assert [int(x) for x in out] == [jitter_offset_ms(s, at, 30_000) for s, at in points]
    assert all(0 <= int(x) < 30_000 for x in out)
    assert jitter_offset_ms("s", 1, 0) == 0
    assert jitter_offset_ms("s", 1, 1) == 0


# --- options -----------------------------------------------------------------------------


def test_overlap_and_jitter_are_stored_updated_and_ensured(db: str) -> None:
    jobs = make_manager(db, FakeClock(START))
    sid = jobs.register_job_schedule(
        TICK, Tick(n=1), trigger=jl.Interval(seconds=60), overlap="skip", jitter=1.5
    )
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    assert (snap.overlap, snap.jitter, snap.skipped_fires) == ("skip", 1.5, 0)
    snap = jobs.update_job_schedule(sid, overlap="buffer_one", jitter=None)
    assert snap is not None
    assert (snap.overlap, snap.jitter) == ("buffer_one", 0.0)
    # A declaration is the truth: what it leaves out goes back to the default.
    assert jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60)) == sid
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    assert (snap.overlap, snap.jitter) == ("allow", 0.0)
    assert (
        jobs.ensure_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), overlap="skip", jitter=2
        )
        == sid
    )
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    assert (snap.overlap, snap.jitter) == ("skip", 2.0)
    run(jobs.stop())


@pytest.mark.parametrize(
    "options",
    [
        {"overlap": "never"},
        {"overlap": None},
        {"overlap": "SKIP"},
        {"jitter": -1},
        {"jitter": float("nan")},
        {"jitter": float("inf")},
        {"jitter": True},
        {"jitter": "5"},
        {"jitter": 367 * 86_400},
    ],
)
def test_bad_overlap_and_jitter_are_refused_and_nothing_is_written(
    db: str, options: dict[str, Any]
) -> None:
    jobs = make_manager(db, FakeClock(START))
    every = jl.Interval(seconds=60)
    assert _code(lambda: jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, **options)) == (
        "JOB_INVALID_OPTION"
    )
    assert _code(lambda: jobs.ensure_job_schedule(TICK, Tick(n=1), trigger=every, **options)) == (
        "JOB_INVALID_OPTION"
    )
    assert jobs.list_job_schedules() == []
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every)
    before = jobs.get_job_schedule_by_id(sid)
    assert _code(lambda: jobs.update_job_schedule(sid, **options)) == "JOB_INVALID_OPTION"
    assert jobs.get_job_schedule_by_id(sid) == before
    run(jobs.stop())


@pytest.mark.parametrize("most", [0, -1, 1001, 2.5, True, None])
def test_a_bad_all_missed_max_is_a_bad_catch_up(db: str, most: Any) -> None:
    jobs = make_manager(db, FakeClock(START))
    assert (
        _code(
            lambda: jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AllMissed(max=most)
            )
        )
        == "JOB_SCHEDULE_TRIGGER_INVALID"
    )
    assert jobs.list_job_schedules() == []
    run(jobs.stop())


# --- the 6-field rule on DST days ----------------------------------------------------------

# (zone, start of the walk, expressions, the fire expected on the day of the gap)
GAP_DAYS = {
    # 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist; the jump is 01:00Z.
    "berlin": (
        "Europe/Berlin",
        datetime(2026, 3, 28, 12, tzinfo=UTC),
        ("30 2 * * *", "0 30 2 * * *"),
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ),
    # 2026-10-04 02:00 LHST (+10:30) -> 02:30 LHDT (+11): 02:15 does not exist; the jump
    # is 15:30Z the day before.
    "lord-howe": (
        "Australia/Lord_Howe",
        datetime(2026, 10, 3, 3, tzinfo=UTC),
        ("15 2 * * *", "0 15 2 * * *"),
        datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
        datetime(2026, 10, 4, 15, 15, tzinfo=UTC),
    ),
}


@pytest.mark.parametrize("day", sorted(GAP_DAYS))
def test_five_and_six_field_crons_both_run_a_missing_time_at_the_jump(db: str, day: str) -> None:
    zone, begin, exprs, jump, next_day = GAP_DAYS[day]
    clock = FakeClock(begin)

    async def scenario() -> dict[str, Any]:
        jobs = make_manager(db, clock, poll_interval=10.0)
        sids = {
            expr: jobs.register_job_schedule(
                TICK, Tick(n=0), trigger=jl.Cron(expr, timezone=zone), name=expr
            )
            for expr in exprs
        }
        async with jobs:
            await jobs.recovery_done
            await advance(clock, (next_day - begin).total_seconds() + 1)
            await settle()
            return {expr: (sid, keys_of(jobs, sid)) for expr, sid in sids.items()}

    for expr, (sid, keys) in run(scenario()).items():
        assert keys == {sid_key(sid, jump): 1, sid_key(sid, next_day): 1}, expr
