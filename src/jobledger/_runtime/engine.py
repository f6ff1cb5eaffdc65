"""The engine: dispatch, execution and grouped finalize on one asyncio loop.

Dispatch, per queue (docs/design/lock-layers.md):

1. take the queue's layer-1 lock;
2. in ONE `BEGIN IMMEDIATE`: count the queue's running rows, count all running rows,
   claim up to the free slots by (priority, scheduled_at, id) — counted in SQL, so both
   caps hold across processes;
3. commit, release the lock, start the handlers outside it, and re-kick the queue when
   the batch filled (to fill the next slots).

With several processes on one queue, its cap is usually held by one of them. When every
outcome of a finalize batch is of one queue (and the global cap turned no queue away),
the queue's next claim rides in the finalize's transaction (`Store.finalize_and_claim`,
the "refill"): the slots never look free to the other processes, and a batch costs one
commit instead of two. A batch of several queues claims each one's freed slots in one
claim across them, in the same transaction (`_mixed_refill`). Otherwise (a refill claim
that failed, or was cut short by this process's limits) the busy process finalizes and
claims right after, and between those two commits the slots look free. A process that
holds nothing in the queue and whose last claim there was refused by the queue's cap
(`ClaimResult.queue_full`) therefore confirms what it sees: its next claim waits
`CONFIRM_DELAY` first, by which time the busy process has claimed again if it was going
to. Without it, idle processes woken by every commit elsewhere kept taking the batch
over in those gaps (four processes drained slower than one). A global-cap refusal is
never delayed (another queue holds the slots; this one must get its turn), nor is an
empty queue's next claim, nor a kick from a local enqueue.

Every claim also stops at what this process may still run: the global cap, or
`process_max_concurrency` when set. Without it, one process takes every free slot of a
cap shared by several: right for handlers that await, but a process whose handlers hold
the CPU runs them one at a time while the other processes, seeing the cap full, idle.
Likewise a queue made for a plain `def` handler claims only while a pool thread is free:
a job claimed beyond the pool would wait for a thread while counted as running, its
timeout already counting. And a claim takes no more than the
loop can start promptly (`_runtime/ahead.py`): a process whose handlers compute without
awaiting learns from its jobs' start lag to claim ~20 ms of work at a time, so two such
processes under one cap each keep a core busy instead of the first holding every slot.
Reaching any of these limits counts as a global-cap refusal (below): any job of ours that
ends (or, for the claim-ahead budget, starts) frees it.

A finishing job kicks its queue. While the global cap (or this process's limit) binds,
dispatch is instead one claim across queues (`Store.claim_spread`): the queues that may
claim wait in least-recently-served order (`_turns`), a claim asks the head of that
order, and its rows go a turn per queue before any queue gets a second: one row while
a queue asked waits for its first turn, else up to `TURN_JOBS` (docs/design/
lock-layers.md, "Dispatch at scale"). So is a kick of every queue while this process
runs nothing (`kick_all`: at start, when a pause is released, on another process's
commit), so that processes started together do not take the cap five slots at a time
each and keep those shares. Kicking every queue on each freed slot, as before, cost a
dispatch per queue per finished job, and kicked in a fixed order the first few queues
would take every freed slot while the others starved.

Claims are synchronous on the loop thread, so between two awaits nothing else can run a
claim: the layer-1 lock is never contended inside one process, but it keeps the
count->claim section explicit and safe against a caller on another thread.

Finalize is grouped: outcomes of jobs that end in the same loop tick are written in one
transaction (each a fenced compare-and-set), and only after its COMMIT are handles
resolved, events published, queues kicked, refilled jobs started and `on_settled` run.
Nothing is reported done before it is durable. A finalize that fails (the write lock held
past the coordinator's retries, a full disk, a lost PostgreSQL connection) keeps its
outcomes, their slots and their handles, and writes them again with a short backoff
until the database answers: a live worker never leaves its own rows `running`. A claim
that raised may still have committed on a server, so before the next claim
`release_unconfirmed_claims` puts back every `running` row of this worker that it does
not run. The refill is computed like a dispatch
(`_dispatch`'s arithmetic on what the batch releases) and taken under the queue's
layer-1 lock; its claim still counts both caps in SQL.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import os
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, cast

from jobledger._core.backoff import compute_backoff
from jobledger._core.registry import HandlerSpec, encode_result
from jobledger._runtime import tracing
from jobledger._runtime.ahead import ClaimAhead
from jobledger._runtime.attempt import Attempt
from jobledger._runtime.context import JobContext
from jobledger._runtime.deadlines import Deadlines
from jobledger._runtime.events import EventBus, JobEvent
from jobledger._runtime.joblog import log_ends, log_raised, log_start, worker_log
from jobledger._runtime.timers import call_later
from jobledger._runtime.transactions import GroupCommitter
from jobledger._storage import layout as L
from jobledger._storage.interface import (
    APPLIED,
    ClaimedJob,
    ClaimRequest,
    ClaimResult,
    JobRow,
    Outcome,
    SpreadRequest,
    Store,
)
from jobledger._storage.rows import error_to_json, row_snapshot, snapshot_from_row
from jobledger._types import JobErrorInfo, JobSnapshot, SettledEvent
from jobledger.clock import Clock, to_ms
from jobledger.errors import JobError, JobValidationError, PermanentError

if TYPE_CHECKING:
    from jobledger._runtime.processes import End, ProcessPool

__all__ = ["DispatchQueue", "Engine"]

log = logging.getLogger("jobledger.engine")

# The name of the asyncio task that runs a job's handler is this and the job's id.
TASK_PREFIX = "jobledger job "

# One job's waiting `finished` futures (`Engine.waiters`).
Waiting = asyncio.Future[JobSnapshot] | list[asyncio.Future[JobSnapshot]]
_C_ID, _C_TYPE = L.C_ID, L.C_TYPE

# Long enough for a busy process to commit its next claim after its finalize (~1-2 ms
# apart), short beside the cross-process wake-up itself (`poll_interval`). The claim goes
# ahead once QUIET_CHECKS checks in a row, CONFIRM_DELAY apart, found no writer inside a
# transaction (the busy process's gap between two writes is ~0.5 ms, so one check alone
# still landed in it about one time in ten), or after MAX_DEFERRALS checks in any case.
CONFIRM_DELAY = 0.005
QUIET_CHECKS = 2
MAX_DEFERRALS = 6
SPREAD_MAX = 128  # queues in one spread claim (the SQLite statement's bound)
# Queues a spread claim asks beyond the slots it may take: some of those at the head of
# the turns will have run dry or be full with another process's jobs.
SPREAD_SLACK = 16
# Rows a queue takes per turn of a spread claim once every queue asked has had its first
# (`SpreadRequest.turn`). A queue's rows sit together in the table, so a turn of four
# writes about one page of them where four turns of one write four: at 1,000 queues a
# commit wrote ~100 pages of the table for 50 jobs (docs/benchmarks.md, twenty-sixth
# and twenty-seventh rounds). A queue's first turn is one row, so a burst of new
# queues all start within one round of the cap's slots.
TURN_JOBS = 4


class DispatchQueue:
    """A queue's in-memory view: its name, its cap, a lock. It holds no jobs."""

    __slots__ = (
        "cap",
        "concurrency",
        "confirm_armed",
        "confirmed",
        "deferrals",
        "keyed",
        "kick_pending",
        "lock",
        "name",
        "proc",
        "quiet",
        "rate",
        "rate_at",
        "running",
        "sync",
        "turned_away",
    )

    def __init__(
        self,
        name: str,
        concurrency: int,
        *,
        sync: bool = False,
        proc: bool = False,
        rate: tuple[int, int] | None = None,
        keyed: bool = False,
    ) -> None:
        self.name = name
        self.cap = concurrency  # the handler's; what claims ask for
        # The cap the last claim counted (an operator's override, `queue_settings`).
        self.concurrency = concurrency
        self.rate = rate  # the handler's rate limit (starts, period ms)
        self.rate_at: int | None = None  # a kick is armed for this epoch ms (rate window)
        # Its rate limit is per key: claimed on its own, never in a spread claim.
        self.keyed = keyed
        # Made for a plain `def` handler: its jobs need a pool thread, or, with `proc`
        # (executor="process"), a child process of the pool.
        self.sync = sync
        self.proc = proc
        self.lock = threading.Lock()
        self.kick_pending = False
        self.running = 0
        # Holding nothing here, the last claim was refused by the queue's cap.
        self.turned_away = False
        self.confirm_armed = False  # a confirming kick is scheduled
        self.confirmed = False  # the next dispatch is that kick
        self.deferrals = 0  # confirming kicks since the last claim
        self.quiet = 0  # of them, the last ones in a row that found no writer busy


