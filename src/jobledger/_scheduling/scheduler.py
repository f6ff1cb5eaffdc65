"""SchedulerService: in-memory timers that call back, and nothing more.

Invariants (docs/design/scheduling.md has the long form):

* Layering: this module knows nothing of jobs, rows or handlers. The job system arms its
  persistent schedules *through* it; nothing here persists or reads a database.
* One entry per id. Registering an id again stops the old timer first; a timer that no
  longer owns its id never fires again, even if it was mid-sleep or mid-callback.
* Timers are asyncio tasks on the loop that registered them, sleeping on the injected
  `Clock` (so `FakeClock` drives them) until a wall-clock due time. Every callback runs
  in its own task; its exceptions are logged and the schedule carries on. `stop()` and
  `unregister()` end timers, never a callback that is already running.
* `protect=True` (cron, interval): a natural fire is skipped while any callback of the
  same entry (natural or `trigger_now`) is still running. A once fire is never skipped.
* Interval: fires on the grid `anchor + k*seconds`, always the next point strictly in
  the future; points that elapsed (late wake-up, slow callback) are skipped, not made
  up. The next timer is installed only after the callback settles.
* Once: the entry leaves the map *before* its callback runs, so the callback may
  register the same id again; an `at` already past fires at once.
* Cron `limit`: only fires that actually ran count (plus `fires_so_far`, the count the
  persistent layer carries across restarts). Fires skipped while paused or protected do
  not count, so a limit survives a pause; missed fires are not made up on resume.
  `trigger_now` is an extra fire: never counted, the natural calendar unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeAlias

from jobledger._scheduling.triggers import (
    Cron,
    Interval,
    Once,
    Trigger,
    next_after,
)
from jobledger._scheduling.triggers import (
    validate_trigger as _validate_trigger,
)
from jobledger.clock import Clock, SystemClock

__all__ = ["ScheduleCallback", "SchedulerService"]

logger = logging.getLogger("jobledger.scheduler")

ScheduleCallback: TypeAlias = Callable[[], object] | Callable[[datetime], object]

# A wake-up this close to the due time counts as on time (float wall vs monotonic drift).
_ON_TIME = 0.001
# Sleep in slices so a wall clock that jumps (suspend, NTP step) is noticed within a minute.
_MAX_SLEEP = 60.0


@dataclass(eq=False)
class _Entry:
    id: str
    trigger: Trigger
    callback: Callable[..., object]
    pass_fire_time: bool
    protect: bool
    anchor: datetime
    fires: int
    next_run: datetime | None
    paused: bool = False
    running: int = 0
    in_callback: bool = False
    last_due: datetime | None = None
    timer: asyncio.Task[None] | None = field(default=None, repr=False)


def _wants_fire_time(callback: Callable[..., object]) -> bool:
    try:
        sig = inspect.signature(callback)
    except (TypeError, ValueError):
        return False  # no introspectable signature (some builtins): call it bare
    try:
        sig.bind(None)
        return True
    except TypeError:
        pass
    try:
        sig.bind()
        return False
    except TypeError:
        raise TypeError("a schedule callback takes no arguments or one (the fire time)") from None


class SchedulerService:
    """In-memory cron / interval / once timers on the running asyncio loop."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._entries: dict[str, _Entry] = {}
        # Callback tasks are kept alive here; the loop only holds weak references.
        self._callbacks: set[asyncio.Task[None]] = set()

    # --- registration -------------------------------------------------------------------

    def validate_trigger(self, trigger: Trigger) -> None:
        """Raise `ScheduleError(code="JOB_SCHEDULE_TRIGGER_INVALID")` for an unusable trigger."""
        _validate_trigger(trigger, now=self._clock.now())

    def register_schedule(
        self,
        id: str,
        trigger: Trigger,
        callback: ScheduleCallback,
        protect: bool = True,
        *,
        anchor: datetime | None = None,
        fires_so_far: int = 0,
    ) -> None:
        """Arm `trigger` under `id`, replacing (and stopping) any earlier registration.

        Must be called on the thread of a running asyncio loop; the timer runs there.
        A cron whose `limit` is already used up by `fires_so_far` is not armed.
        """
        self.validate_trigger(trigger)
        loop = asyncio.get_running_loop()
        pass_fire_time = _wants_fire_time(callback)
        self.unregister(id)
        now = self._clock.now()
        entry = _Entry(
            id=id,
            trigger=trigger,
            callback=callback,
            pass_fire_time=pass_fire_time,
            protect=protect,
            anchor=anchor if anchor is not None else now,
            fires=fires_so_far,
            next_run=None,
        )
        if self._exhausted(entry):
            logger.debug("schedule %r: cron limit already reached, not armed", id)
            return
        entry.next_run = self._next_natural(entry, now)
        if entry.next_run is None:
            return
        self._entries[id] = entry
        entry.timer = loop.create_task(self._run_timer(entry), name=f"jobledger-timer:{id}")

    def unregister(self, id: str) -> bool:
        """Stop and forget `id`. Idempotent: False when nothing was registered."""
        entry = self._entries.pop(id, None)
        if entry is None:
            return False
        self._cancel_timer(entry)
        return True

    async def stop(self) -> None:
        """Dispose every timer (running callbacks finish on their own). Idempotent."""
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            self._cancel_timer(entry)
        loop = asyncio.get_running_loop()
        current = asyncio.current_task()
        timers = [
            e.timer
            for e in entries
            if e.timer is not None and e.timer is not current and e.timer.get_loop() is loop
        ]
        if timers:
            await asyncio.gather(*timers, return_exceptions=True)

    # --- control ------------------------------------------------------------------------

    def pause(self, id: str) -> bool:
        """Skip a cron's natural fires (uncounted) until `resume`. False for non-crons."""
        return self._set_paused(id, True)

    def resume(self, id: str) -> bool:
        """Let a paused cron fire again from its next calendar point. False for non-crons."""
        return self._set_paused(id, False)

    async def trigger_now(self, id: str) -> bool:
        """Run the callback now as an extra fire (fire time = now) and await it.

        Not counted toward a cron limit, ignores pause and protect, leaves the calendar
        alone. True once the callback has run (even if it raised, which is logged).
        """
        entry = self._entries.get(id)
        if entry is None:
            return False
        await self._spawn(entry, self._clock.now())
        return True

    # --- reads --------------------------------------------------------------------------

    def get_next_run(self, id: str) -> datetime | None:
        """The next natural fire (a paused cron reports its calendar anyway); None if unknown.

        While an interval callback runs, this is the predicted next grid point.
        """
        entry = self._entries.get(id)
        if entry is None:
            return None
        if entry.in_callback:
            return self._next_natural(entry, self._after(entry))
        return entry.next_run

    def has(self, id: str) -> bool:
        return id in self._entries

    def fire_count(self, id: str) -> int:
        """Natural fires that ran, including `fires_so_far`; 0 for an unknown id."""
        entry = self._entries.get(id)
        return entry.fires if entry is not None else 0

    def ids(self) -> list[str]:
        return list(self._entries)

    # --- internals ----------------------------------------------------------------------

    def _owns(self, entry: _Entry) -> bool:
        return self._entries.get(entry.id) is entry

    def _drop(self, entry: _Entry) -> None:
        if self._owns(entry):
            del self._entries[entry.id]
        entry.next_run = None

    @staticmethod
    def _cancel_timer(entry: _Entry) -> None:
        if entry.timer is not None and entry.timer is not asyncio.current_task():
            entry.timer.cancel()

    @staticmethod
    def _exhausted(entry: _Entry) -> bool:
        trigger = entry.trigger
        return (
            isinstance(trigger, Cron)
            and trigger.limit is not None
            and (entry.fires >= trigger.limit)
        )

    def _after(self, entry: _Entry) -> datetime:
        now = self._clock.now()
        return now if entry.last_due is None else max(now, entry.last_due)

    def _next_natural(self, entry: _Entry, after: datetime) -> datetime | None:
        trigger = entry.trigger
        if isinstance(trigger, Once):
            # Past or not, a once that has not fired is due: "late" means "now".
            return trigger.at.astimezone(UTC)
        return next_after(trigger, after, anchor=entry.anchor)

    def _set_paused(self, id: str, paused: bool) -> bool:
        entry = self._entries.get(id)
        if entry is None:
            logger.debug("schedule %r: pause/resume of an unknown id ignored", id)
            return False
        if not isinstance(entry.trigger, Cron):
            logger.warning("schedule %r: only cron schedules can be paused or resumed", id)
            return False
        entry.paused = paused
        return True

    async def _sleep_until(self, due: datetime) -> None:
        while True:
            remaining = due.timestamp() - self._clock.time()
            if remaining <= _ON_TIME:
                return
            await self._clock.sleep(min(remaining, _MAX_SLEEP))

    def _spawn(self, entry: _Entry, fire_time: datetime) -> asyncio.Task[None]:
        entry.running += 1
        task = asyncio.get_running_loop().create_task(self._call(entry, fire_time))
        self._callbacks.add(task)
        task.add_done_callback(self._callbacks.discard)
        return task

    async def _call(self, entry: _Entry, fire_time: datetime) -> None:
        try:
            result = entry.callback(fire_time) if entry.pass_fire_time else entry.callback()
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("schedule %r: callback failed (schedule continues)", entry.id)
        finally:
            entry.running -= 1

    async def _run_timer(self, entry: _Entry) -> None:
        try:
            while entry.next_run is not None:
                due = entry.next_run
                await self._sleep_until(due)
                if not self._owns(entry):
                    return
                entry.last_due = due
                await self._fire(entry, due)
                if not self._owns(entry):
                    return
                entry.next_run = self._next_natural(entry, self._after(entry))
            self._drop(entry)
        except Exception:
            # A bug here must not kill the loop silently; the entry is gone either way.
            logger.exception("schedule %r: timer failed, schedule dropped", entry.id)
            self._drop(entry)

    async def _fire(self, entry: _Entry, due: datetime) -> None:
        trigger = entry.trigger
        if isinstance(trigger, Once):
            self._drop(entry)  # before the callback, which may register this id again
            entry.fires += 1
            self._spawn(entry, due)
            return
        if isinstance(trigger, Cron) and entry.paused:
            return
        if entry.protect and entry.running:
            logger.debug("schedule %r: fire at %s skipped, previous still running", entry.id, due)
            return
        entry.fires += 1
        if self._exhausted(entry):
            self._drop(entry)  # before the callback, which may register this id again
        task = self._spawn(entry, due)
        if isinstance(trigger, Interval):
            entry.in_callback = True
            try:
                # wait(), not await: a cancelled timer must not cancel the callback with it.
                await asyncio.wait({task})
            finally:
                entry.in_callback = False
