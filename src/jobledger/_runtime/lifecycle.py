"""Start, recovery, pause/drain and stop of one `JobManager` (docs/design/recovery.md).

Services, in dependency order:
    workers    registers this manager in `workers`, heartbeats, holds/renews the leader
               lease; as leader it rescues dead workers' rows and runs GC
    jobs       the quiet window, the startup recovery flow, the bounded shutdown drain

Startup: `start()` returns at once and dispatches every known queue of a handled type:
every row not owned by a dead worker is work at once. Until the reset step
has run, claims skip the rows that the workers found dead at start enqueued
(`Engine.exclude_owners`), since the sweep may cancel them by strategy.
After `startup_delay` the recovery flow runs:
    1. reset  — every dead worker's rows, by strategy (cancel-requested first; orphans
                cancelled); rows this process runs are never touched (they are not dead)
    2. resurrect queues — every known queue of a type this process handles
    3. catch-up, then arm schedules (`schedules` hook, filled by the scheduling layer)
    4. dispatch all
`recovery_done` resolves when the flow ends. A stop inside the window means the flow
never runs. A pause defers the flow: it runs from where it stopped on release.

Shutdown: claims stop; running handlers get `shutdown_grace` seconds to end
by themselves; then their tokens fire ("shutdown") and they get `SETTLE_AFTER_ABORT` more.
An interrupted retry/singleton job is written back to `pending` with its attempt unspent
(the engine's `requeue` outcome), an abandon job `cancelled`.

Pause (refcounted holds, no resume): blocks claims (checked again under the queue lock),
promotions, GC/rescue ticks, schedule fires and new recovery steps; enqueue, cancel,
schedule changes and manual triggers stay allowed, and nothing raises because of a
pause. When the last hold is disposed, release compensation runs: the deferred recovery
flow (if any), then promote due rows, kick every queue, re-arm suppressed one-shot fires
exactly once, resume crons and refresh `next_run` (the last three via the hook).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobledger._core.recovery import dead_workers, plan_recovery
from jobledger._runtime.leader import LeaderLease
from jobledger._runtime.promoter import Promoter
from jobledger._runtime.queues import QueueBook
from jobledger._runtime.services import Runtime, Service
from jobledger._runtime.watcher import Watcher
from jobledger._scheduling.hooks import ScheduleHooks
from jobledger._storage.interface import Store
from jobledger._storage.records import WorkerRow
from jobledger._storage.rows import error_to_json
from jobledger._types import DrainVerdict, JobErrorInfo, RecoveryStrategy
from jobledger.clock import Clock
from jobledger.errors import DatabaseBusy, StorageError

if TYPE_CHECKING:
    from jobledger._core.registry import HandlerSpec
    from jobledger._runtime.engine import Engine

__all__ = ["DRAIN_TIMEOUT", "Hold", "Lifecycle", "WorkerSettings"]

log = logging.getLogger("jobledger.lifecycle")

DRAIN_TIMEOUT = 4.5  # the default `shutdown_grace`
# After the grace, interrupted handlers get this long to settle.
SETTLE_AFTER_ABORT = 1.0
# Dead workers whose rows a claim skips before the sweep, at most (bound parameters).
MAX_EXCLUDED = 500
STEPS = ("reset", "resurrect", "schedules", "dispatch")
# `start()` registers this worker before anything else, and nothing may claim before the
# row is committed (a claim owned by an unknown worker is rescued as an orphan's). A
# transient failure (DB_BUSY: another process holding the write lock past the busy
# timeout, a PostgreSQL server unreachable; or the connection ended under the
# registration, sqlstate class 08 or 57P01-57P03) is retried, 0.1 s doubling to 2 s, for
# up to REGISTER_RETRY_FOR seconds; then `start()` raises the last one. The
# registration is an upsert, so writing it again after an ambiguous end is safe. Before,
# a deploy whose new worker started while another process held the lock for over a
# second, or while its connection was ended, failed to start (bench/chaos.py,
# docs/reliability.md).
REGISTER_RETRY_FIRST = 0.1
REGISTER_RETRY_MAX = 2.0
REGISTER_RETRY_FOR = 30.0


@dataclass
class WorkerSettings:
    """The manager's timing options, read at each use (the CLI sets some before start)."""

    worker_id: str
    startup_delay: float
    heartbeat_interval: float
    worker_timeout: float
    gc_retention: float
    gc_interval: float
    poll_interval: float
    leader_ttl: float
    shutdown_grace: float