class Engine:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        worker_id: str,
        handlers: dict[str, HandlerSpec[Any]],
        events: EventBus,
        *,
        global_max_concurrency: int,
        poll_interval: float,
        claim_batch: int = 64,
        thread_pool_size: int = 16,
        process_pool_size: int | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.worker_id = worker_id
        self.handlers = handlers
        self._group_committer: GroupCommitter | None = None
        self.events = events
        self.global_max = global_max_concurrency
        self.process_max: int | None = None
        self.local_max = global_max_concurrency  # what this process may run at once
        self.ahead = ClaimAhead(global_max_concurrency)
        self.poll_interval = poll_interval
        self.claim_batch = claim_batch
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queues: dict[str, DispatchQueue] = {}
        self.inflight: dict[str, Attempt] = {}
        self.sync_inflight = 0  # of them, plain `def` handlers' (one pool thread each)
        self.proc_inflight = 0  # and process handlers' (one child process each)
        # The global cap (or this process's limit) turned a claim away: until a claim finds
        # slots left over, dispatch is one spread claim over `_turns`, not a claim per queue.
        self.global_blocked = False
        # Queues that may claim, least recently served first (insertion order; a served
        # queue goes to the end), each with whether it waits for its first turn since it
        # joined (True) or was served here before it rejoined. Only used while
        # `global_blocked`.
        self._turns: dict[str, bool] = {}
        self._spread_pending = False
        self.accepting = False  # claims allowed (started, recovery gate open, not stopping)
        self.paused = False
        # Set once stop()'s drain is over: a stopped worker counts as dead, so an outcome
        # that arrives later (a handler that ignored its cancel) is not written; the row
        # stays `running` and recovery applies the type's strategy at the next start.
        self.closed = False
        # A job's waiting `finished` futures: the future itself while there is one (the
        # common case: no list per handle), a list once a second waits (`add_waiter`).
        self.waiters: dict[str, Waiting] = {}
        self._waiters_lock = threading.Lock()  # a second waiter's list, from any thread
        # Waited-on jobs whose rows a read on the next turn of the loop will look at
        # (`JobManager._wait_finished`, under its lock); the watcher leaves them to it.
        self.unread: dict[str, None] = {}
        self._buffer: list[tuple[Outcome, Attempt]] = []
        self._flush_scheduled = False
        self._deadlines: Deadlines | None = None  # made on the first handler timeout
        self._pool_size = thread_pool_size
        self._pool: ThreadPoolExecutor | None = None
        self._proc_size = process_pool_size or os.cpu_count() or 1
        # Two jobs per child: the second waits in this worker and goes to the child the
        # moment its job ends, so a child never idles through a finalize and a claim.
        self._proc_slots = 2 * self._proc_size
        self.processes: ProcessPool | None = None  # started by the first process job
        self._settling: set[asyncio.Task[None]] = set()
        # Until the startup sweep has run: rows these dead workers enqueued wait for it.
        self.exclude_owners: tuple[str, ...] = ()
        self._write_failures = 0  # failed finalize writes in a row (outcomes kept)
        # A claim raised: it may have committed (PostgreSQL), so `reconcile` runs first.
        self._unconfirmed = False
        self.on_delayed: Callable[[int], None] = lambda at_ms: None
        self.on_settled_row: Callable[[JobRow], None] = _ignore_row
        # After a finalize that ended these jobs of workflows committed (their ids): its
        # trigger may have released or cancelled their downstream jobs (the manager
        # kicks and resolves those). Never called for a batch without a workflow's job.
        self.on_workflow_step: Callable[[list[str]], None] = _ignore_workflows
        self.on_unregistered: Callable[[], None] = lambda: None
        # A claim older than this when its handler is about to start (`worker_timeout`)
        # is checked against the row first; None: never.
        self.stale_after_ms: int | None = None

    def limit_process(self, process_max: int | None) -> None:
        """Run at most `process_max` jobs at once here (None: the global cap), from the
        next claim on; the user's word that one process cannot really run more."""
        self.process_max = process_max
        self.local_max = (
            self.global_max if process_max is None else min(self.global_max, process_max)
        )
        self.ahead.set_ceiling(self.local_max)
        loop = self.loop
        if loop is not None and not loop.is_closed():  # a raised limit frees slots now
            if _on_loop(loop):
                self._pass_the_turn()
            else:
                loop.call_soon_threadsafe(self._pass_the_turn)

    # -- time -----------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock.time() * 1000)

    # -- queues and kicks -----------------------------------------------------------

    def ensure_queue(self, name: str, type_name: str) -> DispatchQueue | None:
        qu = self.queues.get(name)
        if qu is None:
            spec = self.handlers.get(type_name)
            if spec is None:
                return None
            limit = spec.rate_limit
            qu = DispatchQueue(
                name,
                spec.concurrency,
                sync=not spec.is_async,
                proc=spec.is_process,
                rate=None if limit is None else (limit.limit, limit.per_ms),
                keyed=limit is not None and limit.key is not None,
            )
            self.queues[name] = qu
        return qu

    def kick(self, name: str) -> None:
        qu = self.queues.get(name)
        loop = self.loop
        if qu is None or qu.kick_pending or loop is None or not self.accepting:
            return
        qu.kick_pending = True
        loop.call_soon(self._dispatch, qu)

    def kick_all(self) -> None:
        if self.global_blocked:
            # Every queue may have work (another process's enqueue): each joins the turns
            # (a queue already waiting keeps its place), and one spread claim looks.
            turns = self._turns
            for name in self.queues:
                if name not in turns:
                    turns[name] = True
            self._schedule_spread()
            return
        queues = self.queues
        if len(queues) > 1 and not self.inflight:
            # This process runs nothing: one claim across the queues takes its share of
            # the slots in one transaction. Claimed queue by queue, several processes
            # started together took the global cap in turns, five slots each, and kept
            # those halves (each refills only what it frees): at 1,000 queues two halves
            # drained slower than one whole, and each process's turns went over the same
            # queues first (docs/benchmarks.md, twenty-first round).
            turns = self._turns
            for name, qu in queues.items():
                if qu.kick_pending:
                    continue  # its claim of its own comes first (a local enqueue's)
                if qu.keyed or qu.turned_away:
                    self.kick(name)  # claimed alone; or its cap was full: confirm first
                elif name not in turns:
                    turns[name] = True
            if turns:
                self._schedule_spread()
            return
        for name in list(queues):
            self.kick(name)

    def kick_threadsafe(self, name: str, type_name: str) -> None:
        """From any thread: make sure the queue exists and kick it on the loop."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return

        def go() -> None:
            qu = self.ensure_queue(name, type_name)
            if qu is not None:
                qu.turned_away = False  # our own new job: claim it now
                self.kick(name)

        if _on_loop(loop):
            go()
        else:
            loop.call_soon_threadsafe(go)

    def _dispatch(self, qu: DispatchQueue) -> None:
        qu.kick_pending = False
        if not self.accepting or self.paused:
            return
        free = qu.concurrency - qu.running
        if free <= 0:
            return
        own_free = self._own_free()
        if qu.sync:
            own_free = min(own_free, self._workers_free(qu.proc))
        if own_free <= 0:
            self.global_blocked = True
            self._turns.setdefault(qu.name, True)
            return
        if self.global_blocked and not qu.keyed:
            # Its turn comes in the spread claim, with the other queues waiting.
            self._turns.setdefault(qu.name, True)
            self._schedule_spread()
            return
        if qu.turned_away and qu.running == 0 and self._hold_back(qu):
            return
        qu.confirmed = False
        qu.deferrals = qu.quiet = 0
        limit = min(free, own_free, self.claim_batch)
        if self._unconfirmed and not self.reconcile():
            self._kick_later(qu.name)
            return
        with qu.lock:
            if self._gate_closed():  # re-checked under the lock (docs/design/lock-layers.md)
                return
            try:
                result = self.store.claim(
                    qu.name,
                    queue_cap=qu.cap,
                    global_cap=self.global_max,
                    limit=limit,
                    now_ms=self.now_ms(),
                    worker_id=self.worker_id,
                    types=tuple(self.handlers),
                    exclude_owners=self.exclude_owners,
                    registered=True,
                    rate=qu.rate,
                    rate_keyed=qu.keyed,
                )
            except Exception:
                log.warning("claim on queue %r failed; retrying shortly", qu.name, exc_info=True)
                self._unconfirmed = True
                self._kick_later(qu.name)
                return
        self._take(qu, result, limit)

    def _take(self, qu: DispatchQueue, result: ClaimResult, limit: int) -> None:
        if result.unregistered:
            # Another process judged us dead and deleted our worker row: claims wait
            # until we are registered again (they would belong to nobody otherwise).
            log.warning("worker %s has no worker row; registering before it claims", self.worker_id)
            try:
                self.on_unregistered()
            except Exception:
                log.warning("registering again failed; retrying", exc_info=True)
            self._kick_later(qu.name)
            return
        if result.cap is not None:
            qu.concurrency = result.cap
        if result.rate_wait is not None:
            self._arm_rate(qu, result.rate_wait)
        if result.global_blocked:
            self.global_blocked = True
            self._turns.setdefault(qu.name, not result.jobs)
        qu.turned_away = result.queue_full and qu.running == 0
        # Claims older than this were made before a stall long enough to be judged dead.
        stale = (
            None
            if self.stale_after_ms is None or not result.jobs
            else self.now_ms() - self.stale_after_ms
        )
        for job in result.jobs:
            self._start(qu, job, stale, result.mark)
        if len(result.jobs) == limit and result.rate_wait is None:
            self.kick(qu.name)

    def _arm_rate(self, qu: DispatchQueue, at_ms: int) -> None:
        """The queue's rate window allows its next start at `at_ms`: kick it then (one
        timer per queue, the earliest asked; no polling)."""
        loop = self.loop
        if loop is None or (qu.rate_at is not None and qu.rate_at <= at_ms):
            return
        qu.rate_at = at_ms

        def due() -> None:
            if qu.rate_at == at_ms:
                qu.rate_at = None
                self.kick(qu.name)

        call_later(loop, self.clock, max(0.0, (at_ms - self.now_ms()) / 1000), due)

    def settings_changed(self, name: str) -> None:
        """This process changed the queue's settings: forget what the last claim said
        (its cap, a rate wait) and claim again now."""
        qu = self.queues.get(name)
        if qu is None:
            return
        qu.concurrency = qu.cap
        qu.rate_at = None
        qu.turned_away = False
        if self.global_blocked:
            self._turns.setdefault(name, True)
            self._schedule_spread()
        else:
            self.kick(name)

    def _hold_back(self, qu: DispatchQueue) -> bool:
        """Whether a turned-away queue's claim waits a little longer (see the docstring)."""
        if self.loop is None:
            return False
        if qu.confirmed:
            qu.confirmed = False
            qu.quiet = 0 if self._writers_busy() else qu.quiet + 1
            if qu.quiet >= QUIET_CHECKS or qu.deferrals >= MAX_DEFERRALS:
                return False
        if not qu.confirm_armed:
            qu.confirm_armed = True
            qu.deferrals += 1
            # Real time, not the injected clock: a scheduling detail, which a test's
            # FakeClock must not stall.
            self.loop.call_later(CONFIRM_DELAY, self._confirm, qu)
        return True

    def _writers_busy(self) -> bool:
        # A write in progress is most likely the busy process's next claim.
        try:
            return self.store.writer_busy()
        except Exception:
            return False

    def _confirm(self, qu: DispatchQueue) -> None:
        qu.confirm_armed = False
        qu.confirmed = True
        self.kick(qu.name)

    def _gate_closed(self) -> bool:
        return not self.accepting or self.paused

    def _kick_later(self, name: str) -> None:
        loop = self.loop
        if loop is not None:
            call_later(loop, self.clock, self.poll_interval, lambda: self.kick(name))

    # -- execution ------------------------------------------------------------------

    def _start(
        self,
        qu: DispatchQueue,
        job: ClaimedJob,
        stale_before: int | None = None,
        mark: Any = None,
    ) -> None:
        assert self.loop is not None
        if stale_before is not None and job.started_at < stale_before and self._rescued(job):
            return
        current = self.inflight.get(job.id)
        if current is not None and current.attempt == job.attempt:
            # We were judged dead while still running this job, its row was reset, and we
            # claimed it again. Never run a job twice at once in one process
            # (tests/engine/test_reclaim.py): the running execution holds the same
            # (worker, attempt) claim, so its outcome settles this new claim too.
            log.warning("job %s is already running in this worker; its claim is adopted", job.id)
            return
        spec = self.handlers[job.type]
        attempt = Attempt(
            self,
            spec,
            job.id,
            job.attempt,
            qu.name,
            _loads_dict(job.metadata),
            job.parent_id,
            job.schedule_id,
        )
        attempt.started_ms = job.started_at
        attempt.workflow_id = job.workflow_id
        attempt.job = job
        attempt.fence_mark = mark
        attempt.claimed_at = self.ahead.claimed()
        self.inflight[job.id] = attempt
        if not spec.is_async:
            if spec.is_process:
                self.proc_inflight += 1
            else:
                self.sync_inflight += 1
        qu.running += 1
        # No done callback: `_run` ends with `ensure_outcome` itself. Only a task
        # cancelled before its first step never runs it; `abort` and
        # `settle_unstarted` see to those (docs/benchmarks.md, twenty-eighth round).
        # Named by its job, which a task dump (`asyncio.all_tasks()`) then shows; a name
        # given costs no more than the "Task-N" asyncio formats for an unnamed task.
        attempt.task = self.loop.create_task(self._run(attempt, job), name=TASK_PREFIX + job.id)

    def ensure_outcome(self, attempt: Attempt) -> None:
        """As the attempt's task ends (`_run`'s last step), or after a task cancelled
        before its first step, which never ran its body (`abort`, `settle_unstarted`):
        an attempt that submitted no outcome is interrupted. Idempotent."""
        if attempt.claimed_at:
            attempt.claimed_at = 0.0  # its claim leaves the claim-ahead count once
            if self.ahead.dropped():
                self._pass_the_turn()
        if not attempt.submitted:
            if not attempt.token.is_set():
                attempt.token.fire("shutdown", "the job's task was cancelled")
            job = attempt.job
            assert job is not None  # set by `_start` before the task exists
            self._submit(self._interrupted(attempt, job))

    def settle_unstarted(self) -> None:
        """Settle attempts whose task was cancelled before its first step by someone
        other than `abort` (a framework cancelling every task): nothing else would, and
        their claims would hold the claim-ahead budget for good. The heartbeat calls it."""
        for attempt in list(self.inflight.values()):
            task = attempt.task
            if attempt.claimed_at and task is not None and task.done():
                self.ensure_outcome(attempt)

    def _rescued(self, job: ClaimedJob) -> bool:
        """This process stalled (a freeze, a long pause) between the claim of `job` and
        now, long enough to be judged dead: whether its row went to another claim
        meanwhile. One read tells."""
        row = self.store.get(job.id)
        if row is not None and (row[L.C_STATUS], row[L.C_WORKER], row[L.C_ATTEMPT]) == (
            "running",
            self.worker_id,
            job.attempt,
        ):
            return False
        log.warning("job %s was rescued while this worker stalled; not run here", job.id)
        return True

    async def _run(self, attempt: Attempt, job: ClaimedJob) -> None:
        """One attempt: decode, call the handler, classify, hand the outcome to finalize.

        A stall can also fall between `_start` (which checked the claim's age) and this
        first step of the task: claims made just before a SIGSTOP start their handlers
        only after SIGCONT. So the age is checked again here; a job rescued meanwhile is
        not run (its outcome, `requeue`, then misses its fence and writes nothing).
        Before, such handlers ran beside the rescued jobs' new runs (bench/chaos.py,
        SQLite seed 2: 16 handlers under a global cap of 8).

        However it ends (an early return, an error of ours, a cancel), its last step is
        `ensure_outcome`: an attempt that submitted nothing is interrupted."""
        try:
            claimed_at, attempt.claimed_at = attempt.claimed_at, 0.0
            ahead = self.ahead
            if ahead.started(claimed_at):
                self._pass_the_turn()  # a claim was cut short: the loop has caught up
            # The claim-ahead's real-time start lag gates it: nothing more on the hot path.
            stale_after = self.stale_after_ms
            if (
                ahead.late
                and stale_after is not None
                and self.now_ms() - job.started_at > stale_after
                and self._rescued(job)
            ):
                return  # `ensure_outcome` submits its outcome, which misses its fence
            spec = attempt.spec
            if worker_log.isEnabledFor(logging.INFO):
                log_start(attempt)
            if spec.is_process:
                await self._run_in_child(attempt, job)
                return
            try:
                payload = spec.job_type.decode(job.payload)
            except Exception as exc:
                self._submit(self._failed(attempt, job, "JOB_PAYLOAD_INVALID", str(exc), False))
                return
            ctx: JobContext[Any] = JobContext(attempt, payload, attempt.metadata)
            inst = tracing.instruments()
            traced = None if inst is None else self._process_span(inst, attempt, job)
            raised: BaseException | None = None
            # Async handlers are also cancelled on timeout; plain ones only see the token.
            self._arm_timeout(attempt, job.timeout_ms)
            try:
                if spec.is_async:
                    result = await spec.execute(ctx)
                else:
                    loop = self.loop
                    assert loop is not None
                    pool = self._pool
                    if pool is None:
                        pool = self._pool = ThreadPoolExecutor(
                            self._pool_size, thread_name_prefix="jobledger"
                        )
                    execute: Callable[[JobContext[Any]], Any] = spec.execute
                    if traced is not None:  # the thread runs in the span's context too
                        execute = functools.partial(contextvars.copy_context().run, spec.execute)  # type: ignore[call-arg]
                    # Shielded: a cancel of this task must not abandon the thread's result.
                    result = await asyncio.shield(loop.run_in_executor(pool, execute, ctx))
            except asyncio.CancelledError:
                attempt.token.fire("shutdown", "the job's task was cancelled")
                outcome = self._interrupted(attempt, job)
            except Exception as exc:
                raised = exc
                if worker_log.isEnabledFor(logging.DEBUG):
                    log_raised(attempt, exc)
                if attempt.committed is not None:  # `ctx.transaction()` completed the job
                    log.warning("job %s raised after its transaction committed: %r", job.id, exc)
                    outcome = (attempt.committed[0], attempt)
                else:
                    outcome = self._from_exception(attempt, job, exc)
            else:
                if attempt.committed is not None:  # what the handler returned is ignored
                    outcome = (attempt.committed[0], attempt)
                else:
                    outcome = self._completed(attempt, job, result)
            finally:
                deadlines = self._deadlines
                if attempt.timing and deadlines is not None:  # armed, and has not expired
                    deadlines.disarm(attempt)
            if traced is not None:
                error = outcome[0].error
                traced.end(outcome[0].kind, None if error is None else json.loads(error), raised)
            self._submit(outcome)
        finally:
            # (Not when the collector closes it after its loop closed: nothing can run.)
            if not attempt.submitted and self.loop is not None and not self.loop.is_closed():
                self.ensure_outcome(attempt)

    def group_committer(self) -> GroupCommitter | None:
        """`async with ctx.transaction()`'s group commit on this loop (a store that
        offers one: SQLite), made on first use; None when called off the loop."""
        loop = self.loop
        if loop is None or asyncio._get_running_loop() is not loop:
            return None
        committer = self._group_committer
        if committer is None:
            make = getattr(self.store, "group_tx", None)
            if make is None:
                return None
            committer = self._group_committer = GroupCommitter(make(), loop, self.now_ms)
        return committer

    def completion_in_tx(self, attempt: Attempt, value: Any) -> Outcome:
        """The `completed` outcome `ctx.transaction()` commits (the output validated as a
        returned value is); a value that cannot be stored raises, rolling it back."""
        output = encode_result(attempt.spec.encode_output, value)
        if type(output) is not str:  # what `_completed` would fail the attempt with
            error = cast(JobError, output)
            raise JobValidationError(error.message, code=error.code)
        outcome = self._outcome(attempt, "completed", output=output)[0]
        # Read back only when something here wants the row, as for any finalize
        # (`_flush`): a row not read answers APPLIED and settles by `_settle_unread`.
        outcome.want_row = self._wants_row(attempt)
        return outcome

    async def _run_in_child(self, attempt: Attempt, job: ClaimedJob) -> None:
        """One attempt of a process handler (`_runtime/processes.py`): the child decodes,
        runs and encodes; this maps how it ended to the outcome the thread path writes."""
        pool = self.processes
        if pool is None:
            from jobledger._runtime.processes import ProcessPool

            assert self.loop is not None
            pool = self.processes = ProcessPool(self._proc_size, self.loop, self.clock)
        inst = tracing.instruments()
        traced = None if inst is None else self._process_span(inst, attempt, job)
        try:
            end = await pool.run(attempt, job)
        except asyncio.CancelledError:
            attempt.token.fire("shutdown", "the job's task was cancelled")
            outcome = self._interrupted(attempt, job)
        except Exception as exc:  # no child could be started (spawn failed)
            log.warning("job %s: no child process could run it", job.id, exc_info=True)
            outcome = self._failed(
                attempt,
                job,
                "JOB_HANDLER_THREW",
                f"no child process could run the handler: {exc}",
                True,
                {"exception": type(exc).__name__},
            )
        else:
            outcome = self._child_outcome(attempt, job, end)
        if traced is not None:
            error = outcome[0].error
            traced.end(outcome[0].kind, None if error is None else json.loads(error), None)
        self._submit(outcome)

    def _child_outcome(
        self, attempt: Attempt, job: ClaimedJob, end: End
    ) -> tuple[Outcome, Attempt]:
        """The outcome of a child's end, classified as `_completed`/`_from_exception`
        classify a thread's: by the token's reason first, never by a message."""
        kind, data = end
        if kind == "done":
            return self._outcome(attempt, "completed", output=data)
        if kind == "unstarted":  # its token fired before a child took it
            attempt.token.fire("shutdown", "the process pool closed")
            return self._interrupted(attempt, job)
        if kind != "error" and attempt.token.is_set():
            return self._interrupted(attempt, job)  # raised or killed after its token fired
        if kind == "died":
            from jobledger._runtime.processes import describe_death

            message, params = describe_death(data)
            return self._failed(attempt, job, "JOB_HANDLER_THREW", message, True, params)
        info = json.loads(data)
        if kind == "error":
            return self._failed(
                attempt, job, info["code"], info["message"], info["retryable"], info["params"]
            )
        tb = info["traceback"]
        if info["permanent"]:
            return self._failed(
                attempt, job, info["code"], info["job_message"], False, info["params"], tb
            )
        params = {"exception": info["exception"]}
        if "code" in info:
            params["code"] = info["code"]
        return self._failed(attempt, job, "JOB_HANDLER_THREW", info["message"], True, params, tb)

    def _workers_free(self, proc: bool) -> int:
        """Free pool threads, or free child processes (`proc`), for a plain handler's queue."""
        if proc:
            return self._proc_slots - self.proc_inflight
        return self._pool_size - self.sync_inflight

    def _process_span(
        self, inst: tracing.Instruments, attempt: Attempt, job: ClaimedJob
    ) -> tracing.Process:
        return tracing.Process(
            inst,
            queue=attempt.queue,
            job_id=job.id,
            type_name=job.type,
            attempt=job.attempt,
            metadata=attempt.metadata,
        )

    def _arm_timeout(self, attempt: Attempt, timeout_ms: int | None) -> None:
        if timeout_ms is not None and self.loop is not None:
            self._deadlines_of().arm(attempt, timeout_ms / 1000)

    def _deadlines_of(self) -> Deadlines:
        """The handler timeouts of this engine's loop (`_runtime/deadlines.py`)."""
        deadlines = self._deadlines
        if deadlines is None or deadlines.loop is not self.loop:
            assert self.loop is not None
            if deadlines is not None:
                deadlines.close()
            deadlines = self._deadlines = Deadlines(self.loop, self.clock)
        return deadlines

    def abort(self, attempt: Attempt, reason: Any, message: str) -> bool:
        """Fire the token and, for async handlers, cancel the handler's task."""
        fired = attempt.token.fire(reason, message)
        if fired:
            spec = attempt.spec
            if spec.is_async:
                task = attempt.task
                if task is not None:
                    task.cancel()
                    if attempt.claimed_at:  # not started: its body, and `_run`'s end, never run
                        task.add_done_callback(attempt.task_done)
            elif spec.is_process and self.processes is not None:
                self.processes.signal(attempt)  # through the pipe; killed after a grace
        return fired

    # -- outcomes -------------------------------------------------------------------

    def _outcome(self, attempt: Attempt, kind: Any, **kw: Any) -> tuple[Outcome, Attempt]:
        return (
            Outcome(
                job_id=attempt.job_id,
                worker_id=self.worker_id,
                attempt=attempt.attempt,
                kind=kind,
                progress=attempt.progress if attempt.progress_dirty else None,
                progress_detail=attempt.progress_detail if attempt.progress_dirty else None,
                release_locks=bool(attempt.locks),
                started_at=attempt.started_ms,
                logs=_logs_json(attempt),
                claimed=attempt.job,
                **kw,
            ),
            attempt,
        )

    def _completed(self, attempt: Attempt, job: ClaimedJob, result: Any) -> tuple[Outcome, Attempt]:
        # A declared result type is validated and dumped by its adapter; otherwise the
        # value is dumped as JSON (`registry.encode_result`, which process handlers use too).
        output = encode_result(attempt.spec.encode_output, result)
        if type(output) is str:
            return self._outcome(attempt, "completed", output=output)
        error = cast(JobError, output)
        return self._failed(attempt, job, error.code, error.message, False, error.params)

    def _failed(
        self,
        attempt: Attempt,
        job: ClaimedJob,
        code: str,
        message: str,
        retryable: bool,
        params: dict[str, Any] | None = None,
        traceback: str | None = None,
    ) -> tuple[Outcome, Attempt]:
        info = JobErrorInfo(code, message, retryable, params or {}, traceback)
        if retryable and attempt.attempt + 1 < job.max_attempts:
            delay = compute_backoff(attempt.spec.retry, attempt.attempt + 1)
            retry_at = self.now_ms() + int(delay * 1000)
            return self._outcome(attempt, "retry", error=error_to_json(info), retry_at=retry_at)
        return self._outcome(attempt, "failed", error=error_to_json(info))

    def _interrupted(self, attempt: Attempt, job: ClaimedJob) -> tuple[Outcome, Attempt]:
        token = attempt.token
        if token.reason == "timeout":
            return self._failed(
                attempt, job, "JOB_HANDLER_TIMEOUT", token.message or "timed out", True
            )
        if token.reason == "shutdown" and attempt.spec.recovery != "abandon":
            # A deploy is not a failure: the row is work again, its attempt
            # not spent, claimable at once by the next worker.
            return self._outcome(attempt, "requeue")
        info = JobErrorInfo(
            code="JOB_CANCELLED",
            message=token.message or "cancelled",
            retryable=False,
            params={"reason": token.reason},
        )
        return self._outcome(attempt, "cancelled", error=error_to_json(info))

    def _from_exception(
        self, attempt: Attempt, job: ClaimedJob, exc: Exception
    ) -> tuple[Outcome, Attempt]:
        if attempt.token.is_set():
            return self._interrupted(attempt, job)
        tb = format_traceback(exc)
        if isinstance(exc, PermanentError):
            return self._failed(attempt, job, exc.code, exc.message, False, dict(exc.params), tb)
        message = str(exc) or type(exc).__name__
        params = {"exception": type(exc).__name__}
        if isinstance(exc, JobError):
            params["code"] = exc.code
        return self._failed(attempt, job, "JOB_HANDLER_THREW", message, True, params, tb)

    # -- grouped finalize -----------------------------------------------------------

    def _submit(self, item: tuple[Outcome, Attempt]) -> None:
        item[1].submitted = True
        self._buffer.append(item)
        if not self._flush_scheduled and self.loop is not None:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._buffer = self._buffer, []
        if not batch:
            return
        if self.closed:
            log.warning(
                "%d job(s) finished after stop(); their rows are left for recovery", len(batch)
            )
            for _, attempt in batch:
                self._release(attempt)
                attempt.done.set()
            return
        now = self.now_ms()
        for outcome, attempt in batch:
            if attempt.committed is None:
                # With its claim (`Outcome.claimed`) the store builds the row, reading
                # back a few columns.
                outcome.want_row = self._wants_row(attempt)
        # Jobs a handler's `ctx.transaction()` completed are written already: only their
        # settling (slots, handles, on_settled) happens here, from the committed row.
        outcomes = [o for o, a in batch if a.committed is None]
        spread: SpreadRequest | None = None
        refill: tuple[DispatchQueue, ClaimRequest] | None = None
        mixed = False
        if self.global_blocked:
            spread = self._spread_refill(batch)
        else:
            refill = self._refill(batch)
            if refill is None:
                spread = self._mixed_refill(batch)
                mixed = spread is not None
        claimed: ClaimResult | None = None
        try:
            written, claimed = self._write_outcomes(outcomes, now, refill, spread)
        except Exception as exc:
            self._keep(batch, exc, claim_tried=refill is not None or spread is not None)
            return
        if len(outcomes) == len(batch):
            rows = written
        else:
            pending = iter(written)
            rows = [next(pending) if a.committed is None else a.committed[1] for _, a in batch]
        if self._write_failures:
            log.warning(
                "finalize works again after %d failed attempt(s); outcomes written",
                self._write_failures,
            )
            self._write_failures = 0
        if worker_log.isEnabledFor(logging.WARNING):  # ends are INFO, or WARNING if failed
            log_ends(batch, rows, now)
        tried = refill is not None or spread is not None
        if tried and claimed is None and not self._gate_closed():
            # The refill's claim raised (a closed gate means it never ran): did it commit?
            self._unconfirmed = True
        kicks: set[str] = set()
        workflows: list[str] | None = None
        for (outcome, attempt), row in zip(batch, rows, strict=True):
            self._release(attempt)
            kicks.add(attempt.queue)
            if attempt.workflow_id is not None and row is not None:
                if workflows is None:
                    workflows = []
                workflows.append(attempt.job_id)
            if row is None:
                if attempt.kept or attempt.job_id in self.waiters:
                    # A waiter on a job running here is not read at await time
                    # (`JobManager._wait_finished`): the row ended otherwise (rescued
                    # elsewhere, force-cancelled), so read it now.
                    self._settle_after_doubt(attempt)
                attempt.done.set()
            elif outcome.kind == "retry" and row[L.C_STATUS] == "delayed":
                self.on_delayed(int(row[L.C_SCHEDULED_AT]))
                self.publish_row(row)
                attempt.done.set()
            elif outcome.kind == "requeue" and row[L.C_STATUS] == "pending":
                self.publish_row(row)
                attempt.done.set()
            elif row is APPLIED:
                self._settle_unread(attempt)
            else:
                self.settle_row(row, attempt)
        if workflows:
            try:
                self.on_workflow_step(workflows)
            except Exception:
                # The rows are committed; another process's watcher, or the next look,
                # finds the released jobs.
                log.exception("following workflow(s) %s after a finalize failed", workflows)
        if mixed and spread is not None:
            self._take_mixed(spread, claimed, kicks)
            return
        if spread is not None:
            if claimed is not None:
                self._take_spread(spread, claimed)
            else:
                self._schedule_spread()
            return
        if claimed is not None and refill is not None:
            kicks.discard(refill[0].name)  # claimed already: kicked again only if it filled
        if self.global_blocked:
            for name in kicks:  # they rejoin the turns, behind the queues waiting
                self._turns.setdefault(name, False)
            self._schedule_spread()
        else:
            for name in kicks:
                self.kick(name)
        if claimed is not None and refill is not None:
            self._take(refill[0], claimed, refill[1].limit)

    def _keep(
        self, batch: list[tuple[Outcome, Attempt]], exc: Exception, *, claim_tried: bool
    ) -> None:
        """The outcomes' write failed (busy past the coordinator, a full disk, a lost
        server): keep them, slots and handles included, and write them again later. A
        live worker never leaves its own rows `running`; the rows hold their SQL slots
        meanwhile, so the caps stay exact."""
        self._write_failures += 1
        for _, attempt in batch:
            attempt.kept = True
        self._buffer = batch + self._buffer
        delay = min(max(self.poll_interval, 0.01) * 2 ** min(self._write_failures, 8), 1.0)
        if self._write_failures == 1:
            log.warning(
                "finalize of %d job(s) failed (%s); kept, retrying in %.2gs (backoff to 1 s)",
                len(batch),
                exc,
                delay,
                exc_info=True,
            )
        else:
            log.debug("finalize retry %d failed: %s", self._write_failures, exc)
        if claim_tried:
            self._unconfirmed = True  # a refill claim rode in the failed transaction
        loop = self.loop
        self._flush_scheduled = True  # new outcomes join this retry, not hammer the database
        if loop is None or loop.is_closed():
            self._flush_scheduled = False
            return
        call_later(loop, self.clock, delay, self._flush)

    def _settle_after_doubt(self, attempt: Attempt) -> None:
        """A kept outcome's fence did not match on the retry: an earlier attempt at the
        write may have committed after all (a connection lost at COMMIT), or the job was
        rescued meanwhile. Read the row to tell."""
        try:
            row = self.store.get(attempt.job_id)
        except Exception:
            log.debug("reading %s after a doubtful finalize failed", attempt.job_id, exc_info=True)
            return
        if row is None or row[L.C_STATUS] not in _TERMINAL:
            return
        if row[L.C_WORKER] == self.worker_id and row[L.C_ATTEMPT] == attempt.attempt:
            self.settle_row(row, attempt)  # ours: the first write did commit
        else:
            self._resolve(attempt.job_id, row_snapshot(row))

    def reconcile(self) -> bool:
        """Put back claims whose commit could not be confirmed (a claim that raised: on
        PostgreSQL it may have committed on the server all the same). Rows this engine
        runs are kept. False while the database still fails."""
        if not self._unconfirmed:
            return True
        try:
            released = self.store.release_unconfirmed_claims(
                self.worker_id, list(self.inflight), self.now_ms()
            )
        except Exception:
            log.debug("reconciling unconfirmed claims failed; retrying", exc_info=True)
            return False
        self._unconfirmed = False
        if released:
            log.warning("put back %d claim(s) whose commit could not be confirmed", released)
        return True

    def _write_outcomes(
        self,
        outcomes: list[Outcome],
        now: int,
        refill: tuple[DispatchQueue, ClaimRequest] | None,
        spread: SpreadRequest | None = None,
    ) -> tuple[list[JobRow | None], ClaimResult | None]:
        if refill is not None:
            qu, request = refill
            with qu.lock:
                if not self._gate_closed():  # re-checked under the lock, as in `_dispatch`
                    return self.store.finalize_and_claim(outcomes, now, request)
        elif spread is not None:
            with self._spread_locks(spread):
                if not self._gate_closed():
                    return self.store.finalize_and_claim(outcomes, now, spread)
        if not outcomes:  # every outcome was committed by its handler's transaction
            return [], None
        return self.store.finalize(outcomes, now), None

    def _refill(
        self, batch: list[tuple[Outcome, Attempt]]
    ) -> tuple[DispatchQueue, ClaimRequest] | None:
        """The claim that rides in the finalize's transaction, when every outcome is of
        one queue: what that queue may claim once they are released (`_dispatch`'s
        arithmetic). None when there is nothing to claim, or when the global cap turned
        queues away (freed slots go to those queues first: `_pass_the_turn`)."""
        if self.global_blocked or self._gate_closed() or self._unconfirmed:
            return None
        name = batch[0][1].queue
        qu = self.queues.get(name)
        if qu is None or any(a.queue != name for _, a in batch):
            return None
        mine = [a for _, a in batch if self.inflight.get(a.job_id) is a]
        own_free = self._own_free(len(mine))
        if qu.sync:
            if qu.proc:
                sync_mine = sum(1 for a in mine if a.spec.is_process)
            else:
                sync_mine = sum(1 for a in mine if _in_thread(a.spec))
            own_free = min(own_free, self._workers_free(qu.proc) + sync_mine)
        limit = min(qu.concurrency - qu.running + len(batch), own_free, self.claim_batch)
        if limit <= 0:
            return None
        request = ClaimRequest(
            qu.name,
            qu.cap,
            self.global_max,
            limit,
            self.worker_id,
            tuple(self.handlers),
            self.exclude_owners,
            True,
            qu.rate,
            qu.keyed,
        )
        return qu, request

    def _mixed_refill(self, batch: list[tuple[Outcome, Attempt]]) -> SpreadRequest | None:
        """The claim that rides in the finalize's transaction when its outcomes are of
        several queues and the global cap turned none away: the slots the batch frees in
        each of those queues, in one statement across them (the spread claim's), where a
        claim per queue used to follow the commit, each a transaction of its own. None
        when the batch is of one queue (`_refill`), or a queue in it is claimed alone (a
        keyed rate limit)."""
        if self.global_blocked or self._gate_closed() or self._unconfirmed:
            return None
        released = Counter(a.queue for _, a in batch)
        if len(released) < 2:
            return None
        picked: list[DispatchQueue] = []
        room = 0
        for name, n in released.items():
            qu = self.queues.get(name)
            if qu is None or qu.keyed:
                return None
            free = qu.concurrency - qu.running + n
            if free > 0:
                picked.append(qu)
                room += free
        if not picked:
            return None
        mine = [a for _, a in batch if self.inflight.get(a.job_id) is a]
        limit = min(room, self._own_free(len(mine)), self.claim_batch)
        request = self._spread_of(picked, limit, self._sync_free(mine), 1)
        return request if request.limit > 0 else None

    def _take_mixed(
        self, request: SpreadRequest, result: ClaimResult | None, kicks: set[str]
    ) -> None:
        """After a finalize that carried `_mixed_refill`'s claim: start what it took, and
        kick the batch's queues that may take more (as `_take` kicks a queue whose claim
        filled its limit), or every one of them if the claim did not run."""
        if result is None:
            for name in kicks:
                self.kick(name)
            return
        if result.unregistered or result.free is None or result.global_blocked:
            # The global cap binds after all (or the worker row is gone): the batch's
            # queues join the turns, and the claim is read as the spread refill it is.
            for name in kicks:
                self._turns.setdefault(name, False)
            self._take_spread(request, result)
            return
        asked = {name for name, _ in request.queues}
        self._start_spread(result)
        cut = len(result.jobs) >= request.limit
        taken = Counter(job.queue for job in result.jobs)
        free = result.free
        for name in kicks:
            qu = self.queues.get(name)
            if qu is None:
                continue
            if name not in asked:
                self.kick(name)
                continue
            room = free.get(name, 0)
            qu.turned_away = room <= 0 and qu.running == 0
            if cut and taken.get(name, 0) < room:
                self.kick(name)  # it may have more: claimed on its own, as after `_take`

    def _own_free(self, released: int = 0) -> int:
        """Jobs this process may still claim: what it may run at once beyond what it runs
        (`released`: of those, the ones the finalize a claim rides in ends), and no more
        than its loop can start promptly (`_runtime/ahead.py`)."""
        return self.ahead.limit(self.local_max - len(self.inflight) + released)

    def _pass_the_turn(self) -> None:
        """Slots may have freed (a raised process limit): claim them in turn."""
        if self.global_blocked:
            self._schedule_spread()
        else:
            self.kick_all()

    # -- spread claims (docs/design/lock-layers.md, "Dispatch at scale") --------------

    def _schedule_spread(self) -> None:
        if self._spread_pending or self.loop is None or not self.accepting:
            return
        self._spread_pending = True
        self.loop.call_soon(self._spread)

    def _spread_later(self) -> None:
        loop = self.loop
        if loop is not None:
            call_later(loop, self.clock, self.poll_interval, self._schedule_spread)

    def _spread(self) -> None:
        """One claim across the queues at the head of the turns."""
        self._spread_pending = False
        if self._gate_closed():
            return
        own_free = self._own_free()
        if own_free <= 0:
            self.global_blocked = True  # our own jobs' ends (or starts) claim next
            return
        request = self._spread_request(
            min(own_free, self.claim_batch),
            (self._workers_free(False), self._workers_free(True)),
            {},
        )
        if request is None:
            if not self._turns:
                self.global_blocked = False
            return
        if self._unconfirmed and not self.reconcile():
            self._spread_later()
            return
        with self._spread_locks(request):
            if self._gate_closed():  # re-checked under the locks, as in `_dispatch`
                return
            try:
                result = self.store.claim_spread(request, self.now_ms())
            except Exception:
                log.warning("claim across queues failed; retrying shortly", exc_info=True)
                self._unconfirmed = True
                self._spread_later()
                return
        self._take_spread(request, result)

    def _spread_request(
        self, limit: int, sync_free: tuple[int, int], released: dict[str, int]
    ) -> SpreadRequest | None:
        """The spread claim of up to `limit` rows over the head of the turns; `sync_free`:
        the free pool threads and child processes; `released`: jobs per queue that the
        finalize this claim rides in ends."""
        if limit <= 0:
            return None
        want = min(limit + SPREAD_SLACK, SPREAD_MAX)
        picked: list[DispatchQueue] = []
        drop: list[str] = []
        first = False  # a queue asked waits for its first turn
        for name, waiting in self._turns.items():
            qu = self.queues.get(name)
            if qu is None or qu.running - released.get(name, 0) >= qu.concurrency:
                drop.append(name)  # full here: it comes back when one of its jobs ends
                continue
            if qu.keyed:
                # Claimed on its own (a keyed window is counted per row): its turn is a
                # claim of its own, which counts the global cap in SQL too.
                drop.append(name)
                self.kick(name)
                continue
            if qu.sync and sync_free[qu.proc] <= 0:
                continue  # waits for a pool thread (or child), keeping its place
            picked.append(qu)
            first = first or waiting
            if len(picked) >= want:
                break
        for name in drop:
            del self._turns[name]
        if not picked:
            return None
        turn = 1 if first else TURN_JOBS
        if turn > 1:
            del picked[-(-limit // turn) + SPREAD_SLACK :]  # fewer queues fill the slots
        return self._spread_of(picked, limit, sync_free, turn)

    def _spread_of(
        self, picked: list[DispatchQueue], limit: int, sync_free: tuple[int, int], turn: int
    ) -> SpreadRequest:
        """A claim of up to `limit` rows across `picked`, in that order, `turn` rows a
        queue per turn; no more than the free pool threads (or children) when a queue of
        plain handlers is among them."""
        for proc in (False, True):
            if any(qu.sync and qu.proc is proc for qu in picked):
                limit = min(limit, sync_free[proc])
        return SpreadRequest(
            tuple((qu.name, qu.cap) for qu in picked),
            self.global_max,
            limit,
            self.worker_id,
            tuple(self.handlers),
            self.exclude_owners,
            True,
            tuple((qu.name, *qu.rate) for qu in picked if qu.rate is not None),
            turn,
        )

    def _sync_free(self, mine: list[Attempt]) -> tuple[int, int]:
        """Free pool threads and child processes once `mine` (jobs of this process that
        a finalize ends) are released."""
        return (
            self._workers_free(False) + sum(1 for a in mine if _in_thread(a.spec)),
            self._workers_free(True) + sum(1 for a in mine if a.spec.is_process),
        )

    def _spread_locks(self, request: SpreadRequest) -> AbstractContextManager[None]:
        """Layer 1 for a spread claim: the asked queues' locks, always in name order (a
        single-queue claim holds one), so two claims never wait on each other in a cycle."""
        queues = self.queues
        return _holding(
            [qu.lock for name in sorted(n for n, _ in request.queues) if (qu := queues.get(name))]
        )

    def _spread_refill(self, batch: list[tuple[Outcome, Attempt]]) -> SpreadRequest | None:
        """The spread claim that rides in the finalize's transaction while the global cap
        binds: the slots the batch frees, in turn. The batch's queues rejoin the turns
        at the end (they were served last)."""
        released = Counter(a.queue for _, a in batch)
        for name in released:
            self._turns.setdefault(name, False)
        if self._gate_closed() or self._unconfirmed:
            return None
        mine = [a for _, a in batch if self.inflight.get(a.job_id) is a]
        own_free = self._own_free(len(mine))
        return self._spread_request(
            min(own_free, self.claim_batch), self._sync_free(mine), released
        )

    def _take_spread(self, request: SpreadRequest, result: ClaimResult) -> None:
        if result.unregistered or result.free is None:
            if result.unregistered:
                log.warning(
                    "worker %s has no worker row; registering before it claims", self.worker_id
                )
                try:
                    self.on_unregistered()
                except Exception:
                    log.warning("registering again failed; retrying", exc_info=True)
                self._spread_later()
            else:  # the global cap was full before anything was counted per queue
                self.global_blocked = True
            return
        # Cut: the claim took every slot it was allowed (the global cap's free slots or
        # this process's), so queues not reached keep their place at the head.
        cut = result.global_blocked or len(result.jobs) >= request.limit
        taken = Counter(job.queue for job in result.jobs)
        turns, free = self._turns, result.free
        for name, _ in request.queues:
            got, room = taken.get(name, 0), free.get(name, 0)
            if got == 0 and room > 0 and cut:
                continue  # not reached: keeps its place
            turns.pop(name, None)
            if 0 < got < room and cut:
                turns[name] = False  # served, and may have more: to the end
            elif room <= 0 and (qu := self.queues.get(name)) is not None and qu.running == 0:
                qu.turned_away = True  # its cap is held elsewhere, as `_take` notes
            # Otherwise full (back when one of its jobs ends, or with the next change
            # another process commits) or run dry (back when a job is enqueued).
        self._start_spread(result)
        if cut:
            self.global_blocked = True
            if turns and not result.global_blocked and self._own_free() > 0:
                # Cut by the claim's batch size, not by a cap: the next queues in turn
                # claim now, as `_take` kicks a queue whose claim filled its limit.
                self._schedule_spread()
        elif turns:
            self.global_blocked = True
            self._schedule_spread()  # slots are left: the next queues in turn
        else:
            self.global_blocked = False

    def _start_spread(self, result: ClaimResult) -> None:
        """What a claim across queues learnt of their settings, and its jobs started."""
        for name, cap in (result.caps or {}).items():
            qu = self.queues.get(name)
            if qu is not None:
                qu.concurrency = cap
        for name, at_ms in (result.rate_waits or {}).items():
            qu = self.queues.get(name)
            if qu is not None:
                self._arm_rate(qu, at_ms)
        stale = (
            None
            if self.stale_after_ms is None or not result.jobs
            else self.now_ms() - self.stale_after_ms
        )
        for job in result.jobs:
            qu = self.queues.get(job.queue)
            if qu is not None:
                self._start(qu, job, stale, result.mark)

    def _wants_row(self, attempt: Attempt) -> bool:
        """Does anything here need the terminal row (a waiter, a listener, a hook)?"""
        return (
            attempt.job_id in self.waiters
            or self.events.wants(attempt.job_id)
            or attempt.spec.on_settled is not None
            or self.on_settled_row is not _ignore_row
        )

    def _settle_unread(self, attempt: Attempt) -> None:
        """Committed without reading the row back: nobody wanted it when it was written."""
        if attempt.job_id in self.waiters:  # a waiter came from another thread meanwhile
            row = self.store.get(attempt.job_id)
            if row is not None:
                self.settle_row(row, attempt)
                return
        attempt.done.set()

    def _release(self, attempt: Attempt) -> None:
        if self.inflight.get(attempt.job_id) is attempt:
            del self.inflight[attempt.job_id]
            spec = attempt.spec
            if not spec.is_async:
                if spec.is_process:
                    self.proc_inflight -= 1
                else:
                    self.sync_inflight -= 1
        qu = self.queues.get(attempt.queue)
        if qu is not None:
            qu.running -= 1

    def settle_row(self, row: JobRow, attempt: Attempt | None = None) -> None:
        """After COMMIT of a terminal write: resolve, publish, run on_settled."""
        job_id = row[_C_ID]
        waiting = self.waiters.pop(job_id, None)
        spec = self.handlers.get(row[_C_TYPE])
        hook = spec.on_settled if spec is not None else None
        publish = self.events.wants(job_id)
        snap: JobSnapshot | None = None
        if waiting is not None or hook is not None or publish:
            # Decoded on first use (`row_snapshot`): a handle's caller often reads
            # `status` alone, and one is made for every job a handle waits on.
            snap = row_snapshot(row)
            if waiting is not None:
                _set_all(waiting, snap)
            if publish:
                self.events.publish(JobEvent("snapshot", job_id, snapshot=snap))
        self.on_settled_row(row)
        if hook is None or snap is None or self.loop is None:
            if attempt is not None:
                attempt.done.set()
            return
        task = self.loop.create_task(
            self._run_on_settled(hook, snap, attempt), name=f"jobledger on_settled {job_id}"
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _run_on_settled(
        self, hook: Callable[[SettledEvent], Any], snap: JobSnapshot, attempt: Attempt | None
    ) -> None:
        event = SettledEvent(
            job_id=snap.id,
            type=snap.type,
            status=snap.status,
            payload=snap.payload,
            output=snap.output,
            error=snap.error,
            attempt=snap.attempt,
            metadata=snap.metadata,
            parent_id=snap.parent_id,
            schedule_id=snap.schedule_id,
        )
        try:
            result = hook(event)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                await result
        except Exception:
            log.exception("on_settled of %s raised; ignored", snap.type)
        finally:
            if attempt is not None:
                attempt.done.set()

    def publish_row(self, row: JobRow) -> None:
        job_id = row[L.C_ID]
        if self.events.wants(job_id):
            self.events.publish(JobEvent("snapshot", job_id, snapshot=snapshot_from_row(row)))

    def publish_progress(self, job_id: str, progress: float, detail: str | None) -> None:
        if not self.events.wants(job_id):
            return
        loop = self.loop
        event = JobEvent("progress", job_id, progress=progress, detail=detail)
        if loop is None or _on_loop(loop):
            self.events.publish(event)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self.events.publish, event)

    # -- waiting for results --------------------------------------------------------

    def add_waiter(self, job_id: str, fut: asyncio.Future[JobSnapshot]) -> None:
        """Wait with `fut` too, where `waiters.setdefault(job_id, fut)` found another
        waiter (`JobManager._wait_finished` puts the first; any thread may wait)."""
        waiters = self.waiters
        with self._waiters_lock:
            now = waiters.get(job_id)  # resolved meanwhile (popped): the new one alone
            if now is None:
                waiters[job_id] = fut
            elif isinstance(now, list):
                now.append(fut)
            else:
                waiters[job_id] = [now, fut]

    def _resolve(self, job_id: str, snap: JobSnapshot) -> None:
        waiting = self.waiters.pop(job_id, None)
        if waiting is not None:
            _set_all(waiting, snap)

    def resolve_terminal(self, rows: Iterable[JobRow]) -> None:
        for row in rows:
            self._resolve(row[L.C_ID], row_snapshot(row))

    def settling(self) -> list[asyncio.Task[None]]:
        """The on_settled hooks still running."""
        return list(self._settling)

    def drop_waiters(self) -> None:
        """Shutdown: pending `finished` futures are abandoned, never failed."""
        self.waiters.clear()

    def shutdown_pool(self) -> None:
        deadlines, self._deadlines = self._deadlines, None
        if deadlines is not None:
            deadlines.close()  # its timer, left for an entry at the head (deadlines.py)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def close_processes(self) -> None:
        """Stop the child processes (manager stop, after the shutdown drain)."""
        pool, self.processes = self.processes, None
        if pool is not None:
            await pool.aclose()


_TERMINAL = frozenset({"completed", "failed", "cancelled"})


def _in_thread(spec: HandlerSpec[Any]) -> bool:
    return not spec.is_async and not spec.is_process


def _ignore_workflows(job_ids: list[str]) -> None:
    return None


def _ignore_row(row: JobRow) -> None:
    return None


def _set_all(waiting: Waiting, snap: JobSnapshot) -> None:
    """Resolve a job's waiters with its snapshot: on this thread's running loop directly,
    on another loop through its thread-safe call."""
    running = asyncio._get_running_loop()
    futures = waiting if isinstance(waiting, list) else (waiting,)
    for fut in futures:
        loop = fut.get_loop()
        if loop is running:
            if not fut.done():
                fut.set_result(snap)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_set_if_pending, fut, snap)


def _set_if_pending(fut: asyncio.Future[JobSnapshot], snap: JobSnapshot) -> None:
    if not fut.done():
        fut.set_result(snap)


def _logs_json(attempt: Attempt) -> str | None:
    """The attempt's kept `ctx.logger` lines as stored: `[[at_ms, level, message], ...]`,
    led by a note of how many older lines the bounds dropped."""
    lines = attempt.log_lines()
    if not lines:
        return None
    rows: list[list[Any]] = [[to_ms(x.at), x.level, x.message] for x in lines]
    dropped = attempt.log_lines_dropped()
    if dropped:
        rows.insert(0, [rows[0][0], "INFO", f"[{dropped} earlier line(s) dropped]"])
    return json.dumps(rows, ensure_ascii=False)


TRACEBACK_CAP = 16 * 1024  # bytes of UTF-8 kept of a handler's traceback


def format_traceback(exc: BaseException) -> str:
    """The formatted traceback, its end kept when it is over the cap (the raising frame
    and the message are at the end)."""
    text = "".join(traceback.format_exception(exc))
    data = text.encode("utf-8", "replace")
    if len(data) <= TRACEBACK_CAP:
        return text
    marker = "[... traceback cut to its last 16 KiB ...]\n"
    tail = data[-(TRACEBACK_CAP - len(marker)) :].decode("utf-8", "ignore")
    return marker + tail


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _loads_dict(text: str) -> dict[str, Any]:
    if text == "{}":  # the default metadata; most jobs carry nothing else
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


@contextmanager
def _holding(locks: list[threading.Lock]) -> Iterator[None]:
    """Hold `locks`, taken in the given order and released in reverse. A spread claim
    holds up to 128 of them: an ExitStack cost 0.34 us a lock here, this 0.09."""
    taken = 0
    try:
        for lock in locks:
            lock.acquire()
            taken += 1
        yield
    finally:
        for lock in reversed(locks[:taken]):
            lock.release()
