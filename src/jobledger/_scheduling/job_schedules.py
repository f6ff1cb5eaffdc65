"""Persistent job schedules: rows in `job_schedules`, armed through `SchedulerService`.

Layering: `SchedulerService` only knows timers; this module owns the rows and
turns a timer's fire into a job. Rules:

* Only the leader arms schedules, after startup catch-up (catch-up THEN arm, so a
  make-up job lands before the first natural fire). Leadership moving re-arms them on
  the new leader. The leader follows rows other processes change (`follow`, on their
  commits): new, re-triggered, disabled, deleted and re-enabled schedules.
* A natural fire at T is one write transaction: a compare-and-set of the schedule's
  `next_run` from a value <= T to the following fire (> T; plus `last_run`,
  `fire_count`), and the job row with idempotency key `schedule:<id>:<T ms>`. A second
  process firing T finds `next_run` past T, loses, and writes nothing, so a fire is never
  enqueued twice — even after the first job finished and its key could be reused. The
  `<=` (not `=`) lets a row that fell behind the timer (a fire whose write outlasted a
  period) catch up at the next fire instead of stalling for good.
* Every fire re-reads the row, so payload/metadata edits apply to the next fire without
  re-arming (the interval phase is kept). A trigger change re-arms once.
* `next_run` is the next automatic fire; `last_run` the last fire of any kind; manual
  triggers set `last_run` only (and consume an overdue, never-fired one-shot).
* Overlap (`_scheduling/overlap.py`): a natural fire of a `skip` or `buffer_one`
  schedule is decided inside its own write transaction, after its compare-and-set won;
  a skipped fire still moves `next_run` (and counts in `skipped_count`, logged at INFO).
* Jitter: a fire's job is due `jitter_offset_ms(id, T, jitter_ms)` after T, a hash that
  every process computes alike; its key stays the fire's own `schedule:<id>:<T ms>`.
* Catch-up (once, at startup recovery) finds overdue crons/intervals, counts the real
  number of missed fires (for a limited cron, at most what its quota had left), and for
  `AfterStartup(minutes)` enqueues one make-up job keyed
  `schedule:<id>:catchup:<first missed ms>`, for `AllMissed(max)` one job per missed fire
  (the newest `max`) under each fire's natural key, guarded by a compare-and-set on
  `next_run`; the process that wins it calls `on_missed` (`last_fire_at` = the last real
  fire, `missed_count` the real count, not the number written).
* Backfill writes every fire in `[start, end)` that is before the calendar's `next_run`
  and not after now, under natural keys, skipping keys a stored job holds: fires at or
  after `next_run` belong to the natural fires and the catch-up, so the three never write
  one fire twice, and a second backfill of a range writes nothing. At most
  `MAX_CATCH_UP_FIRES` fires a call (more: JOB_INVALID_OPTION, nothing written).
* Pause: cron timers are paused in the scheduler (so `limit` quotas survive), interval
  fires are no-ops, suppressed one-shot fires are recorded and re-armed exactly once on
  release; release resumes crons and refreshes `next_run`.
* `*_tx` variants validate first, write through the caller's transaction and never touch
  timers; `sync_job_schedule_timer_by_id` does that after commit. A rolled-back update
  therefore leaves the old row and the same armed timer, phase intact.

`JobSchedules` is built from what it uses, not from the manager: the store, the clock,
the handler registry (read live: handlers registered later count), the host's identity
and payload limit, and two callbacks into the host (`after_enqueue` once a fire's job is
committed, `state` for the host's loop and whether it runs). So it depends on no
manager internals, and a host without a loop or handlers (the CLI) can use the row
operations too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from jobledger._core.enqueue import EnqueueOptions, prepare
from jobledger._core.limits import findable, has_surrogate, is_finite_number, ms_in_range
from jobledger._core.registry import (
    MAX_PAYLOAD_BYTES,
    HandlerSpec,
    JobType,
    dumps,
    encode_metadata,
)
from jobledger._scheduling import overlap as overlap_policy
from jobledger._scheduling.hooks import ScheduleHooks
from jobledger._scheduling.scheduler import SchedulerService
from jobledger._scheduling.triggers import (
    MAX_CATCH_UP_FIRES,
    MAX_JITTER_SECONDS,
    AfterStartup,
    AllMissed,
    CatchUpPolicy,
    Cron,
    Interval,
    Once,
    SkipMissed,
    Trigger,
    catch_up_from_json,
    catch_up_to_json,
    count_fires_between,
    fires_between,
    jitter_offset_ms,
    next_after,
    trigger_from_json,
    trigger_to_json,
    validate_catch_up,
)
from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, JobRow, NewJob, Store, fresh_row, was_inserted
from jobledger._storage.records import EnsuredSchedule, ScheduleRow
from jobledger._storage.rows import json_or_text
from jobledger._storage.schedule_ops import Decide, OverlapDecision
from jobledger._types import MissedEvent, ScheduleSnapshot
from jobledger.clock import Clock, from_ms, to_ms
from jobledger.errors import JobValidationError, ScheduleError

__all__ = ["HostState", "JobSchedules", "validate_name"]

log = logging.getLogger("jobledger.schedules")

_PATCH_KEYS = frozenset(
    {"name", "trigger", "payload", "catch_up", "enabled", "metadata", "overlap", "jitter"}
)


def validate_name(name: object) -> str:
    """'' for the singleton (None); else 1-200 chars, stripped, no controls, not '__…'."""
    if name is None:
        return ""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= 200
        or name != name.strip()
        or name.startswith("__")
        or any(unicodedata.category(ch) == "Cc" for ch in name)
        or has_surrogate(name)
    ):
        raise ScheduleError(
            f"invalid schedule name {name!r}: 1-200 characters, no surrounding spaces or "
            "control characters, not starting with '__'",
            code="JOB_SCHEDULE_NAME_INVALID",
            params={"name": repr(name)[:300]},
        )
    return name


def snapshot_of(row: ScheduleRow) -> ScheduleSnapshot:
    """The row as a snapshot. A column another program wrote that does not parse (or
    nests past the parser) never breaks the read, nor a pause or edit of the schedule:
    a payload or metadata reads as its text, as a job's does (`rows.json_or_text`)."""
    try:
        trigger: Trigger = trigger_from_json(json.loads(row.trigger))
    except (ScheduleError, ValueError, RecursionError):
        trigger = Once(at=from_ms(0))  # fires at once and visibly, never breaks reads
    return ScheduleSnapshot(
        id=row.id,
        type=row.type,
        name=row.name or None,
        trigger=trigger,
        payload=json_or_text(row.payload),
        catch_up=catch_up_from_json(json_or_text(row.catch_up)),
        enabled=bool(row.enabled),
        next_run=None if row.next_run is None else from_ms(row.next_run),
        last_run=None if row.last_run is None else from_ms(row.last_run),
        metadata=json_or_text(row.metadata) or {},
        created_at=from_ms(row.created_at),
        updated_at=from_ms(row.updated_at),
        # A value another release wrote that this one does not know reads as the default.
        overlap=row.overlap if row.overlap in overlap_policy.OVERLAP_POLICIES else "allow",
        jitter=max(0, int(row.jitter_ms)) / 1000,
        skipped_fires=int(row.skipped_count),
    )