class Hold:
    """One pause hold. `dispose()` is idempotent and releases only this hold."""

    __slots__ = ("_disposed", "_lifecycle", "reason")

    def __init__(self, lifecycle: Lifecycle, reason: str | None) -> None:
        self._lifecycle = lifecycle
        self.reason = reason
        self._disposed = False

    @property
    def disposed(self) -> bool:
        return self._disposed

    def dispose(self) -> None:
        if self._disposed:
            return
        self._disposed = True
        self._lifecycle._release(self)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"Hold(reason={self.reason!r}, disposed={self._disposed})"


class Lifecycle:
    """Owns the started manager's services; built from what they use, not the manager."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        clock: Clock,
        handlers: Mapping[str, HandlerSpec[Any]],
        settings: WorkerSettings,
        queues: QueueBook,
    ) -> None:
        self.store = store
        self.engine = engine
        self.clock = clock
        self.handlers = handlers
        self.settings = settings
        self.queues = queues
        self.promoter = Promoter(
            store, engine, clock, poll_interval=settings.poll_interval, kick=queues.kick_known
        )
        self.watcher = Watcher(
            store,
            engine,
            clock,
            queues,
            poll_interval=settings.poll_interval,
            wake_promoter=self.promoter.wake,
            follow_schedules=lambda: self.schedules.follow(),
        )
        self.hostname = socket.gethostname()
        self.dispatch_open = False
        self.is_leader = False
        self.schedules: ScheduleHooks = ScheduleHooks()
        self.holds: list[Hold] = []
        self._cursor: int | None = None  # next recovery step to run after a pause
        self._flow: asyncio.Task[None] | None = None
        self._in_step = False
        self._quiet: asyncio.Task[None] | None = None
        self._recovery_done: asyncio.Future[None] | None = None
        self._runtime: Runtime | None = None
        self._stopping = False
        self._hold_until_sweep = False  # the dead owners were unknown at start
        self._window_over = False
        self._skip_window = False  # end_quiet_window() came before the window's task
        self.started_at = 0.0  # clock.monotonic() at start(); the quiet window counts from it

    # -- recovery_done (exists from construction, bound to the loop lazily) ----------

    def recovery_future(self) -> asyncio.Future[None]:
        if self._recovery_done is None:
            self._recovery_done = asyncio.get_running_loop().create_future()
        return self._recovery_done

    def _resolve_recovery(self) -> None:
        fut = self._recovery_done
        if fut is None:
            if self.engine.loop is not None:
                fut = self._recovery_done = self.engine.loop.create_future()
            else:
                return
        if not fut.done():
            fut.set_result(None)

    # -- start / stop ---------------------------------------------------------------

    async def start(self) -> None:
        for spec in self.handlers.values():
            spec.job_type._build_adapter()
        self.engine.accepting = True
        self.engine.stale_after_ms = int(self.settings.worker_timeout * 1000)
        self.recovery_future()
        self.started_at = self.clock.monotonic()
        self._exclude_dead_owners()
        self._runtime = Runtime(
            [self.promoter, WorkerService(self), JobService(self), self.watcher]
        )
        await self._runtime.start()
        # Every row not owned by a dead worker is work now: producers'
        # rows, live workers' and this manager's own; only the sweep waits for the window.
        try:
            self.queues.load_all()
        except Exception:
            log.warning("reading the queues failed; the watcher finds them", exc_info=True)
        for name, type_name in self.queues.touched().items():
            self.engine.kick_threadsafe(name, type_name)
        self.engine.kick_all()

    def _exclude_dead_owners(self) -> None:
        """Until the sweep, claims skip rows that dead workers enqueued: the sweep may
        cancel them by strategy (abandon, orphans, superseded singletons)."""
        try:
            dead, _ = dead_workers(
                self.store.list_workers(),
                now_ms=self.engine.now_ms(),
                timeout_ms=int(self.settings.worker_timeout * 1000),
                hostname=self.hostname,
                exclude=self.settings.worker_id,
            )
        except Exception:
            log.warning("reading the workers failed; claims wait for the sweep", exc_info=True)
            self.engine.accepting = False
            self._hold_until_sweep = True
            return
        self.engine.exclude_owners = tuple(w.id for w in dead[:MAX_EXCLUDED])

    async def stop(self) -> None:
        self._stopping = True
        self.watcher.stop_following()
        if self._runtime is not None:
            await self._runtime.stop()

    # -- the recovery flow ----------------------------------------------------------

    def end_quiet_window(self) -> None:
        if self._runtime is None or self._stopping or self._window_over:
            return
        quiet = self._quiet
        if quiet is None:
            self._skip_window = True  # the window's task has not run yet
            return
        quiet.cancel()
        self.quiet_window_elapsed()

    def quiet_window_elapsed(self) -> None:
        self._window_over = True
        if self._stopping:
            return
        if self.holds:
            self._cursor = 0
            return
        self._flow = asyncio.get_running_loop().create_task(self._run_flow(0))

    async def _run_flow(self, start: int) -> None:
        try:
            for index in range(start, len(STEPS)):
                if self._stopping:
                    return
                if self.holds:
                    self._cursor = index
                    return
                self._in_step = True
                try:
                    await self._step(STEPS[index])
                except Exception:
                    log.exception("recovery step %s failed; the flow continues", STEPS[index])
                finally:
                    self._in_step = False
            self._cursor = None
            self._resolve_recovery()
        finally:
            self._flow = None

    async def _step(self, name: str) -> None:
        if name == "reset":
            self.rescue()
            self.engine.exclude_owners = ()
            if self._hold_until_sweep:
                self._hold_until_sweep = False
                self.engine.accepting = not self._stopping
        elif name == "resurrect":
            self.dispatch_open = True
            self.queues.load_all()
        elif name == "schedules":
            await self.schedules.catch_up_and_arm()
        else:
            self.promoter.wake()
            self.engine.kick_all()

    def rescue(self) -> int:
        """Recover the rows of every dead worker by strategy; returns how many workers."""
        now = self.engine.now_ms()
        dead, alive = dead_workers(
            self.store.list_workers(),
            now_ms=now,
            timeout_ms=int(self.settings.worker_timeout * 1000),
            hostname=self.hostname,
            exclude=self.settings.worker_id,
        )
        # Rows claimed under an id that has no worker row are a dead worker's too (a
        # claim that raced the deletion of its worker's row).
        known = {w.id for w in dead} | {w.id for w in alive} | {self.settings.worker_id}
        ghosts = [
            WorkerRow(i, "", 0, (), 0, 0, 0)
            for i in self.store.unregistered_claimers()
            if i not in known
        ]
        dead = dead + ghosts
        if not dead:
            return 0
        strategies: dict[str, RecoveryStrategy] = {}
        for worker in alive:
            if worker.id == self.settings.worker_id:
                continue
            for type_name, strategy in _handlers_of(worker).items():
                strategies.setdefault(type_name, strategy)
        for type_name, spec in self.handlers.items():
            strategies[type_name] = spec.recovery

        def cancel_error(message: str) -> str:
            return error_to_json(
                JobErrorInfo("JOB_CANCELLED", message, False, {"reason": "recovery"})
            )

        kicked: set[str] = set()
        for worker in dead:
            stats = self.store.recover_worker(
                worker.id,
                lambda rows: plan_recovery(rows, strategies.get),
                cancel_error,
                now,
            )
            for row in stats.cancelled:
                self.engine.settle_row(row)
            if stats.reset or stats.kept:
                kicked.add("*")
            log.info(
                "recovered worker %s: %d reset, %d kept, %d cancelled",
                worker.id,
                stats.reset,
                stats.kept,
                len(stats.cancelled),
            )
        if kicked and self.dispatch_open:
            self.queues.follow()
            self.engine.kick_all()
        return len(dead)

    # -- pause and drain ------------------------------------------------------------

    def pause(self, reason: str | None) -> Hold:
        hold = Hold(self, reason)
        first = not self.holds
        self.holds.append(hold)
        self.engine.paused = True
        if first:
            log.info("paused: %s", reason)
            self.schedules.on_pause()
        return hold

    def _release(self, hold: Hold) -> None:
        try:
            self.holds.remove(hold)
        except ValueError:
            return
        if self.holds or self._stopping:
            return
        self.engine.paused = False
        log.info("pause released")
        loop = self.engine.loop
        if loop is None:
            return

        def finish() -> None:
            if self.holds or self._stopping:
                return
            self.promoter.wake()
            self.engine.kick_all()
            self.schedules.on_release()

        if self._cursor is not None:
            start, self._cursor = self._cursor, None
            prior = self._flow

            async def chain() -> None:
                if prior is not None:
                    await asyncio.shield(prior)
                await self._run_flow(start)
                finish()

            self._flow = loop.create_task(chain())
        elif self._flow is not None and not self._flow.done():
            flow = self._flow
            flow.add_done_callback(lambda _: finish())
        else:
            finish()

    async def drain(self, timeout: float) -> DrainVerdict:
        if not self.holds:
            log.warning("drain_in_flight without a pause: a point-in-time snapshot")
        engine = self.engine
        attempts = list(engine.inflight.values())
        waits: list[Awaitable[Any]] = [a.done.wait() for a in attempts]
        # Jobs whose outcome is written but whose on_settled hook still runs: the drain
        # ends after the hook (the per-execution "executed" signal, `Attempt.done`).
        waits += [asyncio.shield(t) for t in engine.settling()]
        flow = self._flow
        if flow is not None and not flow.done():
            waits.append(asyncio.shield(flow))
        if waits:
            tasks = [asyncio.ensure_future(x) for x in waits]
            try:
                await asyncio.wait(tasks, timeout=max(0.0, timeout))
            except Exception:
                pass
            for t in tasks:
                if not t.done():
                    t.cancel()
        stragglers = tuple(a.job_id for a in attempts if not a.done.is_set())
        pending = flow is not None and not flow.done() and self._in_step
        return DrainVerdict(straggler_ids=stragglers, startup_recovery_pending=pending)

    # -- shutdown -------------------------------------------------------------------

    async def shutdown_jobs(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
        flow = self._flow
        if flow is not None:
            try:
                await asyncio.shield(flow)
            except Exception:
                pass
        await self.schedules.on_stop()
        engine = self.engine
        engine.accepting = False  # claims stop first
        grace = self.settings.shutdown_grace
        if engine.inflight and grace > 0:
            # The grace: running handlers may end by themselves, so a deploy finishes them.
            left = await _wait_done(list(engine.inflight.values()), grace)
            if left:
                log.info("%d job(s) still running after the %gs grace; interrupting", left, grace)
        engine.settle_unstarted()  # cancelled by someone else before they began
        attempts = list(engine.inflight.values())
        for attempt in attempts:
            engine.abort(attempt, "shutdown", "JobManager shutdown")
        if attempts:
            left = await _wait_done(attempts, SETTLE_AFTER_ABORT)
            if left:
                log.warning(
                    "%d job(s) ignored the shutdown; their rows are left for recovery", left
                )
        engine.closed = True


async def _wait_done(attempts: list[Any], timeout: float) -> int:
    """Wait up to `timeout` s for every attempt's outcome; how many are still out."""
    tasks = [asyncio.ensure_future(a.done.wait()) for a in attempts]
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for t in pending:
        t.cancel()
    return len(pending)


