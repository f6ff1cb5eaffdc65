"""Triggers and catch-up policies: plain values and pure arithmetic, no I/O, no clock.

Invariants (docs/design/scheduling.md has the long form):

* Every datetime returned is aware UTC. Naive inputs to the arithmetic are read as UTC
  (like `clock.to_ms`); `validate_trigger` rejects a naive `Once.at` outright.
* `next_after(t, after)` is the first fire strictly after `after`, and it is monotone:
  `a <= b` implies `next_after(t, a) <= next_after(t, b)`.
* Cron expressions are evaluated by cronsim, never by hand. Five fields, or six with the
  seconds field first (cronsim's own order, so the text is handed over unchanged).
  `timezone=None` means UTC, not the host's local time: every process that shares the
  database must agree on the calendar.
* DST: expressions whose minute and hour fields are both specific (neither starts with
  `*`) run at a local wall-clock time. A local time that does not exist (spring forward)
  runs at the first valid instant after the gap, the instant the clocks jump (Berlin
  02:30 -> 03:00 CEST; Lord Howe 02:15 -> 02:30), with 5 fields and with 6 alike; several
  readings inside one gap make one fire there. A local time that occurs twice fires once,
  at its first occurrence. Every other expression ("*/5 * * * *", "0 * * * *") follows
  real elapsed time: it fires at every instant whose local reading matches, so an hourly
  cron fires in both copies of a repeated hour and never in the missing one. 5-field
  wall-clock expressions use cronsim's own DST walk (which has exactly this rule); for
  the rest cronsim enumerates naive local readings and zoneinfo maps each to its
  instants (cronsim's aware walk skips fires across offset changes that are not whole
  hours, e.g. Australia/Lord_Howe, and skips a 6-field reading in a gap for the day).
* Interval: the grid `anchor + k*seconds` (any integer k, so `after` may precede the
  anchor), computed in whole microseconds: the period is `round(seconds * 1e6)` us.
* `Cron.limit` is not applied here; callers count fires.
* Jitter: `jitter_offset_ms(schedule_id, fire_ms, jitter_ms)` is a pure function of its
  arguments (a hash, never a random draw), in `[0, jitter_ms)`, so every process that
  fires the same point computes the same delay.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, TypeAlias, TypeGuard
from zoneinfo import ZoneInfo

from cronsim import CronSim

from jobledger._core.limits import MAX_TIMEOUT_SECONDS, is_finite_number, ms_in_range
from jobledger.clock import from_ms, to_ms
from jobledger.errors import ScheduleError

__all__ = [
    "MAX_CATCH_UP_FIRES",
    "MAX_INTERVAL_SECONDS",
    "MAX_JITTER_SECONDS",
    "MIN_INTERVAL_SECONDS",
    "AfterStartup",
    "AllMissed",
    "CatchUpPolicy",
    "Cron",
    "Interval",
    "Once",
    "SkipMissed",
    "Trigger",
    "catch_up_from_json",
    "catch_up_to_json",
    "count_fires_between",
    "fires_between",
    "jitter_offset_ms",
    "next_after",
    "trigger_from_json",
    "trigger_to_json",
    "validate_catch_up",
    "validate_trigger",
]

TRIGGER_INVALID = "JOB_SCHEDULE_TRIGGER_INVALID"
# 1 ms is the resolution of every stored time; anything finer is a busy loop, not a schedule.
MIN_INTERVAL_SECONDS = 0.001
# Longer periods belong to a cron or a once trigger.
MAX_INTERVAL_SECONDS = 366 * 24 * 3600.0
# One write transaction holds every job a catch-up or a backfill writes: a bound keeps it
# short (and a mistaken range from writing years of jobs).
MAX_CATCH_UP_FIRES = 1000
# A delay longer than the longest interval is no longer jitter.
MAX_JITTER_SECONDS = MAX_INTERVAL_SECONDS

_US = timedelta(microseconds=1)
_ZERO = timedelta(0)
# Only the parse matters here; cronsim needs some start time to build its iterator.
_PARSE_PROBE = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression (5 fields, or 6 with seconds first) in an IANA zone (None = UTC).

    `limit` caps the number of natural fires; it is enforced by whoever counts fires.
    """

    expr: str
    timezone: str | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class Interval:
    """Every `seconds`, on the grid `anchor + k*seconds` (the anchor is the creation time)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Once:
    """One fire at the aware instant `at`."""

    at: datetime


@dataclass(frozen=True, slots=True)
class SkipMissed:
    """Fires missed while no process ran are dropped."""


@dataclass(frozen=True, slots=True)
class AfterStartup:
    """One make-up job for missed fires, `minutes` after startup recovery runs."""

    minutes: float = 0


@dataclass(frozen=True, slots=True)
class AllMissed:
    """One job per missed fire (the newest `max` of them), each under its natural fire's
    key, due at once when startup recovery runs."""

    max: int = 100


Trigger: TypeAlias = Cron | Interval | Once
CatchUpPolicy: TypeAlias = SkipMissed | AfterStartup | AllMissed


def _invalid(message: str, **params: Any) -> ScheduleError:
    return ScheduleError(message, code=TRIGGER_INVALID, params=params)


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _is_number(value: object) -> TypeGuard[int | float]:
    # bool is an int to Python, never a duration to a user.
    return isinstance(value, int | float) and not isinstance(value, bool)


# --- cron -----------------------------------------------------------------------------


def _zone(name: str | None) -> tzinfo:
    if name is None:
        return UTC
    if not isinstance(name, str):
        raise _invalid("timezone must be an IANA name or None", timezone=repr(name))
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError) as exc:  # KeyError covers ZoneInfoNotFoundError
        raise _invalid(f"unknown timezone {name!r}", timezone=name) from exc


def _parse(expr: str, at: datetime) -> CronSim:
    if not isinstance(expr, str):
        raise _invalid("cron expression must be a string", expr=repr(expr))
    try:
        return CronSim(expr, at)
    # cronsim raises CronSimError for what it recognises as bad; anything else it raises
    # while parsing still means the expression is unusable.
    except Exception as exc:
        raise _invalid(f"invalid cron expression {expr!r}: {exc}", expr=expr) from exc


def _is_wall_clock_time(expr: str) -> bool:
    parts = expr.split()
    minute, hour = (parts[0], parts[1]) if len(parts) == 5 else (parts[1], parts[2])
    return not minute.startswith("*") and not hour.startswith("*")


def _cronsim_handles_dst(expr: str, zone: tzinfo) -> bool:
    """True where cronsim's own time-zone handling is used as is: UTC (nothing to handle)
    and 5-field wall-clock expressions (cronsim walks naive local time, Debian-style)."""
    return zone is UTC or (len(expr.split()) == 5 and _is_wall_clock_time(expr))


def _cronsim_fires(sim: CronSim, after: datetime) -> Iterator[datetime]:
    last = after
    while True:
        try:
            local = next(sim)
        # StopIteration: nothing within cronsim's 50-year horizon; the others: past year 9999.
        except (StopIteration, OverflowError, ValueError):
            return
        fire = local.astimezone(UTC)
        # Walking naive local time, cronsim can answer an `after` inside a repeated hour
        # with an earlier instant; never hand one out.
        if fire > last:
            last = fire
            yield fire


def _walk_start(zone: tzinfo, after: datetime) -> datetime:
    """The naive local reading from which to enumerate the readings of fires after `after`."""
    local_after = after.astimezone(zone)
    start = local_after.replace(tzinfo=None)
    twin = local_after.replace(fold=1)
    if local_after.fold == 0 and twin.utcoffset() != local_after.utcoffset():
        # `after` is the first pass of a repeated reading: instants of the second pass
        # read earlier on the wall, so start the walk where the repeat begins.
        start -= (local_after.utcoffset() or _ZERO) - (twin.utcoffset() or _ZERO)
    return start


def _real_time_fires(
    sim: CronSim, zone: tzinfo, after: datetime, *, first_only: bool
) -> Iterator[datetime]:
    """Every instant whose local wall-clock reading matches, in order (with `first_only`,
    a repeated reading fires only its first instant).

    cronsim's own aware walk re-aligns to the hour before ticking hour by hour, so across
    an offset change that is not a whole hour (Australia/Lord_Howe) it lands on :30 and
    skips fires. Here cronsim only enumerates naive readings, and zoneinfo maps each one to
    its real instants: none inside a gap, two inside a repeat.
    """
    pending: list[datetime] = []
    last = after
    while True:
        try:
            reading = next(sim)
        except (StopIteration, OverflowError, ValueError):
            break
        early = reading.replace(tzinfo=zone, fold=0).astimezone(UTC)
        late = reading.replace(tzinfo=zone, fold=1).astimezone(UTC)
        real = [
            x for x in sorted({early, late}) if x.astimezone(zone).replace(tzinfo=None) == reading
        ]
        if first_only and not real:
            # A wall-clock time inside a gap runs when the clocks jump, as cronsim runs a
            # 5-field one: the first instant whose reading is past this one.
            real = [_end_of_gap(zone, reading, min(early, late), max(early, late))]
        for instant in real[:1] if first_only else real:
            if instant > last:
                heapq.heappush(pending, instant)
        # No later reading maps to an instant before this one's earliest candidate, so
        # everything pending up to it is final and in order.
        bound = min(early, late)
        while pending and pending[0] <= bound:
            fire = heapq.heappop(pending)
            if fire > last:
                last = fire
                yield fire
    while pending:
        fire = heapq.heappop(pending)
        if fire > last:
            last = fire
            yield fire


def _end_of_gap(zone: tzinfo, reading: datetime, low: datetime, high: datetime) -> datetime:
    """The first instant in `(low, high]` whose local reading is later than `reading`, a
    reading the zone skips. `low` (read with the offset after the jump) is before the
    jump and `high` (with the one before) after it; halving the microseconds between them
    finds the jump, so offsets that are not whole hours need no table of transitions."""
    while high - low > _US:
        mid = low + (high - low) // 2
        if mid.astimezone(zone).replace(tzinfo=None) > reading:
            high = mid
        else:
            low = mid
    return high


def _cron_fires(cron: Cron, after: datetime) -> Iterator[datetime]:
    """Fires strictly after `after`, strictly increasing, as UTC datetimes."""
    zone = _zone(cron.timezone)
    if not isinstance(cron.expr, str):
        raise _invalid("cron expression must be a string", expr=repr(cron.expr))
    if _cronsim_handles_dst(cron.expr, zone):
        return _cronsim_fires(_parse(cron.expr, after.astimezone(zone)), after)
    sim = _parse(cron.expr, _walk_start(zone, after))  # naive: cronsim leaves DST to us
    return _real_time_fires(sim, zone, after, first_only=_is_wall_clock_time(cron.expr))


def _check_cron(cron: Cron) -> None:
    _zone(cron.timezone)
    _parse(cron.expr, _PARSE_PROBE)
    limit = cron.limit
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise _invalid("cron limit must be an integer >= 1 or None", limit=repr(limit))


# --- interval -------------------------------------------------------------------------


def _period_us(interval: Interval) -> int:
    seconds = interval.seconds
    if not is_finite_number(seconds):
        raise _invalid("interval seconds must be a finite number", seconds=repr(seconds))
    if not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
        raise _invalid(
            f"interval seconds must be within [{MIN_INTERVAL_SECONDS}, {MAX_INTERVAL_SECONDS}]",
            seconds=seconds,
        )
    return round(seconds * 1_000_000)


def _anchor(anchor: datetime | None) -> datetime:
    if anchor is None:
        raise ValueError("an Interval trigger needs its grid anchor (the schedule's creation time)")
    return _utc(anchor)


def _grid_index(anchor: datetime, at: datetime, period_us: int) -> int:
    """The k of the last grid point at or before `at` (floor division, so negative before)."""
    return ((at - anchor) // _US) // period_us


def _grid_point(anchor: datetime, k: int, period_us: int) -> datetime | None:
    try:
        return anchor + timedelta(microseconds=k * period_us)
    except OverflowError:
        return None


# --- public arithmetic ----------------------------------------------------------------


def next_after(
    trigger: Trigger, after: datetime, *, anchor: datetime | None = None
) -> datetime | None:
    """The first fire strictly after `after`, or None when there is none.

    `anchor` is required for `Interval` (the grid origin) and ignored otherwise.
    """
    after = _utc(after)
    if isinstance(trigger, Interval):
        origin = _anchor(anchor)
        period = _period_us(trigger)
        return _grid_point(origin, _grid_index(origin, after, period) + 1, period)
    if isinstance(trigger, Once):
        at = _utc(trigger.at)
        return at if at > after else None
    if isinstance(trigger, Cron):
        return next(_cron_fires(trigger, after), None)
    raise _invalid(f"not a trigger: {trigger!r}")


def count_fires_between(
    trigger: Trigger,
    start: datetime,
    end: datetime,
    *,
    anchor: datetime | None = None,
    cap: int = 100_000,
) -> tuple[int, datetime | None]:
    """How many fires fall in `(start, end]`, and the last of them.

    Intervals are counted arithmetically (no cap). Crons are iterated and stop counting
    at `cap`; the datetime is then the cap-th fire, not the true last one.
    """
    start, end = _utc(start), _utc(end)
    if end <= start:
        return 0, None
    if isinstance(trigger, Interval):
        origin = _anchor(anchor)
        period = _period_us(trigger)
        first = _grid_index(origin, start, period) + 1
        last = _grid_index(origin, end, period)
        if last < first:
            return 0, None
        return last - first + 1, _grid_point(origin, last, period)
    if isinstance(trigger, Once):
        at = _utc(trigger.at)
        return (1, at) if start < at <= end else (0, None)
    if isinstance(trigger, Cron):
        count, last_fire = 0, None
        if cap <= 0:
            return 0, None
        for fire in _cron_fires(trigger, start):
            if fire > end:
                break
            count, last_fire = count + 1, fire
            if count >= cap:
                break
        return count, last_fire
    raise _invalid(f"not a trigger: {trigger!r}")


def fires_between(
    trigger: Trigger,
    start: datetime,
    end: datetime,
    *,
    anchor: datetime | None = None,
    newest: int,
) -> tuple[list[datetime], int]:
    """The newest `newest` fires in `[start, end)`, oldest first, and how many fires the
    range holds in all (for a cron, counted up to 100 000). A half-open range, as a
    backfill's: a fire exactly at `end` belongs to the next range."""
    start, end = _utc(start), _utc(end)
    if end <= start or newest <= 0:
        return [], 0
    if isinstance(trigger, Interval):
        origin = _anchor(anchor)
        period = _period_us(trigger)
        first = _grid_index(origin, start - _US, period) + 1
        last = _grid_index(origin, end - _US, period)
        total = max(0, last - first + 1)
        points = [
            _grid_point(origin, k, period) for k in range(max(first, last - newest + 1), last + 1)
        ]
        return [p for p in points if p is not None], total
    if isinstance(trigger, Once):
        at = _utc(trigger.at)
        return ([at], 1) if start <= at < end else ([], 0)
    if isinstance(trigger, Cron):
        kept: list[datetime] = []
        total = 0
        for fire in _cron_fires(trigger, start - _US):
            if fire >= end:
                break
            total += 1
            kept.append(fire)
            if len(kept) > newest:
                del kept[0]
            if total >= 100_000:
                break
        return kept, total
    raise _invalid(f"not a trigger: {trigger!r}")


