"""Pure trigger arithmetic: properties against cronsim, hand-written DST instants, validation."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger._scheduling.triggers import (
    MAX_INTERVAL_SECONDS,
    AfterStartup,
    CatchUpPolicy,
    Cron,
    Interval,
    Once,
    SkipMissed,
    Trigger,
    catch_up_from_json,
    catch_up_to_json,
    count_fires_between,
    next_after,
    trigger_from_json,
    trigger_to_json,
    validate_catch_up,
    validate_trigger,
)
from jobledger.errors import ScheduleError

PROPS = settings(max_examples=200, deadline=None)
# Cron examples cost a few ms each (some expressions never fire: cronsim then searches
# 50 years); fewer of them keep the file fast. A 4000-example run passed when written.
CRON_PROPS = settings(max_examples=100, deadline=None)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# --- strategies -------------------------------------------------------------------------


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi)
    return st.one_of(
        st.just("*"),
        value.map(str),
        st.integers(2, 15).map(lambda step: f"*/{step}"),
        st.tuples(value, value).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.lists(value, min_size=2, max_size=3, unique=True).map(
            lambda xs: ",".join(str(x) for x in sorted(xs))
        ),
    )


FIVE_FIELD = st.builds(
    lambda m, h, dom, mon, dow: f"{m} {h} {dom} {mon} {dow}",
    _field(0, 59),
    _field(0, 23),
    st.one_of(st.just("*"), _field(1, 28)),
    st.one_of(st.just("*"), _field(1, 12)),
    st.sampled_from(["*", "*", "1-5", "0,6", "MON", "5L", "1#2"]),
)
SIX_FIELD = st.builds(
    lambda sec, rest: f"{sec} {rest}", st.sampled_from(["0", "30", "15,45", "*/20"]), FIVE_FIELD
)
ZONES = st.sampled_from(
    [None, "UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago"]
)
CRONS = st.builds(Cron, st.one_of(FIVE_FIELD, SIX_FIELD), ZONES)
# Approximate 2026 DST changes of the zones above; instants near them are drawn often.
_TRANSITIONS = [
    datetime(2026, 3, 29, 1, tzinfo=UTC),  # Berlin
    datetime(2026, 10, 25, 1, tzinfo=UTC),
    datetime(2026, 3, 8, 7, tzinfo=UTC),  # New York
    datetime(2026, 11, 1, 6, tzinfo=UTC),
    datetime(2026, 4, 4, 15, tzinfo=UTC),  # Lord Howe (30-minute shift)
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    datetime(2026, 4, 5, 3, tzinfo=UTC),  # Santiago (changes at midnight)
    datetime(2026, 9, 6, 4, tzinfo=UTC),
]
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
INSTANTS = st.one_of(
    # Microsecond offsets are far cheaper to draw than st.datetimes, and shrink as well.
    st.integers(0, 7 * 366 * 86_400 * 10**6).map(lambda us: _EPOCH + timedelta(microseconds=us)),
    st.builds(
        lambda at, offset: at + timedelta(microseconds=offset),
        st.sampled_from(_TRANSITIONS),
        st.integers(-6 * 3600 * 10**6, 6 * 3600 * 10**6),
    ),
)
SECONDS = st.one_of(
    st.integers(1, 100_000),
    st.floats(0.001, MAX_INTERVAL_SECONDS, allow_nan=False, allow_infinity=False),
)


def _first_instant_past(zone: ZoneInfo, reading: datetime) -> datetime:
    """The first instant whose local reading is past `reading` (a reading inside a gap),
    found by walking whole seconds from well before it: slow, and independent of the
    implementation's halving (every zone's transitions fall on whole seconds)."""
    at = reading.replace(tzinfo=UTC) - timedelta(hours=15)
    step = timedelta(minutes=1)
    while at.astimezone(zone).replace(tzinfo=None) <= reading:
        at += step
    at -= step
    while at.astimezone(zone).replace(tzinfo=None) <= reading:
        at += timedelta(seconds=1)
    return at


def _reference_next(cron: Cron, after: datetime) -> datetime | None:
    """The contract, spelled out slowly. UTC and 5-field wall-clock expressions: cronsim's
    own answer. Otherwise: the earliest real instant after `after` whose local reading
    cronsim matches (a wall-clock reading only at its first instant, and at the end of the
    gap when it has none), found by mapping every matching naive reading within generous
    margins."""
    zone = ZoneInfo(cron.timezone) if cron.timezone else UTC
    parts = cron.expr.split()
    wall_clock = not parts[-5].startswith("*") and not parts[-4].startswith("*")
    if zone is UTC or (len(parts) == 5 and wall_clock):
        for local in CronSim(cron.expr, after.astimezone(zone)):
            if local.astimezone(UTC) > after:
                return local.astimezone(UTC)
        return None
    margin = timedelta(hours=3)
    best: datetime | None = None
    for reading in CronSim(cron.expr, after.astimezone(zone).replace(tzinfo=None) - margin):
        if best is not None and reading > best.astimezone(zone).replace(tzinfo=None) + margin:
            break
        instants = sorted(
            x
            for x in (reading.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1))
            if x.astimezone(zone).replace(tzinfo=None) == reading
        )
        if wall_clock and not instants and isinstance(zone, ZoneInfo):
            instants = [_first_instant_past(zone, reading)]
        for x in instants[:1] if wall_clock else instants:
            if x > after and (best is None or x < best):
                best = x
    return best


def _iterate(trigger: Trigger, start: datetime, end: datetime, anchor: datetime) -> list[datetime]:
    fires: list[datetime] = []
    at = next_after(trigger, start, anchor=anchor)
    while at is not None and at <= end:
        fires.append(at)
        at = next_after(trigger, at, anchor=anchor)
    return fires


# --- cron properties --------------------------------------------------------------------


@CRON_PROPS
@given(CRONS, INSTANTS, INSTANTS)
def test_cron_next_is_strictly_after_and_monotone(cron: Cron, a: datetime, b: datetime) -> None:
    a, b = min(a, b), max(a, b)
    na, nb = next_after(cron, a), next_after(cron, b)
    if na is None:  # e.g. "0 0 */15 * 1#2": the 2nd Monday is never the 1st or the 16th
        assert nb is None
        return
    assert na > a
    assert na.tzinfo is UTC
    if nb is not None:
        assert nb > b
        assert na <= nb


@CRON_PROPS
@given(st.builds(Cron, st.one_of(FIVE_FIELD, SIX_FIELD)), INSTANTS)
def test_utc_cron_matches_raw_cronsim(cron: Cron, after: datetime) -> None:
    expected = next(CronSim(cron.expr, after), None)
    assert next_after(cron, after) == expected


@CRON_PROPS
@given(CRONS, INSTANTS)
def test_zoned_cron_matches_cronsim_contract(cron: Cron, after: datetime) -> None:
    assert next_after(cron, after) == _reference_next(cron, after)


@CRON_PROPS
@given(CRONS, INSTANTS, st.integers(1, 4 * 3600))
def test_cron_count_agrees_with_iteration(cron: Cron, start: datetime, span: int) -> None:
    end = start + timedelta(seconds=span)
    fires = _iterate(cron, start, end, anchor=NOW)
    assert count_fires_between(cron, start, end) == (len(fires), fires[-1] if fires else None)


# --- interval properties ----------------------------------------------------------------


@PROPS
@given(SECONDS, INSTANTS, INSTANTS)
def test_interval_next_is_on_grid_within_one_period(
    seconds: float, anchor: datetime, after: datetime
) -> None:
    period_us = round(seconds * 1_000_000)
    result = next_after(Interval(seconds), after, anchor=anchor)
    assert result is not None
    assert ((result - anchor) // timedelta(microseconds=1)) % period_us == 0
    assert after < result <= after + timedelta(microseconds=period_us)


@PROPS
@given(SECONDS, INSTANTS, INSTANTS, INSTANTS)
def test_interval_next_is_monotone(s: float, anchor: datetime, a: datetime, b: datetime) -> None:
    a, b = min(a, b), max(a, b)
    na, nb = next_after(Interval(s), a, anchor=anchor), next_after(Interval(s), b, anchor=anchor)
    assert na is not None
    assert nb is not None
    assert na <= nb


@PROPS
@given(
    st.floats(0.5, 86_400, allow_nan=False),
    INSTANTS,
    INSTANTS,
    st.floats(0, 60, allow_nan=False),
)
def test_interval_count_agrees_with_iteration(
    seconds: float, anchor: datetime, start: datetime, periods: float
) -> None:
    trigger = Interval(seconds)
    end = start + timedelta(seconds=seconds * periods)
    fires = _iterate(trigger, start, end, anchor=anchor)
    expected = (len(fires), fires[-1] if fires else None)
    assert count_fires_between(trigger, start, end, anchor=anchor) == expected


def test_interval_grid_before_and_on_the_anchor() -> None:
    anchor = utc(2026, 1, 1, 0, 0, 7)
    assert next_after(Interval(10), utc(2026, 1, 1), anchor=anchor) == anchor
    assert next_after(Interval(10), anchor, anchor=anchor) == anchor + timedelta(seconds=10)
    assert next_after(Interval(10), utc(2025, 12, 31, 23, 59, 59), anchor=anchor) == utc(
        2026, 1, 1, 0, 0, 7
    )
    assert next_after(Interval(10), utc(2025, 12, 31, 23, 59, 50), anchor=anchor) == utc(
        2025, 12, 31, 23, 59, 57
    )


def test_interval_needs_an_anchor() -> None:
    with pytest.raises(ValueError, match="anchor"):
        next_after(Interval(10), NOW)


def test_interval_count_is_arithmetic_for_huge_windows() -> None:
    count, last = count_fires_between(Interval(0.001), NOW, NOW + timedelta(days=365), anchor=NOW)
    assert count == 365 * 86_400_000
    assert last == NOW + timedelta(days=365)


# --- once and cron odds and ends --------------------------------------------------------


def test_once() -> None:
    at = utc(2026, 5, 1, 12)
    berlin = at.astimezone(ZoneInfo("Europe/Berlin"))
    assert next_after(Once(berlin), NOW) == at
    assert next_after(Once(at), at) is None
    assert next_after(Once(at), at - timedelta(microseconds=1)) == at
    assert count_fires_between(Once(at), NOW, at) == (1, at)
    assert count_fires_between(Once(at), at, at + timedelta(days=1)) == (0, None)


def test_count_caps_cron_iteration_and_ignores_empty_windows() -> None:
    every_second = Cron("* * * * * *")
    assert count_fires_between(every_second, NOW, NOW + timedelta(days=1), cap=100) == (
        100,
        NOW + timedelta(seconds=100),
    )
    assert count_fires_between(every_second, NOW, NOW) == (0, None)
    assert count_fires_between(every_second, NOW, NOW - timedelta(hours=1)) == (0, None)


def test_six_field_cron_has_seconds_first() -> None:
    assert next_after(Cron("15 30 9 * * *"), NOW) == utc(2026, 1, 1, 9, 30, 15)
    assert count_fires_between(Cron("*/20 * * * * *"), NOW, NOW + timedelta(minutes=1)) == (
        3,
        NOW + timedelta(minutes=1),
    )
    validate_trigger(Cron("*/20 * * * * *"), now=NOW)


def test_cron_limit_is_not_applied_by_the_arithmetic() -> None:
    assert count_fires_between(Cron("0 * * * *", limit=1), NOW, NOW + timedelta(hours=5))[0] == 5


# --- DST, by hand -----------------------------------------------------------------------

BERLIN = "Europe/Berlin"


def _fires(cron: Cron, after: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(n):
        nxt = next_after(cron, after)
        assert nxt is not None
        out.append(nxt)
        after = nxt
    return out


def test_berlin_spring_forward_fixed_time_moves_to_the_end_of_the_gap() -> None:
    # 2026-03-29 02:00 CET -> 03:00 CEST: local 02:30 does not exist, cronsim runs it at 03:00.
    assert _fires(Cron("30 2 * * *", BERLIN), utc(2026, 3, 27, 12), 4) == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]


def test_berlin_fall_back_fixed_time_fires_once() -> None:
    # 2026-10-25 03:00 CEST -> 02:00 CET: local 02:30 happens twice, fires the first time.
    assert _fires(Cron("30 2 * * *", BERLIN), utc(2026, 10, 24, 12), 3) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
        utc(2026, 10, 27, 1, 30),
    ]
    # Asking from inside the repeated hour (02:10 CET) must not hand back 02:30 CEST.
    assert next_after(Cron("30 2 * * *", BERLIN), utc(2026, 10, 25, 1, 10)) == utc(
        2026, 10, 26, 1, 30
    )


@CRON_PROPS
@given(FIVE_FIELD, ZONES, INSTANTS)
def test_a_six_field_cron_with_second_zero_fires_as_its_five_field_twin(
    five: str, zone: str | None, after: datetime
) -> None:
    # The 5-field form is cronsim's own DST walk; the 6-field form is ours (readings
    # mapped by zoneinfo). Both run a missing wall-clock time at the end of the gap.
    assert next_after(Cron("0 " + five, zone), after) == next_after(Cron(five, zone), after)


def test_berlin_six_field_fixed_time() -> None:
    # A missing time runs at the end of the gap, as with 5 fields; the repeat fires once.
    cron = Cron("0 30 2 * * *", BERLIN)
    assert _fires(cron, utc(2026, 3, 28, 12), 2) == [
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, the jump
        utc(2026, 3, 30, 0, 30),
    ]
    # Seconds inside the gap make one fire at its end, not three.
    assert _fires(Cron("*/20 30 2 * * *", BERLIN), utc(2026, 3, 28, 12), 2) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 30),
    ]
    assert _fires(cron, utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def test_lord_howe_thirty_minute_gap_runs_a_fixed_time_at_its_end() -> None:
    # 2026-10-04 02:00 LHST (+10:30) -> 02:30 LHDT (+11): 02:15 does not exist that day.
    lord_howe = "Australia/Lord_Howe"
    for expr in ("15 2 * * *", "0 15 2 * * *"):
        assert _fires(Cron(expr, lord_howe), utc(2026, 10, 2, 12), 3) == [
            utc(2026, 10, 2, 15, 45),  # 02:15 LHST
            utc(2026, 10, 3, 15, 30),  # 02:30 LHDT, the jump
            utc(2026, 10, 4, 15, 15),  # 02:15 LHDT
        ], expr
    # 2026-04-05 02:00 LHDT -> 01:30 LHST: 01:45 happens twice, fires the first time.
    for expr in ("45 1 * * *", "0 45 1 * * *"):
        assert _fires(Cron(expr, lord_howe), utc(2026, 4, 3, 12), 3) == [
            utc(2026, 4, 3, 14, 45),  # 01:45 LHDT
            utc(2026, 4, 4, 14, 45),  # 01:45 LHDT, before the repeat
            utc(2026, 4, 5, 15, 15),  # 01:45 LHST
        ], expr


def test_berlin_hourly_follows_real_time() -> None:
    hourly = Cron("0 * * * *", BERLIN)
    assert _fires(hourly, utc(2026, 3, 28, 23, 30), 3) == [
        utc(2026, 3, 29, 0, 0),  # 01:00 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST (02:00 does not exist)
        utc(2026, 3, 29, 2, 0),  # 04:00 CEST
    ]
    assert _fires(hourly, utc(2026, 10, 24, 22, 30), 4) == [
        utc(2026, 10, 24, 23, 0),  # 01:00 CEST
        utc(2026, 10, 25, 0, 0),  # 02:00 CEST
        utc(2026, 10, 25, 1, 0),  # 02:00 CET (the repeated hour fires again)
        utc(2026, 10, 25, 2, 0),  # 03:00 CET
    ]
    # Local days: 23 hours in March, 25 in October.
    assert count_fires_between(hourly, utc(2026, 3, 28, 22, 59), utc(2026, 3, 29, 21, 59))[0] == 23
    assert (
        count_fires_between(hourly, utc(2026, 10, 24, 21, 59), utc(2026, 10, 25, 22, 59))[0] == 25
    )


# --- validation -------------------------------------------------------------------------

INVALID: list[Any] = [
    Cron("not a cron"),
    Cron("61 * * * *"),
    Cron("* * * *"),
    Cron("* * * * * * *"),
    Cron("@daily"),
    Cron(5),  # type: ignore[arg-type]
    Cron("0 0 * * *", timezone="Mars/Olympus_Mons"),
    Cron("0 0 * * *", timezone=""),
    Cron("0 0 * * *", timezone="/etc/passwd"),
    Cron("0 0 * * *", timezone="Europe"),
    Cron("0 0 * * *", limit=0),
    Cron("0 0 * * *", limit=-1),
    Cron("0 0 * * *", limit=True),
    Cron("0 0 * * *", limit=1.5),  # type: ignore[arg-type]
    Interval(0),
    Interval(-5),
    Interval(0.0005),
    Interval(math.nan),
    Interval(math.inf),
    Interval(MAX_INTERVAL_SECONDS + 1),
    Interval(True),
    Interval("10"),  # type: ignore[arg-type]
    Once(datetime(2026, 5, 1)),
    Once("2026-05-01"),  # type: ignore[arg-type]
    "0 * * * *",
    None,
]


@pytest.mark.parametrize("trigger", INVALID, ids=repr)
def test_invalid_triggers(trigger: Any) -> None:
    with pytest.raises(ScheduleError) as err:
        validate_trigger(trigger, now=NOW)
    assert err.value.code == "JOB_SCHEDULE_TRIGGER_INVALID"


def test_cron_without_future_fire_is_invalid() -> None:
    # Leap days after 9997 fall beyond datetime's year 9999.
    with pytest.raises(ScheduleError, match="no future fire"):
        validate_trigger(Cron("0 0 29 2 *"), now=utc(9997, 1, 1))


@pytest.mark.parametrize(
    "trigger",
    [
        Cron("*/5 * * * *", timezone="Europe/Berlin", limit=3),
        Cron("0 9 * * mon-fri"),
        Cron("0 0 L * *", timezone="UTC"),
        Interval(0.001),
        Interval(MAX_INTERVAL_SECONDS),
        Once(utc(2020, 1, 1)),  # past: fires at once when armed
    ],
    ids=repr,
)
def test_valid_triggers(trigger: Trigger) -> None:
    validate_trigger(trigger, now=NOW)


@pytest.mark.parametrize(
    "policy",
    [AfterStartup(-1), AfterStartup(math.nan), AfterStartup(math.inf), AfterStartup(True), None],
    ids=repr,
)
def test_invalid_catch_up(policy: Any) -> None:
    with pytest.raises(ScheduleError) as err:
        validate_catch_up(policy)
    assert err.value.code == "JOB_SCHEDULE_TRIGGER_INVALID"


def test_valid_catch_up() -> None:
    for policy in (SkipMissed(), AfterStartup(), AfterStartup(5), AfterStartup(0.5)):
        validate_catch_up(policy)


# --- JSON -------------------------------------------------------------------------------

MS_INSTANTS = st.integers(
    int(datetime(1990, 1, 1, tzinfo=UTC).timestamp() * 1000),
    int(datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 1000),
).map(lambda ms: datetime.fromtimestamp(ms / 1000, tz=UTC))
TRIGGERS: st.SearchStrategy[Trigger] = st.one_of(
    st.builds(Cron, st.one_of(FIVE_FIELD, SIX_FIELD), ZONES, st.none() | st.integers(1, 10**6)),
    st.builds(Interval, SECONDS),
    st.builds(Once, MS_INSTANTS),
)
POLICIES: st.SearchStrategy[CatchUpPolicy] = st.one_of(
    st.just(SkipMissed()),
    st.builds(AfterStartup, st.integers(0, 10_000) | st.floats(0, 1e6, allow_nan=False)),
)


@PROPS
@given(TRIGGERS)
def test_trigger_json_round_trip(trigger: Trigger) -> None:
    data = json.loads(json.dumps(trigger_to_json(trigger)))
    assert trigger_from_json(data) == trigger


@PROPS
@given(POLICIES)
def test_catch_up_json_round_trip(policy: CatchUpPolicy) -> None:
    assert catch_up_from_json(json.loads(json.dumps(catch_up_to_json(policy)))) == policy


def test_json_shapes() -> None:
    assert trigger_to_json(Cron("0 * * * *", "Europe/Berlin", 3)) == {
        "kind": "cron",
        "expr": "0 * * * *",
        "timezone": "Europe/Berlin",
        "limit": 3,
    }
    assert trigger_to_json(Interval(600)) == {"kind": "interval", "seconds": 600}
    assert trigger_to_json(Once(NOW)) == {"kind": "once", "at_ms": 1_767_225_600_000}
    assert catch_up_to_json(SkipMissed()) == {"kind": "skip-missed"}
    assert catch_up_to_json(AfterStartup(5)) == {"kind": "after-startup", "minutes": 5}


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "cron",
        {},
        {"kind": "weekly"},
        {"kind": "cron"},
        {"kind": "cron", "expr": 5},
        {"kind": "cron", "expr": "* * * * *", "timezone": 1},
        {"kind": "cron", "expr": "* * * * *", "limit": "3"},
        {"kind": "cron", "expr": "* * * * *", "limit": True},
        {"kind": "interval"},
        {"kind": "interval", "seconds": "10"},
        {"kind": "once", "at_ms": None},
        {"kind": "once", "at_ms": 1e30},
        {"kind": "once", "at_ms": math.nan},
    ],
    ids=repr,
)
def test_bad_trigger_json(data: Any) -> None:
    with pytest.raises(ScheduleError) as err:
        trigger_from_json(data)
    assert err.value.code == "JOB_SCHEDULE_TRIGGER_INVALID"


@pytest.mark.parametrize(
    "data",
    [
        None,
        {},
        {"kind": "later"},
        {"kind": "after-startup", "minutes": -1},
        {"kind": "after-startup", "minutes": "5"},
        {"kind": "after-startup", "minutes": math.inf},
    ],
    ids=repr,
)
def test_unknown_catch_up_json_reads_as_skip_missed(data: Any) -> None:
    assert catch_up_from_json(data) == SkipMissed()


def test_after_startup_json_defaults_to_zero_minutes() -> None:
    assert catch_up_from_json({"kind": "after-startup"}) == AfterStartup(0)
