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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jobledger._core.recovery import dead_workers, plan_recovery
from jobledger._runtime.leader import LeaderLease
from jobledger._runtime.services import Runtime, Service
from jobledger._storage.records import WorkerRow
from jobledger._storage.rows import error_to_json
from jobledger._types import DrainVerdict, JobErrorInfo, RecoveryStrategy

if TYPE_CHECKING:
    from jobledger._runtime.manager import JobManager

__all__ = ["DRAIN_TIMEOUT", "Hold", "Lifecycle"]

log = logging.getLogger("jobledger.lifecycle")

DRAIN_TIMEOUT = 4.5  # the default `shutdown_grace`
# After the grace, interrupted handlers get this long to settle.
SETTLE_AFTER_ABORT = 1.0
# Dead workers whose rows a claim skips before the sweep, at most (bound parameters).
MAX_EXCLUDED = 500
STEPS = ("reset", "resurrect", "schedules", "dispatch")


class ScheduleHooks:
    """What the scheduling layer plugs into the lifecycle (no-ops until it does)."""

    async def catch_up_and_arm(self) -> None:
        return None

    def on_pause(self) -> None:
        return None

    def on_release(self) -> None:
        return None

    async def on_stop(self) -> None:
        return None

    def on_leadership(self, leader: bool) -> None:
        return None


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
    def __init__(self, manager: JobManager) -> None:
        self.m = manager
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
        self.started_at = 0.0  # clock.monotonic() at start(); the quiet window counts from it

    # -- recovery_done (exists from construction, bound to the loop lazily) ----------

    def recovery_future(self) -> asyncio.Future[None]:
        if self._recovery_done is None:
            self._recovery_done = asyncio.get_running_loop().create_future()
        return self._recovery_done

    def _resolve_recovery(self) -> None:
        fut = self._recovery_done
        if fut is None:
            if self.m._loop is not None:
                fut = self._recovery_done = self.m._loop.create_future()
            else:
                return
        if not fut.done():
            fut.set_result(None)

    # -- start / stop ---------------------------------------------------------------

    async def start(self) -> None:
        m = self.m
        for spec in m._handlers.values():
            spec.job_type._build_adapter()
        m._engine.accepting = True
        m._engine.stale_after_ms = int(m.worker_timeout * 1000)
        self.recovery_future()
        self.started_at = m.clock.monotonic()
        self._exclude_dead_owners()
        self._runtime = Runtime([m._promoter, WorkerService(self), JobService(self)])
        await self._runtime.start()
        # Every row not owned by a dead worker is work now: producers'
        # rows, live workers' and this manager's own; only the sweep waits for the window.
        try:
            for seq, qname, type_name in m._store.queues_since(0):
                m._queue_seq = max(m._queue_seq, seq)
                m._engine.ensure_queue(qname, type_name)
        except Exception:
            log.warning("reading the queues failed; the watcher finds them", exc_info=True)
        with m._touched_lock:
            touched = dict(m._touched_queues)
        for name, type_name in touched.items():
            m._engine.kick_threadsafe(name, type_name)
        m._engine.kick_all()

    def _exclude_dead_owners(self) -> None:
        """Until the sweep, claims skip rows that dead workers enqueued: the sweep may
        cancel them by strategy (abandon, orphans, superseded singletons)."""
        m = self.m
        try:
            dead, _ = dead_workers(
                m._store.list_workers(),
                now_ms=m._engine.now_ms(),
                timeout_ms=int(m.worker_timeout * 1000),
                hostname=self.hostname,
                exclude=m.worker_id,
            )
        except Exception:
            log.warning("reading the workers failed; claims wait for the sweep", exc_info=True)
            m._engine.accepting = False
            self._hold_until_sweep = True
            return
        m._engine.exclude_owners = tuple(w.id for w in dead[:MAX_EXCLUDED])

    async def stop(self) -> None:
        self._stopping = True
        if self._runtime is not None:
            await self._runtime.stop()

    # -- the recovery flow ----------------------------------------------------------

    def quiet_window_elapsed(self) -> None:
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
        m = self.m
        if name == "reset":
            self.rescue()
            m._engine.exclude_owners = ()
            if self._hold_until_sweep:
                self._hold_until_sweep = False
                m._engine.accepting = not self._stopping
        elif name == "resurrect":
            self.dispatch_open = True
            for seq, qname, type_name in m._store.queues_since(0):
                m._queue_seq = max(m._queue_seq, seq)
                m._engine.ensure_queue(qname, type_name)
        elif name == "schedules":
            await self.schedules.catch_up_and_arm()
        else:
            m._promoter.wake()
            m._engine.kick_all()

    def rescue(self) -> int:
        """Recover the rows of every dead worker by strategy; returns how many workers."""
        m = self.m
        now = m._engine.now_ms()
        dead, alive = dead_workers(
            m._store.list_workers(),
            now_ms=now,
            timeout_ms=int(m.worker_timeout * 1000),
            hostname=self.hostname,
            exclude=m.worker_id,
        )
        # Rows claimed under an id that has no worker row are a dead worker's too (a
        # claim that raced the deletion of its worker's row).
        known = {w.id for w in dead} | {w.id for w in alive} | {m.worker_id}
        ghosts = [
            WorkerRow(i, "", 0, (), 0, 0, 0)
            for i in m._store.unregistered_claimers()
            if i not in known
        ]
        dead = dead + ghosts
        if not dead:
            return 0
        strategies: dict[str, RecoveryStrategy] = {}
        for worker in alive:
            if worker.id == m.worker_id:
                continue
            for type_name, strategy in _handlers_of(worker).items():
                strategies.setdefault(type_name, strategy)
        for type_name, spec in m._handlers.items():
            strategies[type_name] = spec.recovery

        def cancel_error(message: str) -> str:
            return error_to_json(
                JobErrorInfo("JOB_CANCELLED", message, False, {"reason": "recovery"})
            )

        kicked: set[str] = set()
        for worker in dead:
            stats = m._store.recover_worker(
                worker.id,
                lambda rows: plan_recovery(rows, strategies.get),
                cancel_error,
                now,
            )
            for row in stats.cancelled:
                m._engine.settle_row(row)
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
            for seq, qname, type_name in m._store.queues_since(m._queue_seq):
                m._queue_seq = seq
                m._engine.ensure_queue(qname, type_name)
            m._engine.kick_all()
        return len(dead)

    # -- pause and drain ------------------------------------------------------------

    def pause(self, reason: str | None) -> Hold:
        hold = Hold(self, reason)
        first = not self.holds
        self.holds.append(hold)
        self.m._engine.paused = True
        if first:
            log.info("paused: %s", reason)
            self.schedules.on_pause()
        return hold

    def _release(self, hold: Hold) -> None:
        try:
            self.holds.remove(hold)
        except ValueError:
            return
        if self.holds or self._stopping or self.m._stopped:
            return
        m = self.m
        m._engine.paused = False
        log.info("pause released")
        loop = m._loop
        if loop is None:
            return

        def finish() -> None:
            if self.holds or self._stopping:
                return
            m._promoter.wake()
            m._engine.kick_all()
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
        engine = self.m._engine
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
        m = self.m
        if self._quiet is not None:
            self._quiet.cancel()
        flow = self._flow
        if flow is not None:
            try:
                await asyncio.shield(flow)
            except Exception:
                pass
        await self.schedules.on_stop()
        engine = m._engine
        engine.accepting = False  # claims stop first
        grace = m.shutdown_grace
        if engine.inflight and grace > 0:
            # The grace: running handlers may end by themselves, so a deploy finishes them.
            left = await _wait_done(list(engine.inflight.values()), grace)
            if left:
                log.info("%d job(s) still running after the %gs grace; interrupting", left, grace)
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
        super().__init__(lifecycle.m.clock)
        self.lc = lifecycle
        self.lease: LeaderLease | None = None

    async def on_init(self) -> None:
        self.register()
        self.lc.m._engine.on_unregistered = self.register

    def register(self) -> None:
        m = self.lc.m
        handlers = sorted(f"{n}={s.recovery}" for n, s in m._handlers.items())
        m._store.register_worker(
            m.worker_id, self.lc.hostname, os.getpid(), handlers, m._engine.now_ms()
        )

    async def on_ready(self) -> None:
        m = self.lc.m
        tick_every = max(m.poll_interval * 20, 1.0)
        self.lease = LeaderLease(
            m._store,
            m.worker_id,
            self.lc.hostname,
            ttl=m.leader_ttl,
            renew_every=min(m.heartbeat_interval or 5.0, tick_every),
            now_ms=m._engine.now_ms,
        )
        # The first election is synchronous, so a lone manager leads from start() on.
        try:
            leader = self.lease.step()
        except Exception:
            log.warning("leader election failed; retrying at the next tick", exc_info=True)
            leader = False
        self._set_leader(leader, force=True)
        self.register_interval(self.beat, m.heartbeat_interval or 5.0)
        self.register_interval(self.lead, self.lease.cadence)
        self.register_interval(self.tick, tick_every)
        if m.gc_interval > 0:
            self.register_interval(self.gc, m.gc_interval)

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
        m = self.lc.m
        # SQLite goes on writing to a deleted or replaced file without an error; the store
        # logs it once (a stat, no I/O on the database).
        m._store.report_file_replaced()
        now = m._engine.now_ms()
        try:
            if not m._store.heartbeat(m.worker_id, now) and not self.lc._stopping:
                # Another process judged us dead (a stall longer than worker_timeout) and
                # recovered our rows, deleting our worker row. Register again: rows we claim
                # from now on must belong to a registered worker, or nobody could ever
                # recover them if we really die.
                log.warning("worker %s was recovered as dead; registering again", m.worker_id)
                self.register()
        except Exception:
            log.warning("heartbeat skipped", exc_info=True)

    def tick(self) -> None:
        """Mid-session rescue: dead workers' rows, by strategy."""
        if not self.lc.is_leader or self.lc.holds or not self.lc.dispatch_open:
            return
        self.lc.rescue()

    def gc(self) -> None:
        m = self.lc.m
        if self.lc.holds or not self.lc.is_leader:
            return
        cutoff = m._engine.now_ms() - int(m.gc_retention * 1000)
        deleted = m._store.gc(cutoff)
        if deleted:
            log.info("gc deleted %d terminal job(s)", deleted)

    async def on_stop(self) -> None:
        m = self.lc.m
        if self.lease is not None:
            self.lease.resign()
            self._set_leader(False)
        now = m._engine.now_ms()
        try:
            m._store.stop_worker(m.worker_id, now)
        except Exception:
            log.warning("could not mark worker %s stopped", m.worker_id, exc_info=True)


class JobService(Service):
    name = "jobs"
    depends_on = ("workers",)

    def __init__(self, lifecycle: Lifecycle) -> None:
        super().__init__(lifecycle.m.clock)
        self.lc = lifecycle

    def stop_timeout(self) -> float:
        # The grace and the settling second are waits on purpose; the rest is margin.
        return self.lc.m.shutdown_grace + SETTLE_AFTER_ABORT + 1.0

    async def on_all_ready(self) -> None:
        delay = self.lc.m.startup_delay

        async def window() -> None:
            # Measured from start(), not from when this task first runs: time that passed
            # in between (a FakeClock advanced right after start()) counts.
            remaining = delay - (self.clock.monotonic() - self.lc.started_at)
            if remaining > 0:
                await self.clock.sleep(remaining)
            self.lc.quiet_window_elapsed()

        self.lc._quiet = asyncio.get_running_loop().create_task(window())

    async def on_stop(self) -> None:
        await self.lc.shutdown_jobs()


Callback = Callable[[], None]