def _handlers_of(worker: WorkerRow) -> dict[str, RecoveryStrategy]:
    out: dict[str, RecoveryStrategy] = {}
    for item in worker.handlers:
        name, _, strategy = item.partition("=")
        if strategy in ("abandon", "retry", "singleton"):
            out[name] = strategy  # type: ignore[assignment]
    return out


class WorkerService(Service):
    name = "workers"

    def __init__(self, lifecycle: Lifecycle) -> None:
        super().__init__(lifecycle.clock)
        self.lc = lifecycle
        self.lease: LeaderLease | None = None

    async def on_init(self) -> None:
        await self._register_at_start()
        self.lc.engine.on_unregistered = self.register

    async def _register_at_start(self) -> None:
        delay = REGISTER_RETRY_FIRST
        give_up = self.clock.monotonic() + REGISTER_RETRY_FOR
        failures = 0
        while True:
            try:
                self.register()
            except StorageError as exc:
                if not _transient(exc):
                    raise
                failures += 1
                if self.clock.monotonic() + delay > give_up:
                    log.error("registering this worker failed %d time(s); giving up", failures)
                    raise
                if failures == 1:
                    log.warning(
                        "registering this worker failed (%s); retrying for up to %gs",
                        exc,
                        REGISTER_RETRY_FOR,
                    )
                await self.clock.sleep(delay)
                delay = min(delay * 2, REGISTER_RETRY_MAX)
                continue
            if failures:
                log.warning("worker registered after %d failed attempt(s)", failures)
            return

    def register(self) -> None:
        lc = self.lc
        handlers = sorted(f"{n}={s.recovery}" for n, s in lc.handlers.items())
        lc.store.register_worker(
            lc.settings.worker_id, self.lc.hostname, os.getpid(), handlers, lc.engine.now_ms()
        )

    async def on_ready(self) -> None:
        lc = self.lc
        tick_every = max(lc.settings.poll_interval * 20, 1.0)
        self.lease = LeaderLease(
            lc.store,
            lc.settings.worker_id,
            self.lc.hostname,
            ttl=lc.settings.leader_ttl,
            renew_every=min(lc.settings.heartbeat_interval or 5.0, tick_every),
            now_ms=lc.engine.now_ms,
        )
        # The first election is synchronous, so a lone manager leads from start() on.
        try:
            leader = self.lease.step()
        except Exception:
            log.warning("leader election failed; retrying at the next tick", exc_info=True)
            leader = False
        self._set_leader(leader, force=True)
        self.register_interval(self.beat, lc.settings.heartbeat_interval or 5.0)
        self.register_interval(self.lead, self.lease.cadence)
        self.register_interval(self.tick, tick_every)
        if lc.settings.gc_interval > 0:
            self.register_interval(self.gc, lc.settings.gc_interval)

    def lead(self) -> None:
        """Renew or try to take the leader lease (also while paused: like the heartbeat,
        it must not lapse during a long hold; only the leader's duties pause)."""
        if self.lease is not None:
            self._set_leader(self.lease.step())

    def _set_leader(self, leader: bool, *, force: bool = False) -> None:
        if leader == self.lc.is_leader and not force:
            return
        self.lc.is_leader = leader
        try:
            self.lc.schedules.on_leadership(leader)
        except Exception:
            log.exception("the on_leadership hook failed")
        if leader:
            try:
                self.tick()  # a new leader rescues what its dead predecessor left, now
            except Exception:
                log.exception("rescue after taking leadership failed; the next tick retries")

    def beat(self) -> None:
        lc = self.lc
        lc.engine.settle_unstarted()
        # SQLite goes on writing to a deleted or replaced file without an error; the store
        # logs it once (a stat, no I/O on the database).
        lc.store.report_file_replaced()
        now = lc.engine.now_ms()
        try:
            if not lc.store.heartbeat(lc.settings.worker_id, now) and not self.lc._stopping:
                # Another process judged us dead (a stall longer than worker_timeout) and
                # recovered our rows, deleting our worker row. Register again: rows we claim
                # from now on must belong to a registered worker, or nobody could ever
                # recover them if we really die.
                log.warning(
                    "worker %s was recovered as dead; registering again", lc.settings.worker_id
                )
                self.register()
        except Exception:
            log.warning("heartbeat skipped", exc_info=True)

    def tick(self) -> None:
        """Mid-session rescue: dead workers' rows, by strategy."""
        if not self.lc.is_leader or self.lc.holds or not self.lc.dispatch_open:
            return
        self.lc.rescue()

    def gc(self) -> None:
        lc = self.lc
        if self.lc.holds or not self.lc.is_leader:
            return
        cutoff = lc.engine.now_ms() - int(lc.settings.gc_retention * 1000)
        deleted = lc.store.gc(cutoff)
        if deleted:
            log.info("gc deleted %d terminal job(s)", deleted)

    async def on_stop(self) -> None:
        lc = self.lc
        if self.lease is not None:
            self.lease.resign()
            self._set_leader(False)
        now = lc.engine.now_ms()
        try:
            lc.store.stop_worker(lc.settings.worker_id, now)
        except Exception:
            log.warning("could not mark worker %s stopped", lc.settings.worker_id, exc_info=True)