def jitter_offset_ms(schedule_id: str, fire_ms: int, jitter_ms: int) -> int:
    """The delay of the fire at `fire_ms` of schedule `schedule_id`, in `[0, jitter_ms)`.

    A hash of the two, not a random draw: every process that fires (or backfills) this
    point computes the same delay, and a restart does not move it."""
    if jitter_ms <= 0:
        return 0
    digest = hashlib.blake2b(f"{schedule_id}:{fire_ms}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % jitter_ms


# --- validation -----------------------------------------------------------------------


def validate_trigger(trigger: Trigger, *, now: datetime) -> None:
    """Raise `ScheduleError(code="JOB_SCHEDULE_TRIGGER_INVALID")` unless `trigger` is usable.

    A once trigger in the past is valid (it fires at once when armed); a cron with no
    fire after `now` is not.
    """
    if isinstance(trigger, Cron):
        _check_cron(trigger)
        if next_after(trigger, now) is None:
            raise _invalid(f"cron {trigger.expr!r} has no future fire", expr=trigger.expr)
    elif isinstance(trigger, Interval):
        _period_us(trigger)
    elif isinstance(trigger, Once):
        at = trigger.at
        if not isinstance(at, datetime):
            raise _invalid("once trigger needs a datetime", at=repr(at))
        if at.tzinfo is None or at.utcoffset() is None:
            raise _invalid("once trigger needs an aware datetime (with a timezone)", at=str(at))
        try:
            at_ms = to_ms(at)
        except (OverflowError, ValueError, OSError):
            at_ms = -1
        # Stored in epoch ms: the last microseconds of year 9999 round up into year
        # 10000, which reads back as no datetime at all.
        if not ms_in_range(at_ms):
            raise _invalid(
                "once trigger must be between 1970 and the end of year 9999 (UTC)", at=str(at)
            )
    else:
        raise _invalid(f"not a trigger: {trigger!r}")


def validate_catch_up(policy: CatchUpPolicy) -> None:
    """Raise `ScheduleError(code="JOB_SCHEDULE_TRIGGER_INVALID")` unless `policy` is usable."""
    if isinstance(policy, SkipMissed):
        return
    if isinstance(policy, AfterStartup):
        minutes = policy.minutes
        if not is_finite_number(minutes) or not 0 <= minutes * 60 <= MAX_TIMEOUT_SECONDS:
            raise _invalid(
                "after-startup minutes must be a finite number >= 0 (at most 10 years)",
                minutes=repr(minutes),
            )
        return
    if isinstance(policy, AllMissed):
        most = policy.max
        if (
            not isinstance(most, int)
            or isinstance(most, bool)
            or not 1 <= most <= MAX_CATCH_UP_FIRES
        ):
            raise _invalid(
                f"all-missed max must be an integer within [1, {MAX_CATCH_UP_FIRES}]",
                max=repr(most),
            )
        return
    raise _invalid(f"not a catch-up policy: {policy!r}")


# --- JSON -----------------------------------------------------------------------------


def trigger_to_json(trigger: Trigger) -> dict[str, Any]:
    """The stored form. Once is kept in epoch milliseconds, the resolution of every row."""
    if isinstance(trigger, Cron):
        return {
            "kind": "cron",
            "expr": trigger.expr,
            "timezone": trigger.timezone,
            "limit": trigger.limit,
        }
    if isinstance(trigger, Interval):
        return {"kind": "interval", "seconds": trigger.seconds}
    if isinstance(trigger, Once):
        return {"kind": "once", "at_ms": to_ms(trigger.at)}
    raise _invalid(f"not a trigger: {trigger!r}")


def trigger_from_json(data: object) -> Trigger:
    """Rebuild a trigger from `trigger_to_json` output.

    Checks shape and types only; `validate_trigger` judges meaning, so a stored row that
    an older release accepted can always be read back.
    """
    if not isinstance(data, Mapping):
        raise _invalid("trigger JSON must be an object", data=repr(data))
    kind = data.get("kind")
    if kind == "cron":
        expr, zone, limit = data.get("expr"), data.get("timezone"), data.get("limit")
        if not isinstance(expr, str):
            raise _invalid("cron JSON needs a string expr", data=dict(data))
        if zone is not None and not isinstance(zone, str):
            raise _invalid("cron JSON timezone must be a string or null", data=dict(data))
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise _invalid("cron JSON limit must be an integer or null", data=dict(data))
        return Cron(expr, timezone=zone, limit=limit)
    if kind == "interval":
        seconds = data.get("seconds")
        if not _is_number(seconds):
            raise _invalid("interval JSON needs numeric seconds", data=dict(data))
        return Interval(seconds)
    if kind == "once":
        at_ms = data.get("at_ms")
        if not _is_number(at_ms):
            raise _invalid("once JSON needs numeric at_ms", data=dict(data))
        try:
            return Once(from_ms(round(at_ms)))
        except (OverflowError, ValueError, OSError) as exc:
            raise _invalid("once JSON at_ms is out of range", data=dict(data)) from exc
    raise _invalid(f"unknown trigger kind {kind!r}", data=dict(data))


def catch_up_to_json(policy: CatchUpPolicy) -> dict[str, Any]:
    if isinstance(policy, AfterStartup):
        return {"kind": "after-startup", "minutes": policy.minutes}
    if isinstance(policy, AllMissed):
        return {"kind": "all-missed", "max": policy.max}
    return {"kind": "skip-missed"}


def catch_up_from_json(data: object) -> CatchUpPolicy:
    """Anything unrecognised or malformed reads as `SkipMissed`: never invent make-up work."""
    if isinstance(data, Mapping) and data.get("kind") == "after-startup":
        minutes = data.get("minutes", 0)
        if is_finite_number(minutes) and minutes >= 0:
            return AfterStartup(minutes)
    if isinstance(data, Mapping) and data.get("kind") == "all-missed":
        most = data.get("max")
        if isinstance(most, int) and not isinstance(most, bool) and most >= 1:
            return AllMissed(min(most, MAX_CATCH_UP_FIRES))
    return SkipMissed()