def validate_jitter(jitter: object) -> int:
    """`jitter` (seconds, None = none) in whole milliseconds, the resolution of a row."""
    if jitter is None:
        return 0
    if not is_finite_number(jitter) or not 0 <= jitter <= MAX_JITTER_SECONDS:
        raise JobValidationError(
            f"jitter must be a finite number of seconds within [0, {MAX_JITTER_SECONDS}] "
            f"or None, not {jitter!r}",
            code="JOB_INVALID_OPTION",
            params={"jitter": repr(jitter)[:200]},
        )
    return round(jitter * 1000)


class HostState(NamedTuple):
    """The host's running state, asked for at each use (it changes at start and stop)."""

    loop: asyncio.AbstractEventLoop | None  # where timers live; None before start
    started: bool
    stopping: bool


class JobSchedules(ScheduleHooks):
    """The schedule half of a `JobManager` (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        handlers: Mapping[str, HandlerSpec[Any]],
        *,
        worker_id: str,
        max_payload_bytes: int,
        now_ms: Callable[[], int],
        after_enqueue: Callable[[Sequence[NewJob], Sequence[JobRow]], None],
        state: Callable[[], HostState],
    ) -> None:
        self.store = store
        self.handlers = handlers
        self.worker_id = worker_id  # `enqueued_by` of the jobs fires write
        self.max_payload_bytes = max_payload_bytes
        self.now_ms = now_ms
        self.after_enqueue = after_enqueue
        self.state = state
        self.clock = clock
        self.sched = SchedulerService(clock)
        self.leader = True  # until a leader election says otherwise
        self.armed_phase = False  # the recovery flow reached "arm"
        self.paused = False
        self.suppressed_once: set[str] = set()
        # Schedule id -> the trigger JSON its timer was last armed from (also for a spent
        # one-shot or an exhausted cron, which arm to nothing): how `follow` tells which
        # rows another process changed.
        self.armed: dict[str, str] = {}
        self._takeover: asyncio.Task[None] | None = None

    @classmethod
    def for_rows(cls, store: Store, clock: Clock, *, worker_id: str) -> JobSchedules:
        """The schedules of a host that runs nothing (the CLI): no handlers, no loop, so
        it never arms a timer; it pauses, resumes (`update_in`) and fires by hand
        (`manual_from_row`) through the store."""
        return cls(
            store,
            clock,
            {},
            worker_id=worker_id,
            max_payload_bytes=MAX_PAYLOAD_BYTES,
            now_ms=lambda: int(clock.time() * 1000),
            after_enqueue=lambda jobs, rows: None,
            state=lambda: HostState(None, False, False),
        )

    # -- validation -----------------------------------------------------------------

    def _spec(self, job_type: JobType[Any] | str) -> HandlerSpec[Any]:
        name = job_type.name if isinstance(job_type, JobType) else job_type
        spec = self.handlers.get(name) if isinstance(name, str) else None
        if spec is None:
            raise JobValidationError(
                f"no handler is registered for job type {job_type!r}",
                code="JOB_UNKNOWN_TYPE",
                params={"type": repr(job_type), "known_types": sorted(self.handlers)},
            )
        return spec

    def _payload_json(self, spec: HandlerSpec[Any], payload: Any) -> str:
        _, text = spec.job_type.encode(payload, max_bytes=self.max_payload_bytes)
        return text

    def _trigger_json(self, trigger: Trigger) -> str:
        if not isinstance(trigger, Cron | Interval | Once):
            raise ScheduleError(f"not a trigger: {trigger!r}", code="JOB_SCHEDULE_TRIGGER_INVALID")
        self.sched.validate_trigger(trigger)
        return dumps(trigger_to_json(trigger))

    def _catch_up_json(self, policy: CatchUpPolicy) -> str:
        if not isinstance(policy, SkipMissed | AfterStartup | AllMissed):
            raise ScheduleError(
                "catch_up must be SkipMissed(), AfterStartup(...) or AllMissed(...), "
                f"not {policy!r}",
                code="JOB_SCHEDULE_TRIGGER_INVALID",
            )
        validate_catch_up(policy)
        return dumps(catch_up_to_json(policy))

    @staticmethod
    def _metadata_json(metadata: Mapping[str, Any] | None) -> str:
        return "{}" if metadata is None else encode_metadata(metadata)

    # -- register / update / delete -------------------------------------------------

    def register_in(
        self,
        conn: Any,
        job_type: JobType[Any] | str,
        payload: Any,
        *,
        trigger: Trigger,
        name: str | None,
        catch_up: CatchUpPolicy,
        metadata: Mapping[str, Any] | None,
        enabled: bool,
        overlap: str = "allow",
        jitter: float | None = None,
    ) -> str:
        spec = self._spec(job_type)
        if not isinstance(enabled, bool):
            raise JobValidationError("enabled must be a bool", code="JOB_INVALID_OPTION")
        stored_name = validate_name(name)
        trigger_json = self._trigger_json(trigger)
        catch_up_json = self._catch_up_json(catch_up)
        policy = overlap_policy.validate_overlap(overlap)
        jitter_ms = validate_jitter(jitter)
        payload_json = self._payload_json(spec, payload)
        metadata_json = self._metadata_json(metadata)
        self._check_free(conn, spec.name, stored_name, None)
        sid = str(uuid.uuid4())
        now = self.now_ms()
        row = ScheduleRow(
            sid, spec.name, stored_name, trigger_json, payload_json, catch_up_json,
            1 if enabled else 0, None, None, 0, metadata_json, now, now, policy, jitter_ms,
        )  # fmt: skip
        self.store.insert_schedule(row, conn)
        return sid

    def ensure(
        self,
        job_type: JobType[Any] | str,
        payload: Any,
        *,
        trigger: Trigger,
        name: str | None,
        catch_up: CatchUpPolicy,
        metadata: Mapping[str, Any] | None,
        enabled: bool | None,
        overlap: str = "allow",
        jitter: float | None = None,
    ) -> EnsuredSchedule:
        """Create the schedule `(type, name)`, or bring the existing one's trigger,
        payload, catch-up, metadata, overlap and jitter (and `enabled`, unless None) to
        these where they differ. Validated like `register_in`; the write is
        `Store.ensure_schedule`."""
        spec = self._spec(job_type)
        if enabled is not None and not isinstance(enabled, bool):
            raise JobValidationError("enabled must be a bool or None", code="JOB_INVALID_OPTION")
        stored_name = validate_name(name)
        wanted = {
            "trigger": self._trigger_json(trigger),
            "catch_up": self._catch_up_json(catch_up),
            "payload": self._payload_json(spec, payload),
            "metadata": self._metadata_json(metadata),
        }
        policy = overlap_policy.validate_overlap(overlap)
        jitter_ms = validate_jitter(jitter)
        plain: dict[str, str | int] = {"overlap": policy, "jitter_ms": jitter_ms}
        now = self.now_ms()
        row = ScheduleRow(
            str(uuid.uuid4()), spec.name, stored_name, wanted["trigger"], wanted["payload"],
            wanted["catch_up"], 0 if enabled is False else 1, None, None, 0,
            wanted["metadata"], now, now, policy, jitter_ms,
        )  # fmt: skip

        def changes(existing: ScheduleRow) -> dict[str, Any]:
            # Compared as canonical JSON: a row written by an older version may spell the
            # same value differently, and rewriting an unchanged trigger would re-arm it.
            sets: dict[str, Any] = {
                column: text
                for column, text in wanted.items()
                if _canonical(getattr(existing, column)) != _canonical(text)
            }
            sets.update(
                {
                    column: value
                    for column, value in plain.items()
                    if getattr(existing, column) != value
                }
            )
            if enabled is not None and bool(existing.enabled) != enabled:
                sets.update(_enabled_columns(enabled))
            if sets:
                sets["updated_at"] = now
            return sets

        return self.store.ensure_schedule(row, changes)

    def _check_free(self, conn: Any, type_name: str, name: str, own_id: str | None) -> None:
        row = self.store.get_schedule_by_name(type_name, name, conn)
        if row is not None and row.id != own_id:
            if name == "":
                raise ScheduleError(
                    f"{type_name!r} already has an unnamed (singleton) schedule",
                    code="JOB_SCHEDULE_SINGLETON_EXISTS",
                    params={"type": type_name, "schedule_id": row.id},
                )
            raise ScheduleError(
                f"{type_name!r} already has a schedule named {name!r}",
                code="JOB_SCHEDULE_NAME_CONFLICT",
                params={"type": type_name, "name": name, "schedule_id": row.id},
            )

    def update_in(self, conn: Any, sid: str, patch: Mapping[str, Any]) -> ScheduleSnapshot | None:
        if not findable(sid, "schedule_id"):
            return None
        unknown = set(patch) - _PATCH_KEYS
        if unknown:
            raise JobValidationError(
                f"unknown schedule fields: {', '.join(sorted(unknown))}",
                code="JOB_INVALID_OPTION",
            )
        store = self.store
        row = store.get_schedule(sid, conn)
        if row is None:
            return None
        sets: dict[str, Any] = {}
        if "name" in patch:
            sets["name"] = validate_name(patch["name"])
            self._check_free(conn, row.type, sets["name"], sid)
        if "trigger" in patch:
            sets["trigger"] = self._trigger_json(patch["trigger"])
        if "payload" in patch:
            # Only a new payload needs the handler (to validate it against the type):
            # pausing, renaming or re-timing works from any process.
            sets["payload"] = self._payload_json(self._spec(row.type), patch["payload"])
        if "catch_up" in patch:
            sets["catch_up"] = self._catch_up_json(patch["catch_up"])
        if "metadata" in patch:
            sets["metadata"] = self._metadata_json(patch["metadata"])
        if "overlap" in patch:
            sets["overlap"] = overlap_policy.validate_overlap(patch["overlap"])
        if "jitter" in patch:
            sets["jitter_ms"] = validate_jitter(patch["jitter"])
        if "enabled" in patch:
            if not isinstance(patch["enabled"], bool):
                raise JobValidationError("enabled must be a bool", code="JOB_INVALID_OPTION")
            sets.update(_enabled_columns(patch["enabled"]))
        if sets:
            sets["updated_at"] = self.now_ms()
            store.update_schedule(sid, sets, conn)
        new = store.get_schedule(sid, conn)
        return None if new is None else snapshot_of(new)

    def update(self, sid: str, patch: Mapping[str, Any]) -> ScheduleSnapshot | None:
        """`update_in` in a write transaction of its own; touches no timer."""
        return self.store.write(lambda conn: self.update_in(conn, sid, patch), "update_schedule")

    def get_row(self, sid: str) -> ScheduleRow | None:
        if not findable(sid, "schedule_id"):
            return None
        return self.store.get_schedule(sid)

    def list_rows(self) -> list[ScheduleRow]:
        return self.store.list_schedules()

    def resolve_name(self, job_type: JobType[Any] | str, name: str | None) -> ScheduleRow | None:
        type_name = job_type.name if isinstance(job_type, JobType) else job_type
        if name is not None:
            # Validated like a registration: "" would otherwise find the singleton, whose
            # stored name is the internal "" sentinel.
            stored = validate_name(name)
            return self.store.get_schedule_by_name(type_name, stored)
        rows = self.store.schedules_of_type(type_name)
        if len(rows) > 1:
            raise ScheduleError(
                f"{type_name!r} has {len(rows)} schedules; name the one you mean",
                code="JOB_SCHEDULE_NAME_REQUIRED",
                params={"type": type_name, "known_names": [r.name for r in rows if r.name]},
            )
        return rows[0] if rows else None

    def not_found(self, job_type: JobType[Any] | str, name: str | None) -> ScheduleError:
        type_name = job_type.name if isinstance(job_type, JobType) else job_type
        rows = self.store.schedules_of_type(type_name)
        return ScheduleError(
            f"no schedule of {type_name!r} named {name!r}",
            code="JOB_SCHEDULE_NOT_FOUND_BY_NAME",
            params={
                "type": type_name,
                "name": name,
                "known_names": [r.name for r in rows if r.name],
            },
        )

    # -- timers ---------------------------------------------------------------------

    def may_arm(self) -> bool:
        host = self.state()
        return (
            host.started
            and not host.stopping
            and self.armed_phase
            and self.leader
            and host.loop is not None
        )

    def sync(self, sid: str) -> None:
        """Arm or disarm one schedule from its row; never raises.

        Timers live on the manager's loop: called from another thread (a web app beside
        the worker), the work is handed to that loop and happens shortly after.
        """
        loop = self.state().loop
        if loop is not None and not _on_loop(loop):
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.sync, sid)
            return
        try:
            row = self.get_row(sid)
            if row is None or not row.enabled:
                self.sched.unregister(_timer_id(sid))
                self.suppressed_once.discard(sid)
                self.armed.pop(sid, None)
                return
            if self.may_arm():
                self.arm(row)
        except Exception:
            log.exception("could not arm schedule %s; startup recovery re-arms it", sid)

    def arm(self, row: ScheduleRow) -> None:
        sid = row.id
        timer = _timer_id(sid)
        self.sched.unregister(timer)
        if not row.enabled:
            self.armed.pop(sid, None)
            return
        self.armed[sid] = row.trigger
        snap = snapshot_of(row)
        trigger = snap.trigger
        if (
            isinstance(trigger, Once)
            and row.last_run is not None
            and row.last_run >= to_ms(trigger.at)
        ):
            if row.next_run is not None:
                self._set_next_run(sid, None)
            return

        async def fire(fire_time: datetime) -> None:
            await self._fire(sid, fire_time)

        self.sched.register_schedule(
            timer,
            trigger,
            fire,
            True,
            anchor=snap.created_at,
            fires_so_far=int(row.fire_count) if isinstance(trigger, Cron) else 0,
        )
        nxt = self.sched.get_next_run(timer)
        nxt_ms = None if nxt is None else to_ms(nxt)
        if nxt_ms != row.next_run and not self._overdue_point(row, snap, nxt_ms):
            self._set_next_run(sid, nxt_ms)
        if self.paused and isinstance(trigger, Cron):
            self.sched.pause(timer)

    def _overdue_point(self, row: ScheduleRow, snap: ScheduleSnapshot, nxt_ms: int | None) -> bool:
        """Whether `row.next_run` names a point of this calendar that went by unwritten,
        under `AllMissed`: arming keeps it (the timer's first fire then writes it with its
        own, `_skipped`) rather than store the timer's next fire over it. A catch-up
        leaves `next_run` at the first point after its own now, and arming comes after
        the other schedules' catch-ups and their `on_missed`: a point can go by between.
        (A PostgreSQL chaos run, seed 3, lost one point right after a takeover; its
        database was not kept, and this is the path found that loses a point so.)"""
        first = row.next_run
        if (
            not _makes_up_skipped(snap)
            or first is None
            or nxt_ms is None
            or first >= nxt_ms
            or first > self.now_ms()
        ):
            return False
        on_grid = next_after(snap.trigger, from_ms(first - 1), anchor=snap.created_at)
        return on_grid is not None and to_ms(on_grid) == first

    def _set_next_run(self, sid: str, next_ms: int | None) -> None:
        self.store.set_schedule_next_run(sid, next_ms, self.now_ms())

    async def _fire(self, sid: str, fire_time: datetime) -> None:
        """A natural fire, written again while the database fails (a lost connection, a
        busy or full database): until it is written, its compare-and-set is lost, or the
        next natural fire is near. That fire's compare-and-set takes any earlier
        `next_run`, so giving up then loses this fire only; retrying past it would hold
        the callback, and `protect` would skip the next fire too. A fault shorter than a
        period loses no fire; a one-shot is written again until it is."""
        delay = FIRE_RETRY_FIRST
        failures = 0
        horizon: list[int | None] = [None]  # the next natural fire (ms), once known
        while True:
            try:
                self._fire_once(sid, fire_time, horizon)
            except Exception as exc:
                failures += 1
                error = exc
            else:
                if failures:
                    log.warning(
                        "schedule %s: the fire at %s was written after %d failure(s)",
                        sid,
                        fire_time.isoformat(),
                        failures,
                    )
                return
            nxt = horizon[0]
            if nxt is None:
                armed = self.sched.get_next_run(_timer_id(sid))
                nxt = None if armed is None or armed <= fire_time else to_ms(armed)
            late = nxt is not None and self.now_ms() + 2 * delay * 1000 >= nxt
            if late or not self.may_arm():
                log.error(
                    "schedule %s: the fire at %s could not be written (%d attempt(s)); %s",
                    sid,
                    fire_time.isoformat(),
                    failures,
                    "the next fire is due" if late else "this process no longer arms it",
                    exc_info=error,
                )
                return
            if failures == 1:
                log.warning(
                    "schedule %s: the fire at %s could not be written; retrying",
                    sid,
                    fire_time.isoformat(),
                    exc_info=error,
                )
            await self.clock.sleep(delay)
            delay = min(delay * 2, FIRE_RETRY_MAX)

    def _fire_once(self, sid: str, fire_time: datetime, horizon: list[int | None]) -> None:
        """One try of `_fire`; raises when the database failed. `horizon[0]` gets the
        next natural fire's time once the row is read."""
        if self.paused:
            row = self.get_row(sid)
            if row is not None and isinstance(snapshot_of(row).trigger, Once):
                self.suppressed_once.add(sid)
            return
        row = self.get_row(sid)
        if row is None or not row.enabled:
            return
        snap = snapshot_of(row)
        fire_ms = to_ms(fire_time)
        if isinstance(snap.trigger, Once):
            fire_ms = max(fire_ms, to_ms(snap.trigger.at))
            next_ms: int | None = None
        else:
            nxt = self.sched.get_next_run(_timer_id(sid))
            if nxt is None or to_ms(nxt) <= fire_ms:
                following = next_after(snap.trigger, from_ms(fire_ms), anchor=snap.created_at)
                nxt = following
            next_ms = None if nxt is None else to_ms(nxt)
            limit = snap.trigger.limit if isinstance(snap.trigger, Cron) else None
            horizon[0] = next_ms
            if limit is not None and int(row.fire_count) + 1 >= limit:
                next_ms = None
            elif next_ms is not None and _makes_up_skipped(snap):
                # The timer's next callback comes after every point that passed while
                # this one ran late (a write that waited, a loop held up), and those
                # points would never be written. The row names the first of them, so
                # the next fire (or a takeover's catch-up) makes them up (`_skipped`).
                grid = next_after(snap.trigger, from_ms(fire_ms), anchor=snap.created_at)
                if grid is not None:
                    next_ms = min(next_ms, to_ms(grid))
        due = to_ms(fire_time)
        offset = jitter_offset_ms(sid, due, int(row.jitter_ms))
        skipped = self._skipped(row, snap, due)
        policy = snap.overlap
        # Compare against the fire's own time, never the row's current value: a stale
        # second leader firing the same T must lose.
        self._enqueue_fire(
            row,
            key=f"schedule:{sid}:{due}",
            expected_next=due,
            last_run=fire_ms,
            next_run=next_ms,
            run_at=from_ms(due + offset) if offset else None,
            decide=None
            if policy == "allow"
            else lambda live: _logged(sid, due, policy, overlap_policy.decide(policy, live)),
            raise_unwritten=True,
            missed=skipped,
        )

    def _skipped(self, row: ScheduleRow, snap: ScheduleSnapshot, due: int) -> list[int]:
        """Under `AllMissed`, the points of the calendar before the fire at `due` that
        nobody wrote: the row's `next_run` still names one (a fire whose write failed past
        its retries, a fire `protect` skipped while the previous callback still ran).
        They are written with this fire, under their natural keys, if `next_run` is still
        the value they were computed from (`Store.fire_schedule`'s `missed_from`); the
        newest `max` of them. Not for a limited cron (`_makes_up_skipped`)."""
        policy = snap.catch_up
        first = row.next_run
        if not isinstance(policy, AllMissed) or not _makes_up_skipped(snap):
            return []
        if first is None or first >= due:
            return []
        return _missed_fires(snap.trigger, first, from_ms(due - 1), 0, policy.max, snap)

    def _enqueue_fire(
        self,
        row: ScheduleRow,
        *,
        key: str | None,
        expected_next: int | None,
        last_run: int,
        next_run: int | None,
        delay: float | None = None,
        catch_up_next: int | None = None,
        run_at: datetime | None = None,
        decide: Decide | None = None,
        make_up: Sequence[int] = (),
        raise_unwritten: bool = False,
        missed: Sequence[int] = (),
    ) -> bool:
        """One transaction: the calendar compare-and-set and the job row (or, with
        `make_up`, one job per fire time listed, under its natural key). True if the
        compare-and-set won. A failed write is logged and False, or, with
        `raise_unwritten`, raised (nothing was written: the caller may try again).
        `missed`: a natural fire's skipped points (`_skipped`), written before its job
        when the row's `next_run` is still the first of them."""
        sid, type_name = row.id, row.type
        jobs: list[NewJob] = []
        made_up: list[NewJob] = []
        try:
            spec = self._spec(type_name)
            made_up = [self._fire_job(row, spec, fire) for fire in missed]
            if make_up:
                jobs = [self._fire_job(row, spec, fire) for fire in make_up]
            else:
                opts = EnqueueOptions(
                    idempotency_key=key, schedule_id=sid, delay=delay, run_at=run_at
                )
                jobs = [self._build(row, spec, opts)]
        except Exception:
            log.exception("schedule %s: its job could not be built; the fire is consumed", sid)
            jobs = []
        try:
            answer = self.store.fire_schedule(
                sid,
                jobs or None,
                expected_next=expected_next,
                last_run=last_run,
                next_run=next_run,
                catch_up_next=catch_up_next,
                now_ms=self.now_ms(),
                decide=decide,
                missed=made_up,
                missed_from=row.next_run if made_up else None,
            )
        except Exception:
            if raise_unwritten:
                raise
            log.exception("schedule %s: the fire could not be written", sid)
            return False
        if answer is None:
            return False
        if made_up and len(answer) >= len(made_up) and _holds(answer, made_up):
            log.warning(
                "schedule %s: %d fire(s) from %s that were never written are made up (AllMissed)",
                sid,
                len(made_up),
                from_ms(missed[0]).isoformat(),
            )
            self.after_enqueue(made_up, answer[: len(made_up)])
            answer = answer[len(made_up) :]
        # [] with jobs: the overlap policy skipped the fire. A held-back job is handed
        # over as built (pending): its queue is kicked for nothing, which costs a look.
        if answer and len(answer) == len(jobs):
            self.after_enqueue(jobs, answer)
        return True

    def _build(
        self, row: ScheduleRow, spec: HandlerSpec[Any] | None, opts: EnqueueOptions
    ) -> NewJob:
        """The job a fire of `row` writes: by the type's handler when this host has it,
        else (the CLI) from the row, with the handler's choices copied from the
        schedule's newest job (`_row_options`)."""
        if spec is not None:
            return prepare(
                spec.job_type,
                spec,
                json.loads(row.payload),
                opts,
                now_ms=self.now_ms(),
                enqueued_by=self.worker_id,
                max_payload_bytes=self.max_payload_bytes,
            )
        self._row_options(row, opts)
        return prepare(
            JobType(row.type, object),
            None,
            json.loads(row.payload),
            opts,
            now_ms=self.now_ms(),
            enqueued_by=self.worker_id,
            # Accepted when it was stored, perhaps under a larger limit than this host's.
            max_payload_bytes=max(self.max_payload_bytes, len(row.payload.encode())),
        )

    def _fire_job(self, row: ScheduleRow, spec: HandlerSpec[Any] | None, fire_ms: int) -> NewJob:
        """A make-up job (catch-up or backfill) for the fire at `fire_ms`: its natural key,
        due at the fire's jittered time (already past: it runs at once, oldest first)."""
        offset = jitter_offset_ms(row.id, fire_ms, int(row.jitter_ms))
        opts = EnqueueOptions(
            idempotency_key=f"schedule:{row.id}:{fire_ms}",
            schedule_id=row.id,
            run_at=from_ms(fire_ms + offset),
        )
        return self._build(row, spec, opts)

    def _row_options(self, row: ScheduleRow, opts: EnqueueOptions) -> None:
        newest = self.store.list(JobFilter(schedule_id=row.id), limit=1, offset=0)
        if newest:
            made = newest[0]
            opts.queue = made[L.C_QUEUE]
            opts.priority = made[L.C_PRIORITY]
            opts.max_attempts = made[L.C_MAX_ATTEMPTS]
            timeout_ms = made[L.C_TIMEOUT]
            opts.timeout = None if timeout_ms is None else timeout_ms / 1000

    # -- backfill -------------------------------------------------------------------

    def backfill(self, sid: str, start: datetime, end: datetime) -> int:
        """Write every fire of the schedule in `[start, end)` not yet written; how many
        it wrote (module docstring). Raises for bad input, writing nothing."""
        start_ms, end_ms = _range_ms(start, "start"), _range_ms(end, "end")
        now = self.now_ms()
        if start_ms >= end_ms:
            raise JobValidationError(
                "backfill needs start < end",
                code="JOB_INVALID_OPTION",
                params={"start": str(start), "end": str(end)},
            )
        # The clock's millisecond is truncated, `end_ms` rounded: an `end` taken from
        # the wall clock a moment ago can round past it. Only an end in a later
        # millisecond than now is the future.
        if (end - _EPOCH) // _ONE_MS > now:
            raise JobValidationError(
                "backfill writes past fires only: end must not be after now (the natural "
                "calendar owns the future)",
                code="JOB_INVALID_OPTION",
                params={"end": str(end), "now": str(from_ms(now))},
            )
        row = self.get_row(sid) if findable(sid, "schedule_id") else None
        if row is None:
            raise _no_schedule(sid)
        snap = snapshot_of(row)
        if isinstance(snap.trigger, Once):
            raise JobValidationError(
                "a one-shot schedule has no range of fires to backfill; use "
                "trigger_job_schedule_now_by_id",
                code="JOB_INVALID_OPTION",
                params={"schedule_id": sid},
            )
        spec = self.handlers.get(row.type)

        def plan(current: ScheduleRow) -> list[NewJob]:
            trigger = snapshot_of(current).trigger
            if isinstance(trigger, Once):  # changed since the check above
                raise JobValidationError(
                    "a one-shot schedule has no range of fires to backfill",
                    code="JOB_INVALID_OPTION",
                    params={"schedule_id": sid},
                )
            fires, total = fires_between(
                trigger,
                from_ms(start_ms),
                from_ms(end_ms),
                anchor=from_ms(current.created_at),
                newest=MAX_CATCH_UP_FIRES + 1,
            )
            if total > MAX_CATCH_UP_FIRES:
                raise JobValidationError(
                    f"[start, end) holds {total} fires; one backfill writes at most "
                    f"{MAX_CATCH_UP_FIRES}: split the range",
                    code="JOB_INVALID_OPTION",
                    params={"fires": total, "max": MAX_CATCH_UP_FIRES},
                )
            # From next_run on, fires are the calendar's own (a natural fire, or the
            # catch-up of an overdue row): never written here, so never twice.
            limit = current.next_run
            return [
                self._fire_job(current, spec, to_ms(fire))
                for fire in fires
                if limit is None or to_ms(fire) < limit
            ]

        written = self.store.backfill_schedule(sid, plan)
        if written is None:
            raise _no_schedule(sid)
        jobs, rows = written
        if rows:
            self.after_enqueue(jobs, rows)
        return sum(
            1
            for job, stored in zip(jobs, rows, strict=True)
            if was_inserted(fresh_row(job), stored)
        )

    async def manual(self, row: ScheduleRow) -> bool:
        spec = self._spec(row.type)
        job = prepare(
            spec.job_type,
            spec,
            json.loads(row.payload),
            EnqueueOptions(schedule_id=row.id),
            now_ms=self.now_ms(),
            enqueued_by=self.worker_id,
            max_payload_bytes=self.max_payload_bytes,
        )
        return self._manual_write(row, job) is not None

    def manual_from_row(self, row: ScheduleRow) -> str | None:
        """A manual fire by a host without the type's handler (the CLI); the new job's id,
        or None when the schedule is gone.

        The row gives the type and the payload (validated when it was stored). The
        handler's choices (queue, priority, attempts, timeout) are copied from the
        schedule's newest job, which that handler made for the same schedule; a schedule
        without jobs gets the type's defaults, as `enqueue` of a type without a handler.
        """
        job = self._build(row, None, EnqueueOptions(schedule_id=row.id))
        written = self._manual_write(row, job)
        # The stored row's id: SQLite may have reissued the job under a fresh one.
        return None if written is None else str(written[0][L.C_ID])

    def _manual_write(self, row: ScheduleRow, job: NewJob) -> list[JobRow] | None:
        sid = row.id
        trigger = snapshot_of(row).trigger
        now = self.now_ms()
        consume = isinstance(trigger, Once) and now >= to_ms(trigger.at)
        answer = self.store.manual_fire(sid, job, consume=consume, now_ms=now)
        if answer is None:
            return None
        self.after_enqueue([job], answer)
        if consume:
            self.sync(sid)  # the one-shot is spent now: its timer goes
        return answer

    # -- lifecycle hooks ------------------------------------------------------------

    async def catch_up_and_arm(self) -> None:
        """Recovery step 3. Only the leader catches up and arms (docs/design/schedules.md):
        a follower would count a fire the live leader is about to make as missed. A
        follower does both when it takes over (`on_leadership`). When the rows cannot be
        read, the step ends anyway (dispatch, the next step, must not wait for it) and
        `_take_over` tries again in the background: before, nothing was armed until a
        restart."""
        try:
            if self.leader:
                await self._catch_up_all()
            self.armed_phase = True
            if self.leader:
                self.arm_all()
        except Exception:
            log.warning("catching up or arming the schedules failed; retrying", exc_info=True)
            self.armed_phase = True
            loop = self.state().loop
            if self.may_arm() and loop is not None:
                self._takeover = loop.create_task(self._take_over(FIRE_RETRY_FIRST))

    async def _catch_up_all(self) -> None:
        """Catch every schedule up; if one's write failed, the others are still caught
        up and then this raises the first failure, so nothing is armed (arming would
        store the timer's next fire over the overdue `next_run`, and the missed points
        with it) and the caller tries the whole step again (`_take_over`). A schedule
        already caught up is not caught up twice: its `next_run` is no longer overdue."""
        rows = [r for r in self.list_rows() if r.enabled and r.type in self.handlers]
        failed: Exception | None = None
        for row in rows:
            # One schedule's catch-up (on_missed + make-up job) is atomic; stop and a
            # lost leadership are honoured between schedules.
            if self.state().stopping or not self.leader:
                return
            try:
                await self._catch_up(row)
            except Exception as exc:
                log.warning("catch-up of schedule %s failed; retrying", row.id, exc_info=True)
                failed = failed or exc
        if failed is not None:
            raise failed

    async def _catch_up(self, row: ScheduleRow) -> None:
        """Catch `row` up. Its compare-and-set expects the `next_run` it read; when that
        loses, another process moved `next_run` meanwhile (an old leader's late fire
        landing as this one takes over). If the new value is still overdue, the points
        from it on are missed all the same: read the row again and catch up from there,
        up to CATCH_UP_TRIES times. Before, the step ended there, and arming then
        stored the timer's next fire over it, so `AllMissed` lost those points
        (bench/chaos.py, docs/reliability.md)."""
        for _ in range(CATCH_UP_TRIES):
            if await self._catch_up_once(row):
                return
            fresh = self.get_row(row.id)
            if fresh is None or not fresh.enabled or fresh.next_run == row.next_run:
                return  # gone, disabled, or not moved: nothing to catch up from
            row = fresh
        log.warning("schedule %s: catch-up kept losing its compare-and-set; left", row.id)

    async def _catch_up_once(self, row: ScheduleRow) -> bool:
        """One catch-up of `row` as read; False when its compare-and-set did not win,
        True when it won or there was nothing to do. A failed write raises."""
        snap = snapshot_of(row)
        if isinstance(snap.trigger, Once) or row.next_run is None:
            return True
        now_ms = self.now_ms()
        if row.next_run > now_ms:
            return True
        now = from_ms(now_ms)
        first_missed = from_ms(row.next_run)
        count, _ = count_fires_between(
            snap.trigger, first_missed - timedelta(milliseconds=1), now, anchor=snap.created_at
        )
        count = max(count, 1)
        if isinstance(snap.trigger, Cron) and snap.trigger.limit is not None:
            # A limited cron could only have fired what was left of its quota.
            count = max(1, min(count, snap.trigger.limit - int(row.fire_count)))
        following = next_after(snap.trigger, now, anchor=snap.created_at)
        following_ms = None if following is None else to_ms(following)
        policy = snap.catch_up
        if isinstance(policy, AfterStartup):
            won = self._enqueue_fire(
                row,
                key=f"schedule:{row.id}:catchup:{row.next_run}",
                expected_next=row.next_run,
                last_run=now_ms,
                next_run=following_ms,
                delay=policy.minutes * 60.0,
                catch_up_next=following_ms,
                raise_unwritten=True,
            )
        elif isinstance(policy, AllMissed):
            won = self._enqueue_fire(
                row,
                key=None,
                expected_next=row.next_run,
                last_run=now_ms,
                next_run=following_ms,
                catch_up_next=following_ms,
                make_up=_missed_fires(snap.trigger, row.next_run, now, count, policy.max, snap),
                raise_unwritten=True,
            )
        else:
            won = self._cas_only(row.id, row.next_run, following_ms)
        if not won:
            return False
        spec = self.handlers.get(row.type)
        if spec is not None and spec.on_missed is not None:
            # last_fire_at is when it last really fired (the reference's lastRun), not
            # the last missed point: that one follows from the trigger and the count.
            event = MissedEvent(
                schedule_id=row.id,
                type=row.type,
                missed_count=count,
                last_fire_at=None if row.last_run is None else from_ms(row.last_run),
            )
            try:
                result = spec.on_missed(event)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("on_missed of %s raised; ignored", row.type)
        return True

    def _cas_only(self, sid: str, expected: int, following: int | None) -> bool:
        return self.store.catch_up_schedule(sid, expected, following, self.now_ms())

    def arm_all(self) -> None:
        for row in self.list_rows():
            if row.enabled and row.type in self.handlers:
                try:
                    self.arm(row)
                except Exception:
                    log.exception("could not arm schedule %s", row.id)

    def on_leadership(self, leader: bool) -> None:
        if leader == self.leader:
            return
        self.leader = leader
        loop = self.state().loop
        running = self._takeover is not None and not self._takeover.done()
        if leader and self.may_arm() and loop is not None and not running:
            self._takeover = loop.create_task(self._take_over())
        elif not leader:
            for timer in self.sched.ids():
                self.sched.unregister(timer)
            self.armed.clear()

    def follow(self) -> None:
        """Leader only: re-arm or disarm the schedules other processes changed.

        Called when another connection committed. Re-arms a row whose trigger differs
        from the one its timer was armed from, arms new rows, disarms disabled and
        deleted ones, and re-arms an enabled row whose `next_run` another process
        cleared (a pause and resume there) while its timer still runs here: its fires
        would otherwise all lose the compare-and-set. Deferred while paused (arming
        writes `next_run`); `on_release` catches up.
        """
        if self.paused or not self.may_arm():
            return
        if self._takeover is not None and not self._takeover.done():
            return  # arming now would move next_run past the points it is catching up
        # A failed read raises: the watcher applies the change again at its next pass.
        rows = {r.id: r for r in self.list_rows() if r.type in self.handlers}
        for sid in list(self.armed):
            row = rows.get(sid)
            if row is None or not row.enabled:
                self.sched.unregister(_timer_id(sid))
                self.suppressed_once.discard(sid)
                del self.armed[sid]
        for sid, row in rows.items():
            if not row.enabled:
                continue
            stale = self.armed.get(sid) != row.trigger
            lost = row.next_run is None and self.sched.get_next_run(_timer_id(sid)) is not None
            if stale or lost:
                try:
                    self.arm(row)
                except Exception:
                    log.exception("could not arm schedule %s", sid)

    def _crons(self) -> list[str]:
        """Timer ids of the armed crons."""
        return [
            _timer_id(sid)
            for sid, trigger in self.armed.items()
            if json.loads(trigger).get("kind") == "cron" and self.sched.has(_timer_id(sid))
        ]

    def on_pause(self) -> None:
        self.paused = True
        # Only crons pause in the scheduler (so their limit survives); interval fires
        # keep ticking as no-ops, which keeps their chain and grid.
        for timer in self._crons():
            self.sched.pause(timer)

    def on_release(self) -> None:
        self.paused = False
        suppressed, self.suppressed_once = self.suppressed_once, set()
        for timer in self._crons():
            self.sched.resume(timer)
        if not self.may_arm():
            return
        try:
            self.follow()
        except Exception:
            log.warning("could not read schedules; the next change retries", exc_info=True)
        for sid in suppressed:
            row = self.get_row(sid)
            if row is not None and row.enabled:
                self.arm(row)
        for timer in self.sched.ids():
            sid = timer.removeprefix("schedule:")
            row = self.get_row(sid)
            nxt = self.sched.get_next_run(timer)
            nxt_ms = None if nxt is None else to_ms(nxt)
            if row is not None and nxt_ms != row.next_run:
                self._set_next_run(sid, nxt_ms)

    async def _take_over(self, first_delay: float = 0.0) -> None:
        """Leadership moved here mid-session (the old leader died or stopped), or the
        startup step failed: catch up on what fell due while nobody led, then arm, in the
        startup order and for the same reason. Catch-up writes, so a paused manager only
        arms. Tried again while the rows cannot be read (after 0.1 s, doubling to 5 s),
        until done, the leadership moves or the manager stops (`may_arm`); before, one
        failed read left every schedule unarmed until a restart. So is a schedule's
        failed catch-up write (`_catch_up_all`); before, it was logged, the schedule
        armed over its overdue `next_run`, and its missed fires never written."""
        delay, failures = first_delay, 0
        while True:
            if delay:
                await self.clock.sleep(delay)
            if not (self.leader and self.may_arm()):
                return
            try:
                if not self.paused:
                    await self._catch_up_all()
                if self.leader and self.may_arm():
                    self.arm_all()
            except Exception:
                failures += 1
                if failures == 1:
                    log.warning("taking over the schedules failed; retrying", exc_info=True)
                else:
                    log.debug("taking over the schedules failed again", exc_info=True)
            else:
                if failures:
                    log.warning("schedules armed after %d failed attempt(s)", failures)
                return
            delay = min(max(delay * 2, FIRE_RETRY_FIRST), FIRE_RETRY_MAX)

    async def on_stop(self) -> None:
        takeover = self._takeover
        if takeover is not None and not takeover.done():
            takeover.cancel()
            try:
                await takeover
            except (asyncio.CancelledError, Exception):
                pass
        await self.sched.stop()