class JobService(Service):
    name = "jobs"
    depends_on = ("workers",)

    def __init__(self, lifecycle: Lifecycle) -> None:
        super().__init__(lifecycle.clock)
        self.lc = lifecycle

    def stop_timeout(self) -> float:
        # The grace and the settling second are waits on purpose; the rest is margin.
        return self.lc.settings.shutdown_grace + SETTLE_AFTER_ABORT + 1.0

    async def on_all_ready(self) -> None:
        delay = self.lc.settings.startup_delay

        async def window() -> None:
            # Measured from start(), not from when this task first runs: time that passed
            # in between (a FakeClock advanced right after start()) counts.
            remaining = delay - (self.clock.monotonic() - self.lc.started_at)
            if remaining > 0 and not self.lc._skip_window:
                await self.clock.sleep(remaining)
            self.lc.quiet_window_elapsed()

        self.lc._quiet = asyncio.get_running_loop().create_task(window())

    async def on_stop(self) -> None:
        await self.lc.shutdown_jobs()


Callback = Callable[[], None]


# PostgreSQL sqlstates of a connection that ended (class 08) or a server shutting down or
# not yet up (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now).
_CONNECTION_ENDED = ("08", "57P01", "57P02", "57P03")


def _transient(exc: StorageError) -> bool:
    """A failure that a later try of the same write may not meet."""
    if isinstance(exc, DatabaseBusy):
        return True
    state = exc.params.get("sqlstate")
    return isinstance(state, str) and state.startswith(_CONNECTION_ENDED)
