"""When schedules fire: DST, the interval grid, one-shots, limits and catch-up.

Each test drives real managers on one SQLite file with a shared `FakeClock`, and checks
the job rows a schedule leaves: their idempotency keys carry the fire time in epoch ms
(DESIGN §7), so "fired at the right instant" and "fired once" are both read off keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobledger as jl
from jobledger.testing import FakeClock
from tests.schedules import (
    START,
    TICK,
    Tick,
    advance,
    catchup_key,
    keys_of,
    make_manager,
    run,
    settle,
    sid_key,
)


def _ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


# --- DST -------------------------------------------------------------------------------

BERLIN = "Europe/Berlin"


def _z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# Expected fires as UTC instants, worked out by hand from the 2026 EU rules: summer time
# starts 2026-03-29 at 01:00Z (02:00 CET -> 03:00 CEST) and ends 2026-10-25 at 01:00Z
# (03:00 CEST -> 02:00 CET).
DST_CASES = {
    "spring": (
        "2026-03-28T00:00:00",
        "2026-03-29T12:00:00",
        {
            # 02:30 does not exist on the 29th: the first valid minute after the gap.
            "nightly": ["2026-03-28T01:30:00", "2026-03-29T01:00:00"],
            # 09:00 local moves from 08:00Z to 07:00Z.
            "morning": ["2026-03-28T08:00:00", "2026-03-29T07:00:00"],
            # Elapsed-time crons never fire in the missing hour.
            "hourly": [f"2026-03-29T0{h}:00:00" for h in range(4)],
        },
    ),
    "autumn": (
        "2026-10-24T00:00:00",
        "2026-10-25T12:00:00",
        {
            # 02:30 happens twice on the 25th: fired once, at the first (CEST) one.
            "nightly": ["2026-10-24T00:30:00", "2026-10-25T00:30:00"],
            # 09:00 local moves from 07:00Z to 08:00Z.
            "morning": ["2026-10-24T07:00:00", "2026-10-25T08:00:00"],
            # Elapsed-time crons fire in both copies of the repeated hour (02:00 CEST
            # and 02:00 CET).
            "hourly": [f"2026-10-25T0{h}:00:00" for h in range(4)],
        },
    ),
}
DST_EXPRS = {"nightly": "30 2 * * *", "morning": "0 9 * * *", "hourly": "0 * * * *"}


@pytest.mark.parametrize("season", sorted(DST_CASES))
def test_berlin_crons_fire_at_the_right_instants_across_dst(db: str, season: str) -> None:
    begin, end, expected = DST_CASES[season]
    clock = FakeClock(_z(begin))
    fired: dict[str, list[tuple[str, int]]] = {}
    sids: dict[str, str] = {}

    async def scenario() -> None:
        # A day and a half of fake time, stepped deadline by deadline: slower chores.
        jobs = make_manager(db, clock, poll_interval=10.0)
        for name, expr in DST_EXPRS.items():
            sids[name] = jobs.register_job_schedule(
                TICK, Tick(n=0), trigger=jl.Cron(expr, timezone=BERLIN), name=name
            )
        async with jobs:
            await jobs.recovery_done
            await advance(clock, (_z(end) - _z(begin)).total_seconds())
            await settle()
            for name, sid in sids.items():
                snaps = sorted(jobs.list(schedule_id=sid), key=lambda s: s.created_at)
                fired[name] = [(str(s.idempotency_key), _ms(s.created_at)) for s in snaps]

    run(scenario())
    for name, instants in expected.items():
        want = [(sid_key(sids[name], _z(t)), _ms(_z(t))) for t in instants]
        got = fired[name]
        if name == "hourly":  # only the hours around the change are of interest
            got = [f for f in got if want[0][1] <= f[1] <= want[-1][1]]
        # The key names the fire instant, and the row was written at that instant.
        assert got == want, name


def test_six_field_cron_has_seconds_first(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> list[str | None]:
        jobs = make_manager(db, clock)
        sid = jobs.register_job_schedule(TICK, Tick(n=0), trigger=jl.Cron("15 * * * * *"))
        async with jobs:
            await jobs.recovery_done
            await advance(clock, 150)
            return [*sorted(keys_of(jobs, sid), key=str), sid]

    *keys, sid = run(scenario())
    assert sid is not None
    assert keys == sorted(sid_key(sid, START + timedelta(minutes=m, seconds=15)) for m in range(3))


# --- the interval grid -------------------------------------------------------------------


def test_interval_fires_on_the_creation_grid_and_keeps_it_across_a_restart(
    db: str,
) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        first = make_manager(db, clock)
        async with first:
            await first.recovery_done
            # Created off the minute, so a grid anchored anywhere else would show.
            await advance(clock, 7.25)
            sid = first.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
            snap = first.get_job_schedule_by_id(sid)
            assert snap is not None
            anchor = snap.created_at
            assert anchor == START + timedelta(seconds=7.25)
            assert snap.next_run == anchor + timedelta(seconds=60)

            await advance(clock, 59.999)
            assert sum(keys_of(first, sid).values()) == 0
            await advance(clock, 0.001)
            await advance(clock, 60)
            assert keys_of(first, sid) == {
                sid_key(sid, anchor + timedelta(seconds=60)): 1,
                sid_key(sid, anchor + timedelta(seconds=120)): 1,
            }
            snap = first.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.last_run == anchor + timedelta(seconds=120)
            assert snap.next_run == anchor + timedelta(seconds=180)

        # Down for 2.5 periods: the points at +180 and +240 are missed.
        await advance(clock, 150)
        second = make_manager(db, clock)
        async with second:
            await second.recovery_done
            await settle()
            snap = second.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.next_run == anchor + timedelta(seconds=300)
            assert sum(keys_of(second, sid).values()) == 2  # SkipMissed: no make-up job
            await advance(clock, 30)
            assert keys_of(second, sid) == {
                sid_key(sid, anchor + timedelta(seconds=s)): 1 for s in (60, 120, 300)
            }
            for job in second.list(schedule_id=sid):
                assert job.idempotency_key == sid_key(sid, job.created_at)
                assert job.status == jl.JobStatus.COMPLETED

    run(scenario())


# --- one-shots --------------------------------------------------------------------------


def test_a_past_once_fires_exactly_once_and_not_again_after_a_restart(db: str) -> None:
    clock = FakeClock(START)
    at = START - timedelta(hours=1)
    seen: list[int] = []

    async def scenario() -> str:
        first = make_manager(db, clock, seen=seen)
        sid = first.register_job_schedule(TICK, Tick(n=7), trigger=jl.Once(at=at))
        async with first:
            await first.recovery_done
            await settle()
            await advance(clock, 3600)
            assert keys_of(first, sid) == {sid_key(sid, at): 1}
            snap = first.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.last_run == at  # clamped to the trigger's instant
            assert snap.next_run is None
            assert snap.enabled  # a spent one-shot stays enabled; spent is last_run >= at
            assert not first._schedules.sched.has(f"schedule:{sid}")
        await advance(clock, 60)
        second = make_manager(db, clock, seen=seen)
        async with second:
            await second.recovery_done
            await advance(clock, 3600)
            assert keys_of(second, sid) == {sid_key(sid, at): 1}
            assert not second._schedules.sched.has(f"schedule:{sid}")
        return sid

    run(scenario())
    assert seen == [7]


def test_a_future_once_missed_while_down_fires_at_the_next_start(db: str) -> None:
    clock = FakeClock(START)
    at = START + timedelta(minutes=10)

    async def scenario() -> None:
        first = make_manager(db, clock)
        async with first:
            await first.recovery_done
            sid = first.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Once(at=at), catch_up=jl.AfterStartup(0)
            )
            snap = first.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.next_run == at
        await advance(clock, 3600)
        second = make_manager(db, clock)
        async with second:
            await second.recovery_done
            await settle()
            # Not a catch-up (no ":catchup:" key, no on_missed): the one-shot simply
            # had not fired yet, so arming it fires it now, once.
            assert keys_of(second, sid) == {sid_key(sid, at): 1}
            await advance(clock, 3600)
            assert keys_of(second, sid) == {sid_key(sid, at): 1}

    run(scenario())


# --- limits -----------------------------------------------------------------------------


def test_cron_limit_holds_across_a_pause_and_a_restart(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        first = make_manager(db, clock)
        sid = first.register_job_schedule(TICK, Tick(n=1), trigger=jl.Cron("* * * * *", limit=3))
        async with first:
            await first.recovery_done
            await advance(clock, 60)
            assert sum(keys_of(first, sid).values()) == 1
            hold = first.pause("limit test")
            await advance(clock, 300)
            assert sum(keys_of(first, sid).values()) == 1  # five fire points, none taken
            hold.dispose()
            await settle()
            snap = first.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.next_run == START + timedelta(minutes=7)
            await advance(clock, 60)
            assert sum(keys_of(first, sid).values()) == 2
        second = make_manager(db, clock)
        async with second:
            await second.recovery_done
            await advance(clock, 3600)
            keys = keys_of(second, sid)
            assert keys == {sid_key(sid, START + timedelta(minutes=m)): 1 for m in (1, 7, 8)}
            snap = second.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.next_run is None
            assert not second._schedules.sched.has(f"schedule:{sid}")
        # A third manager does not re-arm an exhausted cron either.
        third = make_manager(db, clock)
        async with third:
            await third.recovery_done
            await advance(clock, 600)
            assert sum(keys_of(third, sid).values()) == 3

    run(scenario())


# --- catch-up ----------------------------------------------------------------------------


class MissedRecorder(jl.JobHandler[Tick, None]):
    recovery = "retry"

    def __init__(self) -> None:
        self.missed: list[jl.MissedEvent] = []

    async def execute(self, ctx: jl.JobContext[Tick]) -> None:
        return None

    async def on_missed(self, event: jl.MissedEvent) -> None:
        self.missed.append(event)


@pytest.mark.parametrize(
    ("policy", "makeups"),
    [(jl.AfterStartup(0), 1), (jl.SkipMissed(), 0)],
    ids=["after-startup", "skip-missed"],
)
def test_catch_up_reports_the_real_missed_count(
    db: str, policy: jl.CatchUpPolicy, makeups: int
) -> None:
    clock = FakeClock(START)
    handler = MissedRecorder()

    async def scenario() -> tuple[str, list[Any]]:
        first = make_manager(db, clock, handler=MissedRecorder())
        sid = first.register_job_schedule(
            TICK, Tick(n=3), trigger=jl.Interval(seconds=60), catch_up=policy
        )
        async with first:
            await first.recovery_done
            await advance(clock, 60)
            assert sum(keys_of(first, sid).values()) == 1
        # Down from +60 s to +690 s: the grid points +120 ... +660 (10 of them) are missed.
        await advance(clock, 630)
        second = make_manager(db, clock, handler=handler)
        async with second:
            await second.recovery_done
            await settle()
            rows = second.list(schedule_id=sid)
            await advance(clock, 30)
            after = keys_of(second, sid)
        return sid, [rows, after]

    sid, (rows, after) = run(scenario())
    assert handler.missed == [
        jl.MissedEvent(
            schedule_id=sid,
            type=TICK.name,
            missed_count=10,
            last_fire_at=START + timedelta(seconds=60),
        )
    ]
    makeup_key = catchup_key(sid, START + timedelta(seconds=120))
    assert sorted(str(r.idempotency_key) for r in rows) == sorted(
        [sid_key(sid, START + timedelta(seconds=60))] + [makeup_key] * makeups
    )
    for r in rows:
        if r.idempotency_key == makeup_key:
            assert r.payload == {"n": 3}
            assert r.schedule_id == sid
    # Natural fires resume on the grid right after catch-up.
    assert after[sid_key(sid, START + timedelta(seconds=720))] == 1
    assert sum(after.values()) == 2 + makeups


def test_after_startup_minutes_delays_the_make_up_job(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> Sequence[jl.JobSnapshot]:
        first = make_manager(db, clock)
        sid = first.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Cron("0 * * * *"), catch_up=jl.AfterStartup(minutes=5)
        )
        async with first:
            await first.recovery_done
        await advance(clock, 3 * 3600 + 60)
        second = make_manager(db, clock)
        async with second:
            await second.recovery_done
            await settle()
            rows = second.list(schedule_id=sid)
            assert [r.status for r in rows] == [jl.JobStatus.DELAYED]
            assert rows[0].scheduled_at == clock.now() + timedelta(minutes=5)
            assert rows[0].idempotency_key == catchup_key(sid, START + timedelta(hours=1))
            await advance(clock, 300)
            return second.list(schedule_id=sid)

    rows = run(scenario())
    assert [r.status for r in rows] == [jl.JobStatus.COMPLETED]


def test_catch_up_of_a_limited_cron_counts_only_the_fires_it_had_left(db: str) -> None:
    clock = FakeClock(START)
    handler = MissedRecorder()

    async def scenario() -> str:
        first = make_manager(db, clock, handler=MissedRecorder())
        sid = first.register_job_schedule(TICK, Tick(n=1), trigger=jl.Cron("* * * * *", limit=3))
        async with first:
            await first.recovery_done
            await advance(clock, 60)
        await advance(clock, 3600)
        second = make_manager(db, clock, handler=handler)
        async with second:
            await second.recovery_done
            await settle()
        return sid

    sid = run(scenario())
    assert [(e.schedule_id, e.missed_count) for e in handler.missed] == [(sid, 2)]