def _missed_fires(
    trigger: Trigger, first_ms: int, now: datetime, count: int, most: int, snap: ScheduleSnapshot
) -> list[int]:
    """The fire times `AllMissed(max=most)` makes up, oldest first: the newest `most` of
    the fires in `[first_ms, now]`, or, for a limited cron, of the first `count` of them
    (what its quota had left)."""
    if isinstance(trigger, Cron) and trigger.limit is not None:
        out: list[int] = []
        at: datetime | None = from_ms(first_ms - 1)
        for _ in range(count):
            at = None if at is None else next_after(trigger, at, anchor=snap.created_at)
            if at is None or at > now:
                break
            out.append(to_ms(at))
        return out[-most:]
    fires, _ = fires_between(
        trigger,
        from_ms(first_ms),
        now + timedelta(milliseconds=1),
        anchor=snap.created_at,
        newest=most,
    )
    return [to_ms(f) for f in fires]


def _makes_up_skipped(snap: ScheduleSnapshot) -> bool:
    """Whether points of this schedule's calendar that went by unwritten while a leader
    ran are made up (`_skipped`, `_overdue_point`): under `AllMissed`, for an interval
    or an unlimited cron. Not a one-shot (it has no points to skip), nor a limited cron,
    whose timer counted each skipped callback toward the limit."""
    trigger = snap.trigger
    if not isinstance(snap.catch_up, AllMissed) or isinstance(trigger, Once):
        return False
    return not (isinstance(trigger, Cron) and trigger.limit is not None)


def _holds(rows: Sequence[JobRow], jobs: Sequence[NewJob]) -> bool:
    """Whether `rows` begin with the rows of `jobs` (by their keys): the make-ups of a
    fire were written, not left out because `next_run` had moved."""
    return all(row[L.C_KEY] == job.idempotency_key for row, job in zip(rows, jobs, strict=False))


def _logged(sid: str, fire_ms: int, policy: str, verdict: OverlapDecision) -> OverlapDecision:
    if verdict == "skip":
        log.info(
            "schedule %s: the fire at %s is skipped (overlap=%s: its previous job has not ended)",
            sid,
            from_ms(fire_ms).isoformat(),
            policy,
            extra={"schedule_id": sid, "fire_ms": fire_ms, "overlap": policy},
        )
    return verdict


# Catch-ups of one schedule in a row whose compare-and-set lost to a moving `next_run`.
CATCH_UP_TRIES = 5
# A natural fire whose write failed is tried again after these delays, doubling (`_fire`).
FIRE_RETRY_FIRST = 0.1
FIRE_RETRY_MAX = 5.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def _range_ms(value: object, what: str) -> int:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise JobValidationError(
            f"backfill {what} must be an aware datetime, not {value!r}",
            code="JOB_INVALID_OPTION",
            params={what: repr(value)[:200]},
        )
    try:
        at = to_ms(value)
    except (OverflowError, ValueError, OSError):
        at = -1
    if not ms_in_range(at):
        raise JobValidationError(
            f"backfill {what} must be between 1970 and the end of year 9999 (UTC)",
            code="JOB_INVALID_OPTION",
            params={what: str(value)},
        )
    return at


def _no_schedule(sid: str) -> ScheduleError:
    return ScheduleError(
        f"no schedule with id {sid!r}",
        code="JOB_SCHEDULE_NOT_FOUND",
        params={"schedule_id": repr(sid)[:200]},
    )


def _enabled_columns(enabled: bool) -> dict[str, Any]:
    """The columns a pause or resume sets: a paused schedule has no next automatic fire."""
    return {"enabled": 1} if enabled else {"enabled": 0, "next_run": None}


def _canonical(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text  # not JSON (a damaged row): compared as it is, so it gets rewritten


def _timer_id(sid: str) -> str:
    return f"schedule:{sid}"


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
