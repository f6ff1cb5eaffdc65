"""`JobManager`: the public facade over the store, the engine and the background loops.

Roles in one object: a producer (`enqueue*` works from any thread, before `start()` and
after `stop()`), a worker (once started, it runs handlers on its asyncio loop), and an
observer (`get`, `list`, `count`, events). The table is the only source of truth; every
in-memory structure here (handlers, queues, in-flight attempts, waiters) is a view
rebuilt from it.

The facade owns no loop. A started manager's background duties are services on one
`services.Runtime`, built by `lifecycle.Lifecycle` from what they use (store, engine,
clock, handlers, settings, the `queues.QueueBook`):
    promoter  moves due `delayed` rows to `pending` and kicks their queues (promoter.py)
    workers   heartbeat, leader lease, rescue and GC (lifecycle.py, _core/recovery.py)
    jobs      the quiet window, the recovery flow, the bounded shutdown (lifecycle.py)
    watcher   notices commits of other processes: finished jobs, new queues, cancel
              requests, delayed rows, schedules (watcher.py; in a never-started manager
              it runs only while handles wait)
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Generic, Literal, TypeAlias, final, overload

from typing_extensions import TypeVar

from jobledger._core.audit import audit_detail, audit_entry, check_audit_field
from jobledger._core.backoff import RetryPolicy
from jobledger._core.enqueue import (
    UNSET,
    EnqueueOptions,
    JobSpec,
    key_rule,
    prepare_row,
    prepare_rows,
)
from jobledger._core.limits import (
    MAX_INT,
    MAX_TIMEOUT_SECONDS,
    bad_name_char,
    findable,
    has_surrogate,
    is_finite_number,
)
from jobledger._core.rate import RateLimit, parse_rate, stored_rate
from jobledger._core.registry import (
    MAX_PAYLOAD_BYTES,
    HandlerSpec,
    JobHandler,
    JobType,
    QueueOption,
)
from jobledger._core.search import parse_search, parse_search_field
from jobledger._runtime import tracing
from jobledger._runtime.context import JobContext
from jobledger._runtime.engine import Engine
from jobledger._runtime.events import EventBus, JobEvent
from jobledger._runtime.handle import JobHandle
from jobledger._runtime.lifecycle import DRAIN_TIMEOUT, Hold, Lifecycle, WorkerSettings
from jobledger._runtime.queues import QueueBook
from jobledger._runtime.retry import (
    MAX_RETRY_MANY,
    check_retry_id,
    not_found,
    not_retryable,
    retry_filter,
    retry_payload,
)
from jobledger._runtime.timers import wait_with_timeout
from jobledger._runtime.transactions import JobTransaction, WriteTx, spoiled_error
from jobledger._runtime.workflow import Workflow, WorkflowHandle
from jobledger._scheduling.job_schedules import HostState, JobSchedules, snapshot_of
from jobledger._scheduling.overlap import Overlap
from jobledger._scheduling.triggers import CatchUpPolicy, SkipMissed, Trigger
from jobledger._storage import layout as L
from jobledger._storage.interface import (
    JobFilter,
    JobRow,
    KeyRule,
    NewJob,
    NewWorkflow,
    Store,
    fresh_row,
    was_inserted,
)
from jobledger._storage.observe import STATUSES, QueueSettingsRecord
from jobledger._storage.open import Synchronous, open_store
from jobledger._storage.rows import (
    attempt_snapshot,
    error_to_json,
    snapshot_from_row,
    workflow_info,
    workflow_snapshot,
)
from jobledger._storage.settings import by_queue
from jobledger._types import (
    AttemptSnapshot,
    AuditEntry,
    CancelManyResult,
    CancelOutcome,
    DrainVerdict,
    Executor,
    Explanation,
    JobErrorInfo,
    JobSnapshot,
    JobStatus,
    QueueInfo,
    QueueLimits,
    RecoveryStrategy,
    ScheduleSnapshot,
    WorkflowInfo,
    WorkflowSnapshot,
)
from jobledger.clock import Clock, SystemClock
from jobledger.errors import HandlerRegistrationError, JobError, JobNotFound, JobValidationError

__all__ = ["JobManager", "ManagerState", "WriteTx"]

ManagerState = Literal["new", "started", "stopping", "stopped"]

log = logging.getLogger("jobledger")

P = TypeVar("P")
# A job type's result type: Any when it declares none (see R in _core/registry.py).
R = TypeVar("R", default=Any)
_Q = TypeVar("_Q")


@final
class _PayloadOfJobType(Generic[_Q]):
    """Never made: only a marker inside `PayloadOf`."""

    __slots__ = ()


# The type of an enqueue's payload: exactly the values `P` has (nothing is ever a
# `_PayloadOfJobType`), but the callable type inside makes mypy infer `P` from
# `job_type` first and check the payload against it in a second pass. With a bare `P`
# mypy solves both at once, and a payload of the wrong type yields only "Cannot infer
# value of type parameter "P""; this way it is `Argument 2 to "enqueue" of "JobManager"
# has incompatible type "WrongModel"; expected "Resize | ..."`
# (tests/typing/test_payload_types.py).
PayloadOf: TypeAlias = P | _PayloadOfJobType[Callable[[], P]]


@final
class _HandlerOfJobType(Generic[_Q]):
    """Never made: only a marker inside `HandlerOf`."""

    __slots__ = ()


# What `register_handler(job_type, handler)` takes: a `JobHandler[P, R]`, made so for
# the reason of `PayloadOf`: with a bare `JobHandler[P, R]`, a handler of the wrong
# result type yields only "Cannot infer value of type parameter "R""; this way mypy
# reads `R` off `job_type` and names the handler's class and the expected
# `JobHandler[Resize, Thumb]` (tests/typing/test_result_types.py).
HandlerOf: TypeAlias = JobHandler[P, R] | _HandlerOfJobType[Callable[[], JobHandler[P, R]]]
# What `@jobs.handler(job_type)` takes: a function of the context returning the type's
# result, or an awaitable of it. Undeclared, R is Any and so is any return type.
Handler: TypeAlias = Callable[[JobContext[P]], Awaitable[R] | R]
# A workflow factory (`workflow_handler`): builds the graph of one job's workflow.
WorkflowBuilder: TypeAlias = Callable[[JobContext[P], Workflow], Awaitable[None] | None]
MAX_REASON = 500
LIST_CAP = 1000
_TYPE, _STATUS, _QUEUE, _SCHEDULED_AT = (
    L.C_TYPE,
    L.C_STATUS,
    L.C_QUEUE,
    L.C_SCHEDULED_AT,
)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_INT


def _check_count(name: str, value: object) -> None:
    if not _is_count(value):
        raise JobValidationError(f"{name} must be an integer >= 1", code="JOB_INVALID_OPTION")


def _check_process_max(value: object) -> None:
    if value is not None and not _is_count(value):
        raise JobValidationError(
            "process_max_concurrency must be an integer >= 1, or None for no limit beyond the caps",
            code="JOB_INVALID_OPTION",
        )


class JobManager:
    """A durable job queue on one SQLite file (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str] = "jobledger.db",
        *,
        global_max_concurrency: int = 50,
        startup_delay: float = 60.0,
        clock: Clock | None = None,
        worker_id: str | None = None,
        heartbeat_interval: float = 5.0,
        worker_timeout: float = 30.0,
        gc_retention: float = 7 * 24 * 3600.0,
        gc_interval: float = 3600.0,
        poll_interval: float = 0.05,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 1.0,
        leader_ttl: float = 15.0,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        claim_batch: int = 64,
        process_max_concurrency: int | None = None,
        thread_pool_size: int = 16,
        process_pool_size: int | None = None,
        shutdown_grace: float = DRAIN_TIMEOUT,
    ) -> None:
        _check_count("global_max_concurrency", global_max_concurrency)
        _check_process_max(process_max_concurrency)
        _check_count("thread_pool_size", thread_pool_size)
        if process_pool_size is not None:
            _check_count("process_pool_size", process_pool_size)
        _check_count("claim_batch", claim_batch)
        _check_count("max_payload_bytes", max_payload_bytes)
        for name, value in (
            ("startup_delay", startup_delay),
            ("heartbeat_interval", heartbeat_interval),
            ("worker_timeout", worker_timeout),
            ("gc_retention", gc_retention),
            ("gc_interval", gc_interval),
            ("poll_interval", poll_interval),
            ("leader_ttl", leader_ttl),
            ("shutdown_grace", shutdown_grace),
            ("busy_timeout", busy_timeout),
        ):
            _seconds(name, value)
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise JobValidationError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}",
                code="JOB_INVALID_OPTION",
            )
        if worker_id is not None and (
            not isinstance(worker_id, str)
            or not 1 <= len(worker_id) <= 200
            or bad_name_char(worker_id)
        ):
            raise JobValidationError(
                "worker_id must be 1-200 characters without control characters",
                code="JOB_INVALID_OPTION",
            )
        try:
            self.path = os.fspath(path)
        except TypeError:
            raise JobValidationError(
                f"the database must be a path or a URL, not {path!r}", code="JOB_INVALID_OPTION"
            ) from None
        if not isinstance(self.path, str) or bad_name_char(self.path):
            raise JobValidationError(
                "the database path must be a str without control characters",
                code="JOB_INVALID_OPTION",
                params={"path": repr(self.path)},
            )
        self.clock: Clock = clock or SystemClock()
        self._settings = WorkerSettings(
            worker_id=worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            startup_delay=float(startup_delay),
            heartbeat_interval=float(heartbeat_interval),
            worker_timeout=float(worker_timeout),
            gc_retention=float(gc_retention),
            gc_interval=float(gc_interval),
            poll_interval=float(poll_interval),
            leader_ttl=float(leader_ttl),
            shutdown_grace=float(shutdown_grace),
        )
        self.max_payload_bytes = max_payload_bytes
        self._store: Store = open_store(
            self.path, synchronous=synchronous, busy_timeout=busy_timeout
        )
        self._handlers: dict[str, HandlerSpec[Any]] = {}
        self._keyed = False  # a handler has a keyed rate limit (`_rate_keys`)
        self._events = EventBus()
        self._engine = Engine(
            self._store,
            self.clock,
            self.worker_id,
            self._handlers,
            self._events,
            global_max_concurrency=global_max_concurrency,
            poll_interval=self.poll_interval,
            claim_batch=claim_batch,
            thread_pool_size=thread_pool_size,
            process_pool_size=process_pool_size,
        )
        self._engine.limit_process(process_max_concurrency)  # checked above
        self._engine.on_delayed = self._on_delayed
        self._engine.on_workflow_step = self._after_workflow_finalize
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopping = False
        self._stopped = False
        self._tasks: list[asyncio.Task[Any]] = []
        self._waiter = self._wait_finished  # one bound method for every handle
        # Guards `engine.unread`: awaited handles whose rows are still to be read, all in
        # one `terminal_among` on the next turn of the loop (see `_wait_finished`).
        self._unchecked_lock = threading.Lock()
        self._check_loop: asyncio.AbstractEventLoop | None = None  # where it is scheduled
        self._queues = QueueBook(self._store, self._engine)
        self._lifecycle = Lifecycle(
            self._store, self._engine, self.clock, self._handlers, self._settings, self._queues
        )
        self._schedules = JobSchedules(
            self._store,
            self.clock,
            self._handlers,
            worker_id=self.worker_id,
            max_payload_bytes=self.max_payload_bytes,
            now_ms=self._engine.now_ms,
            after_enqueue=self._after_enqueue,
            state=lambda: HostState(self._loop, self._started, self._stopping),
        )
        self._lifecycle.schedules = self._schedules

    # -- options (read at each use; the CLI sets some between construction and start) -

    @property
    def worker_id(self) -> str:
        return self._settings.worker_id

    @property
    def startup_delay(self) -> float:
        """Seconds after `start()` before dead workers' rows are recovered."""
        return self._settings.startup_delay

    @startup_delay.setter
    def startup_delay(self, value: float) -> None:
        self._settings.startup_delay = _seconds("startup_delay", value)

    @property
    def shutdown_grace(self) -> float:
        """Seconds `stop()` waits for running handlers before it interrupts them."""
        return self._settings.shutdown_grace

    @shutdown_grace.setter
    def shutdown_grace(self, value: float) -> None:
        self._settings.shutdown_grace = _seconds("shutdown_grace", value)

    @property
    def heartbeat_interval(self) -> float:
        return self._settings.heartbeat_interval

    @property
    def worker_timeout(self) -> float:
        return self._settings.worker_timeout

    @property
    def gc_retention(self) -> float:
        return self._settings.gc_retention

    @property
    def gc_interval(self) -> float:
        return self._settings.gc_interval

    @property
    def poll_interval(self) -> float:
        return self._settings.poll_interval

    @property
    def leader_ttl(self) -> float:
        return self._settings.leader_ttl

    # -- registration ---------------------------------------------------------------

    @overload
    def handler(
        self,
        job_type: JobType[P, R],
        *,
        recovery: RecoveryStrategy,
        concurrency: int = 1,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        queue: QueueOption = None,
        cancel_timeout: float = 30.0,
        rate_limit: RateLimit | None = None,
        executor: Executor | None = None,
        max_jobs_per_child: int | None = None,
    ) -> Callable[[Handler[P, R]], Callable[[JobContext[P]], Any]]: ...

    @overload
    def handler(
        self,
        job_type: JobType[P, R],
        *,
        recovery: RecoveryStrategy,
        concurrency: int = 1,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        queue: Callable[[P], str],
        cancel_timeout: float = 30.0,
        rate_limit: RateLimit | None = None,
        executor: Executor | None = None,
        max_jobs_per_child: int | None = None,
    ) -> Callable[[Handler[P, R]], Callable[[JobContext[P]], Any]]: ...

    def handler(
        self,
        job_type: JobType[P, R],
        *,
        recovery: RecoveryStrategy,
        concurrency: int = 1,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        queue: QueueOption | Callable[[P], str] = None,
        cancel_timeout: float = 30.0,
        rate_limit: RateLimit | None = None,
        executor: Executor | None = None,
        max_jobs_per_child: int | None = None,
    ) -> Callable[[Handler[P, R]], Callable[[JobContext[P]], Any]]:
        """Register the decorated function (async or plain) as `job_type`'s handler.

        When `job_type` declares a result type `R`, the function must return `R` (an
        `async def` one, `Awaitable[R]`): mypy names both types otherwise.

        `executor` is how it runs: "async" (an `async def`, on the loop), "thread" (a
        plain `def`, in the thread pool) or "process" (a module-level `def`, in a child
        process of the worker's pool, killed at its timeout and replaced after
        `max_jobs_per_child` jobs); default from the function."""

        def register(fn: Handler[P, R]) -> Callable[[JobContext[P]], Any]:
            spec = HandlerSpec.build(
                job_type,
                fn,
                recovery=recovery,
                concurrency=concurrency,
                timeout=timeout,
                retry=retry,
                queue=queue,
                cancel_timeout=cancel_timeout,
                rate_limit=rate_limit,
                executor=executor,
                max_jobs_per_child=max_jobs_per_child,
            )
            self._add(spec)
            return fn

        return register

    def register_handler(self, job_type: JobType[P, R], handler: HandlerOf[P, R]) -> None:
        """Register a `JobHandler` instance (the class form, with hooks)."""
        self._add(HandlerSpec.from_class(job_type, handler))

    def _add(self, spec: HandlerSpec[Any]) -> None:
        if spec.name in self._handlers:
            raise HandlerRegistrationError(
                f"a handler for {spec.name!r} is already registered",
                code="JOB_HANDLER_ALREADY_REGISTERED",
                params={"type": spec.name},
            )
        self._handlers[spec.name] = spec
        if spec.rate_limit is not None and spec.rate_limit.key is not None:
            self._keyed = True  # enqueues compute keys from now on (`_rate_keys`)

    def has_handler(self, job_type: JobType[Any] | str) -> bool:
        return _type_name(job_type) in self._handlers

    @property
    def process_max_concurrency(self) -> int | None:
        """At most this many jobs running in this process at once (None: only the caps).

        Settable at any time, e.g. by `jobledger worker --process-max-concurrency`; it
        applies from the next claim on."""
        return self._engine.process_max

    @process_max_concurrency.setter
    def process_max_concurrency(self, value: int | None) -> None:
        _check_process_max(value)
        self._engine.limit_process(value)

    @property
    def job_types(self) -> dict[str, JobType[Any]]:
        return {name: spec.job_type for name, spec in self._handlers.items()}

    def _resolve(
        self, job_type: JobType[P, R] | str
    ) -> tuple[JobType[P, R], HandlerSpec[Any] | None]:
        if isinstance(job_type, JobType):
            return job_type, self._handlers.get(job_type.name)
        spec = self._handlers.get(job_type) if isinstance(job_type, str) else None
        if spec is None:
            raise JobValidationError(
                f"no handler is registered for job type {job_type!r}",
                code="JOB_UNKNOWN_TYPE",
                params={"type": repr(job_type), "known_types": sorted(self._handlers)},
            )
        return spec.job_type, spec

    # -- enqueue --------------------------------------------------------------------

    def enqueue(
        self,
        job_type: JobType[P, R] | str,
        payload: PayloadOf[P],
        *,
        queue: str | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        timeout: float | None = UNSET,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_id: str | None = None,
        unique_for: float | timedelta | None = None,
        debounce: float | timedelta | None = None,
    ) -> JobHandle[R]:
        """Write one job (committed before this returns) and return its handle."""
        opts = EnqueueOptions(
            queue,
            priority,
            idempotency_key,
            run_at,
            delay,
            timeout,
            max_attempts,
            metadata,
            parent_id,
        )
        if unique_for is not None or debounce is not None:
            opts.unique_for, opts.debounce = unique_for, debounce
            jt, new = self._prepare(job_type, payload, opts)
            return self._enqueue_keyed(jt, [new], [key_rule(opts)], None)[0]
        jt, new = self._prepare(job_type, payload, opts)
        inst = tracing.instruments()
        if inst is None:
            row = self._store.enqueue_rows((new,), rate_keys=self._rate_keys((new,)))[0]
        else:
            row = tracing.traced_send(inst, (new,), self._plain_write(None))[0]
        self._after_one(new, row)
        return JobHandle(self._waiter, row, jt)

    def enqueue_many(
        self,
        job_type: JobType[P, R] | str,
        payloads: Sequence[PayloadOf[P] | JobSpec[P]],
        *,
        queue: str | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        timeout: float | None = UNSET,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_id: str | None = None,
        unique_for: float | timedelta | None = None,
        debounce: float | timedelta | None = None,
    ) -> list[JobHandle[R]]:
        """Write every entry in one transaction, in order; any invalid entry writes nothing."""
        opts = EnqueueOptions(
            queue,
            priority,
            idempotency_key,
            run_at,
            delay,
            timeout,
            max_attempts,
            metadata,
            parent_id,
        )
        if unique_for is not None or debounce is not None:
            opts.unique_for, opts.debounce = unique_for, debounce
        jt, spec = self._resolve(job_type)
        own_rules: dict[int, KeyRule] = {}
        new = prepare_rows(
            jt,
            spec,
            payloads,
            opts,
            now_ms=self._engine.now_ms(),
            enqueued_by=self.worker_id,
            max_payload_bytes=self.max_payload_bytes,
            rules=own_rules,
        )
        if not new:
            return []
        if own_rules or unique_for is not None or debounce is not None:
            # The call's rule only where an entry took the call's options (valid then).
            plain = [not isinstance(entry, JobSpec) for entry in payloads]
            call = key_rule(opts) if any(plain) else None
            rules = [call if p else own_rules.get(i) for i, p in enumerate(plain)]
            return self._enqueue_keyed(jt, new, rules, None)
        inst = tracing.instruments()
        if inst is None:
            rows = self._store.enqueue_rows(new, rate_keys=self._rate_keys(new))
        else:
            rows = tracing.traced_send(inst, new, self._plain_write(None))
        self._after_rows(new, rows)
        return [JobHandle(self._waiter, row, jt) for row in rows]

    # -- workflows (DESIGN.md §8.8; _runtime/workflow.py) ------------------------------

    def workflow(self, name: str) -> Workflow:
        """A new workflow builder; nothing is written until its `enqueue()`."""
        return Workflow(self, name)

    def workflow_handler(
        self,
        job_type: JobType[P, Any],
        *,
        name: str | None = None,
        queue: QueueOption = None,
        concurrency: int = 1,
        retry: RetryPolicy | None = None,
    ) -> Callable[[WorkflowBuilder[P]], WorkflowBuilder[P]]:
        """Register the decorated function as `job_type`'s handler, run as a workflow
        factory: a job of `job_type` calls it with its context and a fresh builder
        (`jobs.workflow(name)`, `name` defaulting to the type's), then enqueues the
        graph it built and completes with `{"workflow_id": ...}`. So a schedule of
        `job_type` fires a workflow at each fire, and `jobs.enqueue(job_type, payload)`
        starts one through a queue.

        The workflow's id is the job's own id, so an attempt that runs again (a
        retry, a recovery after a crash) finds the workflow written already and writes
        no second one. The function may be `async def`; it must only build the graph
        (its `enqueue` is the handler's)."""
        workflow_name = job_type.name if name is None else name
        Workflow(self, workflow_name)  # a bad name fails here, not at the first fire

        def register(build: WorkflowBuilder[P]) -> WorkflowBuilder[P]:
            async def start(ctx: JobContext[P]) -> dict[str, str]:
                wf = Workflow(self, workflow_name)
                built = build(ctx, wf)
                if inspect.isawaitable(built):
                    await built
                return {"workflow_id": wf._enqueue_once(ctx.job_id).id}

            self.handler(
                job_type,
                recovery="retry",
                queue=queue,
                concurrency=concurrency,
                retry=retry,
            )(start)
            return build

        return register

    def get_workflow(self, workflow_id: str) -> WorkflowSnapshot | None:
        """The workflow and its jobs as stored now, or None for an unknown id."""
        if not findable(workflow_id, "workflow_id"):
            return None
        head = self._store.get_workflow(workflow_id)
        if head is None:
            return None
        store = self._store
        return workflow_snapshot(
            head, store.workflow_jobs(workflow_id), store.workflow_edges(workflow_id)
        )

    def retry_workflow(self, workflow_id: str) -> WorkflowHandle:
        """Re-run a finished workflow from its failed and cancelled steps on: one new
        workflow (`retry_of` naming the old one) of every step that did not complete,
        each with fresh jobs of its old payloads, written in one transaction; the
        completed steps are not re-run, and their outputs are the new steps'
        `ctx.upstream` as before. The old rows are not touched.

        JOB_NOT_FOUND for an unknown id; JOB_NOT_RETRYABLE while any job of it has not
        finished, or when every one completed."""
        if not findable(workflow_id, "workflow_id"):
            raise _workflow_not_found(workflow_id)
        plan = self._store.retry_workflow(
            workflow_id, enqueued_by=self.worker_id, now_ms=self._engine.now_ms()
        )
        if plan is None:
            raise _workflow_not_found(workflow_id)
        if isinstance(plan, str):
            why = "has jobs still to finish" if plan == "running" else "has no failed step"
            raise JobError(
                f"workflow {workflow_id!r} {why}; only a finished workflow with a failed or "
                "cancelled step can be retried",
                code="JOB_NOT_RETRYABLE",
                params={"workflow_id": workflow_id, "status": plan},
            )
        self._after_workflow_enqueue(plan)
        handles: dict[str, builtins.list[JobHandle[Any]]] = {}
        for row in plan.rows:
            handles.setdefault(row[L.C_STEP], []).append(
                JobHandle(self._waiter, row, self._job_type_of(row))
            )
        return WorkflowHandle(self, plan.id, plan.name, handles)

    def list_workflows(
        self, *, name: str | None = None, limit: int = 50, offset: int = 0
    ) -> builtins.list[WorkflowInfo]:
        """Workflows newest first (only those called `name`, when given), each with its
        jobs counted per status, not the jobs. `limit` is capped at 1000."""
        _check_page(limit, offset)
        rows = self._store.list_workflows(limit=min(limit, LIST_CAP), offset=offset, name=name)
        return [workflow_info(r) for r in rows]

    def count_workflows(self, *, name: str | None = None) -> int:
        """How many workflows are stored (called `name`, when given)."""
        return self._store.count_workflows(name=name)

    # -- the audit log (DESIGN.md §8.9) --------------------------------------------------

    def record_audit(
        self,
        actor: str,
        action: str,
        target: str,
        detail: Mapping[str, Any] | None = None,
    ) -> AuditEntry:
        """Append an entry to the audit log (what the console writes for every action;
        an app with its own admin screens can write there too). JOB_INVALID_OPTION for an
        empty or control-character field or a `detail` that is not a small JSON object."""
        record = self._store.record_audit(
            self._engine.now_ms(),
            check_audit_field("actor", actor),
            check_audit_field("action", action),
            check_audit_field("target", target),
            audit_detail(detail),
        )
        return audit_entry(record)

    def add_search_index(self, field: str) -> bool:
        """Give a JSON field of the jobs (`"payload.user"`, `"metadata.tenant"`; dots go
        deeper) an index of its own, so that a search by it (`jobs.list(search=
        "payload.user:u123")`, the dashboard's search box) reads the index instead of
        every row's JSON: milliseconds instead of seconds at a million rows. Safe to call
        at every start: False when the field has its index already.

        Building it reads every row once. On SQLite other writers wait for it (the
        workers' writes are retried, nothing is lost; about a second per 300,000 rows
        here); on PostgreSQL it is built concurrently and writes go on. Afterwards each
        enqueue of a job that has the field writes one more index entry.
        `JOB_INVALID_OPTION` for a field that is not `payload.FIELD` / `metadata.FIELD`."""
        return self._store.add_search_index(parse_search_field(field), self._engine.now_ms())

    def drop_search_index(self, field: str) -> bool:
        """Drop the field's search index; False when it had none. Searches by the field
        still work, reading every row."""
        return self._store.drop_search_index(parse_search_field(field))

    def search_indexes(self) -> builtins.list[str]:
        """The fields with a search index (`add_search_index`), by name."""
        return [r.field for r in self._store.search_indexes()]

    def audit_log(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[AuditEntry]:
        """Audit entries newest first (only `actor`'s or `action`'s, when given); `limit`
        is capped at 1000."""
        _check_page(limit, offset)
        rows = self._store.audit_records(
            limit=min(limit, LIST_CAP), offset=offset, actor=actor, action=action
        )
        return [audit_entry(r) for r in rows]

    async def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> int:
        """Cancel every job of the workflow that has not finished: waiting, pending and
        delayed ones at once (in one transaction), running ones as `cancel` does.
        Returns how many jobs it cancelled or asked to cancel; 0 for an unknown id."""
        _check_reason(reason)
        error = error_to_json(
            JobErrorInfo(
                "JOB_CANCELLED",
                reason or f"workflow {workflow_id} was cancelled",
                False,
                {"reason": "workflow", "workflow_id": workflow_id},
            )
        )
        rows = self._store.cancel_workflow(workflow_id, error, self._engine.now_ms())
        self._settle_rows(rows)
        running = [
            r[L.C_ID] for r in self._store.workflow_jobs(workflow_id) if r[_STATUS] == "running"
        ]
        for job_id in running:
            await self.cancel(job_id, reason=reason)
        return len(rows) + len(running)

    def _settle_rows(self, rows: Sequence[JobRow]) -> None:
        """Rows another write of this process ended: resolve their handles, publish."""
        engine = self._engine
        engine.resolve_terminal(r for r in rows if r[L.C_ID] in engine.waiters)
        if self._events._all:
            for row in rows:
                self._publish_threadsafe(row)

    def _after_workflow_enqueue(self, wf: NewWorkflow) -> None:
        """After COMMIT of a workflow: `_after_rows` for its jobs that may run now."""
        ready = [r for r in wf.rows if r[_STATUS] != "waiting"]
        self._store.remember_queues(list({r[_QUEUE] for r in wf.rows}))
        self._after_rows(ready, ready)

    def _after_workflow_finalize(self, job_ids: list[str]) -> None:
        """After a finalize that ended these jobs of workflows (on the loop): kick the
        queues of the jobs one edge downstream that the release made pending, in one
        query for the batch. Reading each workflow whole instead made a fan-out of N
        jobs cost O(N) per finalize batch (O(N^2) in all). A downstream job found
        cancelled means the cancel may have gone further than one edge: those
        workflows get `_after_workflow_step`'s full look."""
        rows = self._store.downstream_jobs(job_ids)
        whole = {r[L.C_WORKFLOW] for r in rows if r[_STATUS] == "cancelled"}
        if whole:
            self._after_workflow_step(whole)
        engine = self._engine
        for r in rows:
            if r[_STATUS] != "pending" or r[L.C_WORKFLOW] in whole:
                continue
            if engine.ensure_queue(r[_QUEUE], r[_TYPE]):
                self._queues.touch(r[_QUEUE], r[_TYPE])
                engine.kick(r[_QUEUE])

    def _after_workflow_step(self, workflow_ids: set[str]) -> None:
        """After a finalize that ended jobs of these workflows (on the loop): kick the
        queues of their jobs the release made pending, settle those it cancelled."""
        engine = self._engine
        for workflow_id in workflow_ids:
            rows = self._store.workflow_jobs(workflow_id)
            self._settle_rows([r for r in rows if r[_STATUS] == "cancelled"])
            for r in rows:
                if r[_STATUS] == "pending" and engine.ensure_queue(r[_QUEUE], r[_TYPE]):
                    self._queues.touch(r[_QUEUE], r[_TYPE])
                    engine.kick(r[_QUEUE])

    @contextmanager
    def write_tx(self) -> Iterator[WriteTx]:
        """`BEGIN IMMEDIATE` on the job database; commits on exit, rolls back on error.

        Use `enqueue_tx(tx, ...)` inside to make job rows part of the same commit as your
        own writes. Dispatch, events and handle resolution happen only after COMMIT.
        """
        with self._store.user_transaction() as conn:
            wtx = WriteTx(conn, self._store)
            try:
                yield wtx
            finally:
                wtx._open = False
        for fn in wtx._after_commit:
            try:
                fn()
            except Exception:
                log.exception("an after-commit callback failed")

    def enqueue_tx(
        self,
        tx: WriteTx,
        job_type: JobType[P, R] | str,
        payload: PayloadOf[P],
        *,
        queue: str | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        timeout: float | None = UNSET,
        max_attempts: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_id: str | None = None,
        unique_for: float | timedelta | None = None,
        debounce: float | timedelta | None = None,
    ) -> JobHandle[R]:
        """Enqueue inside `tx`: the row commits or rolls back with the caller's writes."""
        self._check_tx(tx)
        opts = EnqueueOptions(
            queue,
            priority,
            idempotency_key,
            run_at,
            delay,
            timeout,
            max_attempts,
            metadata,
            parent_id,
        )
        if unique_for is not None or debounce is not None:
            opts.unique_for, opts.debounce = unique_for, debounce
            jt, new = self._prepare(job_type, payload, opts)
            return self._enqueue_keyed(jt, [new], [key_rule(opts)], tx)[0]
        jt, new = self._prepare(job_type, payload, opts)
        inst = tracing.instruments()
        if inst is None:
            rows = self._store.enqueue_rows((new,), conn=tx.conn, rate_keys=self._rate_keys((new,)))
        else:
            rows = tracing.traced_send(inst, (new,), self._plain_write(tx))
        row = rows[0]
        tx.after_commit(lambda: self._after_one(new, row))
        return JobHandle(self._waiter, row, jt)

    def _plain_write(
        self, tx: WriteTx | None
    ) -> Callable[[Sequence[JobRow]], builtins.list[JobRow]]:
        """How `enqueue` writes fresh rows (`tracing.traced_send` patches them first)."""
        conn = None if tx is None else tx.conn
        return lambda rows: self._store.enqueue_rows(
            rows, conn=conn, rate_keys=self._rate_keys(rows)
        )

    def _enqueue_keyed(
        self,
        jt: JobType[Any, R],
        new: builtins.list[JobRow],
        rules: builtins.list[KeyRule | None],
        tx: WriteTx | None,
    ) -> builtins.list[JobHandle[R]]:
        """Write entries that have a `unique_for` or `debounce` rule (or share a batch with
        one): `Store.enqueue_keyed`, then what `_after_rows` does after COMMIT."""
        conn = None if tx is None else tx.conn

        def write(entries: Sequence[JobRow]) -> builtins.list[JobRow]:
            keys = self._rate_keys(entries)
            return self._store.enqueue_keyed(entries, rules, conn=conn, rate_keys=keys)

        inst = tracing.instruments()
        rows = write(new) if inst is None else tracing.traced_send(inst, new, write)
        if tx is None:
            self._after_keyed(new, rows, rules)
        else:
            tx.after_commit(lambda: self._after_keyed(new, rows, rules))
        return [JobHandle(self._waiter, row, jt) for row in rows]

    def _after_keyed(
        self, new: Sequence[JobRow], rows: Sequence[JobRow], rules: Sequence[KeyRule | None]
    ) -> None:
        self._after_rows(new, rows)
        if not self._started or self._stopping:
            return
        for entry, row, rule in zip(new, rows, rules, strict=True):
            if rule is not None and rule.kind == "debounce" and not was_inserted(entry, row):
                # An existing job, pushed back: it may have been pending until now.
                self._on_delayed_threadsafe(row[_SCHEDULED_AT])

    def _check_tx(self, tx: object) -> None:
        if isinstance(tx, JobTransaction) and tx.spoiled:
            raise spoiled_error()  # its savepoint is gone: a write now would autocommit
        if not isinstance(tx, WriteTx) or tx._store is not self._store or not tx._open:
            raise JobValidationError(
                "this call takes the open tx of this manager's write_tx()",
                code="JOB_INVALID_OPTION",
            )

    def _prepare(
        self, job_type: JobType[Any] | str, payload: Any, opts: EnqueueOptions
    ) -> tuple[JobType[Any], JobRow]:
        """The job type (the registered one, for a name) and the row to write."""
        jt, spec = self._resolve(job_type)
        return jt, prepare_row(
            jt,
            spec,
            payload,
            opts,
            now_ms=self._engine.now_ms(),
            enqueued_by=self.worker_id,
            max_payload_bytes=self.max_payload_bytes,
        )

    def _rate_keys(self, rows: Sequence[JobRow]) -> builtins.list[str | None] | None:
        """Each entry's key under its handler's keyed rate limit (None: no keyed limit
        here, which is also a producer without the handler). A key function that raises
        or answers no key fails the enqueue before anything is written."""
        if not self._keyed:
            return None
        out: builtins.list[str | None] = []
        for row in rows:
            spec = self._handlers.get(row[_TYPE])
            limit = None if spec is None else spec.rate_limit
            if spec is None or limit is None or limit.key is None:
                out.append(None)
                continue
            value = spec.job_type.decode(row[L.C_PAYLOAD])
            try:
                key = limit.key(value)
            except Exception as exc:
                raise JobValidationError(
                    f"the rate limit key of {spec.name!r} raised {type(exc).__name__}: {exc}",
                    code="JOB_INVALID_OPTION",
                    params={"type": spec.name},
                ) from exc
            if (
                not isinstance(key, str)
                or not key
                or len(key) > 200
                or bad_name_char(key) is not None
            ):
                raise JobValidationError(
                    f"the rate limit key of {spec.name!r} returned {key!r}, not a non-empty "
                    "string of at most 200 characters without control characters",
                    code="JOB_INVALID_OPTION",
                    params={"type": spec.name},
                )
            out.append(key)
        return out if any(k is not None for k in out) else None

    def _after_enqueue(self, jobs: Sequence[NewJob], rows: Sequence[JobRow]) -> None:
        """`_after_rows` for entries given as `NewJob`s (the schedules' path)."""
        self._after_rows([fresh_row(job) for job in jobs], rows)

    def _after_rows(self, new: Sequence[JobRow], rows: Sequence[JobRow]) -> None:
        """After COMMIT: remember queues, then dispatch or arm promotion (if started).

        `new` are the entries as prepared, `rows` what the store answered for each: the
        entry itself, or its row under a fresh id, means it was inserted; another job, that
        it hit a live idempotency key (`interface.was_inserted`).
        """
        if len(new) == 1 and len(rows) == 1:
            self._after_one(new[0], rows[0])
            return
        delayed_at: int | None = None
        kicks: dict[str, str] = {}
        queues: set[str] = set()
        for entry, row in zip(new, rows, strict=True):
            if not was_inserted(entry, row):
                continue  # an idempotency hit: nothing new to dispatch or register
            queue = entry[_QUEUE]
            if entry[_STATUS] == "pending":
                kicks[queue] = entry[_TYPE]
            else:
                queues.add(queue)
                at = entry[_SCHEDULED_AT]
                if delayed_at is None or at < delayed_at:
                    delayed_at = at
        # Only inserted entries registered their queue; a hit's queue may not exist.
        queues.update(kicks)
        self._store.remember_queues(list(queues))
        self._queues.touch_many(kicks)
        if self._started and not self._stopping:
            engine = self._engine
            for name, type_name in kicks.items():
                engine.kick_threadsafe(name, type_name)
            if delayed_at is not None:
                self._on_delayed_threadsafe(delayed_at)
        if self._events._all:
            for row in rows:
                self._publish_threadsafe(row)

    def _after_one(self, new: JobRow, row: JobRow) -> None:
        """`_after_rows` of one entry, without the batch's bookkeeping."""
        if was_inserted(new, row):
            queue, type_name = new[_QUEUE], new[_TYPE]
            self._store.remember_queues((queue,))
            pending = new[_STATUS] == "pending"
            if pending:
                self._queues.touch(queue, type_name)
            if self._started and not self._stopping:
                if pending:
                    self._engine.kick_threadsafe(queue, type_name)
                else:
                    self._on_delayed_threadsafe(new[_SCHEDULED_AT])
        if self._events._all:
            self._publish_threadsafe(row)

    def _publish_threadsafe(self, row: JobRow) -> None:
        loop = self._loop
        event = JobEvent("snapshot", row[L.C_ID], snapshot=snapshot_from_row(row))
        if loop is None or _on_loop(loop):
            self._events.publish(event)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._events.publish, event)

    # -- flow control (DESIGN.md §8.7) ------------------------------------------------

    def pause_queue(self, queue: str) -> QueueLimits:
        """Stop claims on `queue` in every process, persisted across restarts; enqueues
        still land and running jobs finish. `resume_queue` lifts it."""
        return self._change_queue(queue, {"paused": True})

    def resume_queue(self, queue: str) -> QueueLimits:
        return self._change_queue(queue, {"paused": False})

    def set_queue_limits(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        rate_limit: RateLimit | str | None = None,
    ) -> QueueLimits:
        """Set the queue's cap and rate limit in the database, for every process from its
        next claim and across restarts; each replaces the handler's. `None` clears it
        (the handler's applies again). `rate_limit` is a `jl.RateLimit` or a string such
        as `"10/s"`. A pause is left as it is."""
        queue = _check_queue(queue)
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise JobValidationError(
                f"concurrency must be an integer >= 1, or None to clear it, not {concurrency!r}",
                code="JOB_INVALID_OPTION",
            )
        if isinstance(rate_limit, str):
            rate_limit = parse_rate(rate_limit)
        elif rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise JobValidationError(
                f"rate_limit must be a jl.RateLimit, a string such as '10/s', or None, "
                f"not {rate_limit!r}",
                code="JOB_INVALID_OPTION",
            )
        return self._change_queue(
            queue,
            {
                "concurrency": concurrency,
                "rate_limit": None if rate_limit is None else rate_limit.limit,
                "rate_per_ms": None if rate_limit is None else rate_limit.per_ms,
            },
        )

    def queue_limits(self, queue: str) -> QueueLimits:
        """What is set for `queue` in the database (None fields: nothing set)."""
        queue = _check_queue(queue)
        for record in self._store.queue_settings():
            if record.queue == queue:
                return _limits(queue, record)
        return _limits(queue, None)

    def list_queues(self) -> builtins.list[QueueInfo]:
        """Every queue (registered, named by a row, or with settings): jobs per status,
        the oldest pending job's time and what is set for it, by name."""
        rows = by_queue(self._store.queue_counts(), self._store.queue_settings())
        return [
            QueueInfo(
                name,
                None if c is None else c.type,
                dict(zip(STATUSES, c.counts if c else (0,) * len(STATUSES), strict=True)),
                None
                if c is None or c.oldest_pending_at is None
                else datetime.fromtimestamp(c.oldest_pending_at / 1000, UTC),
                _limits(name, record),
            )
            for name, c, record in rows
        ]

    def _change_queue(self, queue: str, changes: dict[str, Any]) -> QueueLimits:
        queue = _check_queue(queue)
        record = self._store.update_queue_settings(queue, changes, self._engine.now_ms())
        loop = self._engine.loop
        if loop is not None and not loop.is_closed():
            if _on_loop(loop):
                self._engine.settings_changed(queue)
            else:
                loop.call_soon_threadsafe(self._engine.settings_changed, queue)
        return _limits(queue, record)

    # -- re-runs --------------------------------------------------------------------

    def retry(self, job_id: str, *, payload: Any = UNSET) -> JobHandle:
        """Write a new job that re-runs the terminal job `job_id` and return its handle.

        The new job has the old one's type, queue, priority, metadata, max_attempts,
        timeout and parent, its payload unless `payload` is given (validated as by
        `enqueue`: against the handler's type when this manager has one, else as JSON),
        attempt 0 and `retry_of == job_id`; no idempotency key. The old row is not
        touched. JOB_NOT_FOUND for an unknown id, JOB_NOT_RETRYABLE for a job that is
        not completed, failed or cancelled.
        """
        job_id = check_retry_id(job_id)
        text: str | None = None
        if payload is not UNSET:
            old = self._store.get(job_id)
            if old is None:
                raise not_found(job_id)
            if old[_STATUS] not in TERMINAL_NAMES:
                raise not_retryable(job_id, old[_STATUS])
            text = retry_payload(
                old,
                self._handlers.get(old[_TYPE]),
                payload,
                max_bytes=self.max_payload_bytes,
            )
        status, new = self._store.retry_job(
            job_id, text, enqueued_by=self.worker_id, now_ms=self._engine.now_ms()
        )
        if status is None:
            raise not_found(job_id)
        if new is None:
            raise not_retryable(job_id, status)
        self._after_one(new, new)
        return JobHandle(self._waiter, new, self._job_type_of(new))

    def retry_many(
        self,
        *,
        status: JobStatus | str | Sequence[JobStatus | str] = "failed",
        queue: str | None = None,
        type: JobType[Any] | str | None = None,
        search: str | None = None,
        limit: int = MAX_RETRY_MANY,
    ) -> builtins.list[JobHandle]:
        """`retry` of every terminal job that matches, in one transaction, oldest first:
        at most `limit` (1-1000) of them, and only jobs no job re-runs yet, so a second
        call goes on where a `limit` stopped. `status` is one terminal status or a list
        of them (default "failed"); `search` a term of `list`'s search language. The
        payloads are the old ones."""
        _check_filter_values(queue=queue, type=type)
        term = None if search is None else parse_search(search)
        flt = retry_filter(status, queue, None if type is None else _type_name(type), limit, term)
        rows = self._store.retry_matching(
            flt, limit, enqueued_by=self.worker_id, now_ms=self._engine.now_ms()
        )
        if rows:
            self._after_rows(rows, rows)
        return [JobHandle(self._waiter, row, self._job_type_of(row)) for row in rows]

    def _job_type_of(self, row: JobRow) -> JobType[Any] | None:
        """The registered job type of a row, which decodes its handle's result."""
        spec = self._handlers.get(row[_TYPE])
        return None if spec is None else spec.job_type

    # -- cancel ---------------------------------------------------------------------

    async def cancel(self, job_id: str, reason: str | None = None) -> CancelOutcome:
        """Cancel one job; docs/reference/api.md lists the three outcomes."""
        _check_reason(reason)
        if not findable(job_id, "job_id"):
            return "not-cancellable"
        message = f"Job cancelled: {reason}" if reason else "Job cancelled"
        error = error_to_json(
            JobErrorInfo(
                "JOB_CANCELLED", reason or "Cancelled by user", False, {"reason": "cancel"}
            )
        )
        local = self._engine.inflight.get(job_id)
        if local is not None:
            # The token first, before any write: a handler holding the write lock in
            # `ctx.transaction()` can then leave it, and the write below need not wait.
            self._engine.abort(local, "cancel", message)
        status, _worker, row = self._store.request_cancel(
            job_id, reason, error, self._engine.now_ms()
        )
        if status is None:
            return "not-cancellable"
        if row is not None:
            self._engine.settle_row(row)
            workflow_id = row[L.C_WORKFLOW]
            if workflow_id is not None:  # its cancel may have cancelled or released others
                self._after_workflow_step({workflow_id})
            return "cancelled"
        if status != "running":
            return "not-cancellable"
        engine = self._engine
        attempt = engine.inflight.get(job_id)
        grace = self._cancel_grace(job_id)
        if attempt is not None:
            engine.abort(attempt, "cancel", message)
            if await wait_with_timeout(self.clock, attempt.done.wait(), grace):
                return "cancelled"
            forced = self._store.force_cancel(
                job_id,
                self.worker_id,
                attempt.attempt,
                error_to_json(
                    JobErrorInfo(
                        "JOB_CANCELLED",
                        f"Cancel timed out after {grace:g}s"
                        + (f" (reason: {reason})" if reason else ""),
                        False,
                        {"reason": "cancel"},
                    )
                ),
                engine.now_ms(),
            )
            if forced is not None:
                engine.settle_row(forced)
            return "timed-out"
        # Running in another process: its watcher sees cancel_requested and fires the token.
        ended = await wait_with_timeout(self.clock, self._until_terminal(job_id), grace)
        if ended:
            row = self._store.get(job_id)
            if row is not None and row[L.C_STATUS] == "cancelled":
                return "cancelled"
        return "timed-out"

    async def _until_terminal(self, job_id: str) -> None:
        while True:
            row = self._store.get(job_id)
            if row is None or row[L.C_STATUS] in ("completed", "failed", "cancelled"):
                return
            await asyncio.sleep(self.poll_interval)

    def _cancel_grace(self, job_id: str) -> float:
        attempt = self._engine.inflight.get(job_id)
        if attempt is not None:
            return attempt.spec.cancel_timeout
        row = self._store.get(job_id)
        spec = self._handlers.get(row[L.C_TYPE]) if row is not None else None
        return spec.cancel_timeout if spec is not None else 30.0

    def cancel_many(
        self,
        *,
        queue: str | None = None,
        type: JobType[Any] | str | None = None,
        reason: str | None = None,
    ) -> CancelManyResult:
        """Cancel every job of `queue`/`type` that has not started (pending, delayed, or
        `waiting` on upstream workflow steps) now; ask running ones to stop."""
        if queue is None and type is None:
            raise JobValidationError(
                "cancel_many needs a queue or a type", code="JOB_FILTER_REQUIRED"
            )
        _check_reason(reason)
        _check_filter_values(queue=queue, type=type)
        error = error_to_json(
            JobErrorInfo(
                "JOB_CANCELLED", reason or "Cancelled by cancel_many", False, {"reason": "cancel"}
            )
        )
        running, waiting = self._store.cancel_many(
            queue, None if type is None else _type_name(type), reason, error, self._engine.now_ms()
        )
        engine = self._engine
        message = f"Job cancelled: {reason}" if reason else "Job cancelled"
        aborted = 0

        def apply() -> None:
            nonlocal aborted
            for row in waiting:
                engine.settle_row(row)
            workflows = {r[L.C_WORKFLOW] for r in waiting if r[L.C_WORKFLOW] is not None}
            if workflows:  # the cancels released or cancelled jobs downstream
                self._after_workflow_step(workflows)
            for job_id, _ in running:
                attempt = engine.inflight.get(job_id)
                if attempt is not None and engine.abort(attempt, "cancel", message):
                    aborted += 1

        loop = self._loop
        if loop is None or _on_loop(loop) or not self._started or self._stopped:
            # Stopped: nothing runs here any more (its loop may be closed).
            apply()
        else:
            done = threading.Event()

            def run() -> None:
                try:
                    apply()
                finally:
                    done.set()

            loop.call_soon_threadsafe(run)
            done.wait(5.0)
        return CancelManyResult(aborted=aborted, transitioned=len(waiting), requested=len(running))

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> JobSnapshot | None:
        if not findable(job_id, "job_id"):
            return None
        row = self._store.get(job_id)
        return None if row is None else snapshot_from_row(row)

    def explain(self, job_id: str) -> Explanation | None:
        """Why the job is not running now (DESIGN.md §8.9): its status and the reasons
        that hold as read now (`RUN_AT_IN_FUTURE`, `QUEUE_FULL`, `GLOBAL_FULL`,
        `RATE_LIMITED`, `QUEUE_PAUSED`, `MANAGER_PAUSED`, `WAITING_UPSTREAM`,
        `LOCK_HELD`, `NO_LIVE_WORKER`, `RECOVERY_PENDING`); None for an unknown id."""
        if not findable(job_id, "job_id"):
            return None
        # The read model is the observers' (CLI, HTTP), which import this module: it is
        # imported here, at the call, so that the layers keep one direction at import.
        from jobledger._observe.read_model import LocalFacts, ReadModel

        handlers = self._handlers.values()
        local = LocalFacts(
            {h.name: h.concurrency for h in handlers},
            {h.name: h.rate_limit for h in handlers if h.rate_limit is not None},
            self._engine.global_max,
            self.paused,
            {
                job: a.lock_wait
                for job, a in list(self._engine.inflight.items())
                if a.lock_wait is not None
            },
        )
        model = ReadModel(
            self.path,
            clock=self.clock,
            worker_timeout=self.worker_timeout,
            store=self._store,
        )
        return model.explain(job_id, local)

    def attempts(self, job_id: str) -> builtins.list[AttemptSnapshot]:
        """The job's ended attempts, oldest first (none for an unknown id, or a job that
        has not finished an attempt yet)."""
        if not findable(job_id, "job_id"):
            return []
        return [attempt_snapshot(r) for r in self._store.attempts(job_id)]

    def list(
        self,
        *,
        status: JobStatus | str | Sequence[JobStatus | str] | None = None,
        queue: str | None = None,
        type: JobType[Any] | str | None = None,
        schedule_id: str | None = None,
        parent_id: str | None = None,
        workflow_id: str | None = None,
        search: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[JobSnapshot]:
        """Jobs, newest first (created_at, then id). `limit` is capped at 1000. `search`:
        one term of the console's search (an id or id prefix, `payload.FIELD:VALUE`,
        `metadata.FIELD:VALUE`, an error code; `_core/search.py`)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise JobValidationError("limit must be an integer >= 1", code="JOB_INVALID_OPTION")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_INT:
            raise JobValidationError(
                "offset must be an integer in [0, 2**62]", code="JOB_INVALID_OPTION"
            )
        flt = _filter(status, queue, type, schedule_id, parent_id, workflow_id, search)
        rows = self._store.list(flt, limit=min(limit, LIST_CAP), offset=offset)
        return [snapshot_from_row(r) for r in rows]

    def count(
        self,
        *,
        status: JobStatus | str | Sequence[JobStatus | str] | None = None,
        queue: str | None = None,
        type: JobType[Any] | str | None = None,
        schedule_id: str | None = None,
        parent_id: str | None = None,
        workflow_id: str | None = None,
        search: str | None = None,
    ) -> int:
        return self._store.count(
            _filter(status, queue, type, schedule_id, parent_id, workflow_id, search)
        )

    def subscribe(
        self, fn: Callable[[JobEvent], None], *, job_id: str | None = None
    ) -> Callable[[], None]:
        """Call `fn` on this manager's loop for job events; returns the unsubscribe function."""
        return self._events.subscribe(fn, job_id=job_id)

    def _wait_finished(
        self, job_id: str, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[JobSnapshot]:
        """The future of a handle's terminal snapshot, on `loop` (the caller's running one).

        A job running here (its token not fired) needs no read: its finalize sees the
        waiter and resolves it with the row that write returns (`Engine._wants_row`, or
        `_settle_unread` for a waiter that came from another thread meanwhile). Any other
        job may have ended before the waiter existed, so its row is read, but once for
        every handle awaited in the same turn of the loop (`asyncio.gather` of many),
        not once each."""
        engine = self._engine
        fut: asyncio.Future[JobSnapshot] = loop.create_future()
        if engine.waiters.setdefault(job_id, fut) is not fut:  # atomic: any thread may wait
            engine.add_waiter(job_id, fut)
        attempt = engine.inflight.get(job_id)
        # A fired token (a cancel, a timeout, shutdown) may end the row by another write
        # than the finalize (`cancel`'s force_cancel): read it then.
        if attempt is None or attempt.token.is_set():
            with self._unchecked_lock:
                # One check per turn; again on another loop (the first may be closed
                # before its turn came: the ids wait for whichever check runs first).
                unread = engine.unread
                schedule = not unread or self._check_loop is not loop
                unread[job_id] = None
                if schedule:
                    self._check_loop = loop
            if schedule:
                loop.call_soon(self._check_unchecked)
        return fut

    def _check_unchecked(self) -> None:
        engine = self._engine
        with self._unchecked_lock:
            unread, engine.unread = engine.unread, {}
            self._check_loop = None
        ids = [i for i in unread if i in engine.waiters]
        if not ids:
            return
        try:
            rows = self._store.terminal_among(ids)
        except Exception:
            # Not the awaiting caller's error (`finished` never raises): read again later.
            log.debug("reading %d awaited job(s) failed; retrying", len(ids), exc_info=True)
            loop = asyncio.get_running_loop()
            loop.call_later(max(self.poll_interval, 0.01), self._recheck, ids)
            return
        engine.resolve_terminal(rows)
        if any(i in engine.waiters and i not in engine.inflight for i in ids):
            self._lifecycle.watcher.watch_waiters()

    def _recheck(self, ids: Sequence[str]) -> None:
        with self._unchecked_lock:
            self._engine.unread.update(dict.fromkeys(ids))
        self._check_unchecked()

    # -- background ---------------------------------------------------------------

    def _on_delayed(self, at_ms: int) -> None:
        self._lifecycle.promoter.wake()

    def _on_delayed_threadsafe(self, at_ms: int) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _on_loop(loop):
            self._on_delayed(at_ms)
        else:
            loop.call_soon_threadsafe(self._on_delayed, at_ms)

    # -- schedules ------------------------------------------------------------------

    def register_job_schedule(
        self,
        job_type: JobType[P] | str,
        payload: P,
        *,
        trigger: Trigger,
        name: str | None = None,
        catch_up: CatchUpPolicy | None = None,
        metadata: Mapping[str, Any] | None = None,
        enabled: bool = True,
        overlap: Overlap = "allow",
        jitter: float | None = None,
    ) -> str:
        """Persist a schedule that enqueues `payload` as `job_type` on `trigger`; arm it.

        `overlap`: what a fire does while the schedule's previous job has not ended
        ("allow" enqueues, "skip" does not, "buffer_one" holds at most one back until it
        ends); `jitter`: seconds, each fire's job is due a stable offset in [0, jitter)
        after the fire."""
        sid = self._store.write(
            lambda conn: self._schedules.register_in(
                conn,
                job_type,
                payload,
                trigger=trigger,
                name=name,
                catch_up=catch_up or SkipMissed(),
                metadata=metadata,
                enabled=enabled,
                overlap=overlap,
                jitter=jitter,
            ),
            "register_schedule",
        )
        self._schedules.sync(sid)
        return sid

    def register_job_schedule_tx(
        self,
        tx: WriteTx,
        job_type: JobType[P] | str,
        payload: P,
        *,
        trigger: Trigger,
        name: str | None = None,
        catch_up: CatchUpPolicy | None = None,
        metadata: Mapping[str, Any] | None = None,
        enabled: bool = True,
        overlap: Overlap = "allow",
        jitter: float | None = None,
    ) -> str:
        """Insert through `tx`; no timer is touched: call `sync_job_schedule_timer_by_id`
        after the commit."""
        self._check_tx(tx)
        return self._schedules.register_in(
            tx.conn,
            job_type,
            payload,
            trigger=trigger,
            name=name,
            catch_up=catch_up or SkipMissed(),
            metadata=metadata,
            enabled=enabled,
            overlap=overlap,
            jitter=jitter,
        )

    def ensure_job_schedule(
        self,
        job_type: JobType[P] | str,
        payload: P,
        *,
        trigger: Trigger,
        name: str | None = None,
        catch_up: CatchUpPolicy | None = None,
        metadata: Mapping[str, Any] | None = None,
        enabled: bool | None = None,
        overlap: Overlap = "allow",
        jitter: float | None = None,
    ) -> str:
        """The id of the schedule `(job_type, name)`, created or brought up to date.

        Idempotent, for schedules declared in code: a new one is registered (enabled
        unless `enabled=False`); an existing one gets this trigger, payload, catch-up,
        metadata, overlap and jitter where they differ, and keeps its id, its calendar
        (an unchanged trigger keeps its phase and `next_run`) and its `enabled` unless
        `enabled` is given. Any number of processes may call it at once for one
        schedule: all get the same id.
        """
        ensured = self._schedules.ensure(
            job_type,
            payload,
            trigger=trigger,
            name=name,
            catch_up=catch_up or SkipMissed(),
            metadata=metadata,
            enabled=enabled,
            overlap=overlap,
            jitter=jitter,
        )
        sid = ensured.row.id
        if ensured.inserted or {"trigger", "enabled"} & set(ensured.changed):
            self._schedules.sync(sid)
        return sid

    def update_job_schedule(self, schedule_id: str, **patch: Any) -> ScheduleSnapshot | None:
        """Change fields (name, trigger, payload, catch_up, enabled, metadata, overlap,
        jitter).

        A patch with `trigger` or `enabled` re-syncs the timer; others keep it (and its phase)."""
        snap = self._store.write(
            lambda conn: self._schedules.update_in(conn, schedule_id, patch), "update_schedule"
        )
        if snap is not None and ("trigger" in patch or "enabled" in patch):
            self._schedules.sync(schedule_id)
            return self.get_job_schedule_by_id(schedule_id)
        return snap

    def update_job_schedule_tx(
        self, tx: WriteTx, schedule_id: str, **patch: Any
    ) -> ScheduleSnapshot | None:
        """Update through `tx`; touches no timer (a rollback keeps the armed timer as it was)."""
        self._check_tx(tx)
        return self._schedules.update_in(tx.conn, schedule_id, patch)

    def sync_job_schedule_timer_by_id(self, schedule_id: str) -> None:
        """Arm or disarm the schedule's timer from its committed row. Never raises."""
        self._schedules.sync(schedule_id)

    async def trigger_job_schedule_now_by_id(self, schedule_id: str) -> bool:
        """Enqueue one extra run now (the calendar is unchanged); True if a row was written."""
        row = self._schedules.get_row(schedule_id)
        if row is None:
            return False
        return await self._schedules.manual(row)

    def pause_job_schedule_by_id(self, schedule_id: str) -> bool:
        return self.update_job_schedule(schedule_id, enabled=False) is not None

    def resume_job_schedule_by_id(self, schedule_id: str) -> bool:
        return self.update_job_schedule(schedule_id, enabled=True) is not None

    def unregister_job_schedule_by_id(self, schedule_id: str) -> bool:
        """Delete the schedule; its jobs stay, with `schedule_id` set to None."""
        if not findable(schedule_id, "schedule_id"):
            return False
        deleted = self._store.delete_schedule(schedule_id, self._engine.now_ms())
        self._schedules.sync(schedule_id)  # no row: disarms (on the loop, from any thread)
        return bool(deleted)

    def backfill_job_schedule(self, schedule_id: str, start: datetime, end: datetime) -> int:
        """Enqueue every fire of the schedule in `[start, end)`; how many jobs it wrote.

        Each job has its fire's natural key `schedule:{id}:{fire_ms}` and is due at once
        (at the fire's jittered time, which is past). Fires already written (by a natural
        fire, a catch-up or an earlier backfill, while their job is stored) are not
        written again, nor are the calendar's own: the range stops before `next_run`.
        `end` must not be after now, and the range may hold at most 1000 fires
        (JOB_INVALID_OPTION otherwise, nothing written); an unknown id is
        JOB_SCHEDULE_NOT_FOUND. Ignores `overlap` and the pause of the schedule."""
        return self._schedules.backfill(schedule_id, start, end)

    def get_job_schedule_by_id(self, schedule_id: str) -> ScheduleSnapshot | None:
        row = self._schedules.get_row(schedule_id)
        return None if row is None else snapshot_of(row)

    def list_job_schedules(
        self, *, type: JobType[Any] | str | None = None, enabled: bool | None = None
    ) -> builtins.list[ScheduleSnapshot]:
        """Schedules, oldest first."""
        type_name = None if type is None else _type_name(type)
        return [
            snapshot_of(r)
            for r in self._schedules.list_rows()
            if (type_name is None or r[1] == type_name)
            and (enabled is None or bool(r[6]) == enabled)
        ]

    def _by_name(self, job_type: JobType[Any] | str, name: str | None) -> str:
        row = self._schedules.resolve_name(job_type, name)
        if row is None:
            raise self._schedules.not_found(job_type, name)
        return str(row[0])

    async def trigger_job_schedule_now(
        self, job_type: JobType[Any] | str, name: str | None = None
    ) -> bool:
        return await self.trigger_job_schedule_now_by_id(self._by_name(job_type, name))

    def pause_job_schedule(self, job_type: JobType[Any] | str, name: str | None = None) -> bool:
        return self.pause_job_schedule_by_id(self._by_name(job_type, name))

    def resume_job_schedule(self, job_type: JobType[Any] | str, name: str | None = None) -> bool:
        return self.resume_job_schedule_by_id(self._by_name(job_type, name))

    def unregister_job_schedule(
        self, job_type: JobType[Any] | str, name: str | None = None
    ) -> bool:
        return self.unregister_job_schedule_by_id(self._by_name(job_type, name))

    def update_job_schedule_by_name(
        self, job_type: JobType[Any] | str, name: str | None = None, **patch: Any
    ) -> ScheduleSnapshot | None:
        return self.update_job_schedule(self._by_name(job_type, name), **patch)

    def get_job_schedule(
        self, job_type: JobType[Any] | str, name: str | None = None
    ) -> ScheduleSnapshot | None:
        row = self._schedules.resolve_name(job_type, name)
        return None if row is None else snapshot_of(row)

    # -- pause and drain ------------------------------------------------------------

    def pause(self, reason: str | None = None) -> Hold:
        """Stop autonomous writes (claims, promotions, fires, sweeps) until every hold is
        disposed. Refcounted; there is no resume(): dispose the hold."""
        return self._lifecycle.pause(reason)

    async def drain_in_flight(self, timeout: float = 15.0) -> DrainVerdict:
        """Wait up to `timeout` s for in-flight handlers (and a running recovery step).

        Never aborts anything and never raises; clean means no stragglers and no recovery
        step pending."""
        try:
            return await self._lifecycle.drain(float(timeout))
        except Exception:
            log.exception("drain_in_flight failed; reporting every in-flight job")
            return DrainVerdict(tuple(self._engine.inflight), True)

    @property
    def recovery_done(self) -> asyncio.Future[None]:
        """Resolves when the post-quiet-window recovery flow has run to its end."""
        return self._lifecycle.recovery_future()

    @property
    def paused(self) -> bool:
        return bool(self._lifecycle.holds)

    @property
    def state(self) -> ManagerState:
        """`"new"` (never started), `"started"`, `"stopping"` or `"stopped"`."""
        if self._stopped:
            return "stopped"
        if self._stopping:
            return "stopping"
        return "started" if self._started else "new"

    @property
    def busy(self) -> bool:
        """True while a handler of this manager runs, or its outcome's `on_settled` hook."""
        return bool(self._engine.inflight) or bool(self._engine.settling())

    def end_quiet_window(self) -> None:
        """Run the startup recovery flow now instead of `startup_delay` after `start()`.

        For a lone worker and for tests: dead workers' rows are recovered and schedules
        armed at once. A no-op before `start()` and once the window has ended."""
        self._lifecycle.end_quiet_window()

    @property
    def is_leader(self) -> bool:
        """True while this started manager holds the leader lease (rescue, GC, schedules)."""
        return self._lifecycle.is_leader

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Start working: returns at once; recovery runs after `startup_delay`."""
        # Stopped first: a manager that ran and stopped is still `_started`.
        if self._stopped:
            raise JobError(
                "a stopped JobManager cannot be started again", code="JOB_MANAGER_STOPPED"
            )
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        self._engine.loop = self._loop
        self._started = True
        await self._lifecycle.start()

    async def stop(self) -> None:
        """Stop: stop claiming, wait up to `shutdown_grace` s for running handlers, then
        interrupt the rest (retry/singleton rows go back to pending) and wait 1 s more."""
        if self._stopped or self._stopping:
            return
        if not self._started:
            self._stopped = True
            # Handles waiting in a never-started manager are abandoned, like at a stop.
            self._engine.drop_waiters()
            await self._lifecycle.watcher.on_destroy()
            self._store.close()
            return
        self._stopping = True
        await self._lifecycle.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        self._stopped = True
        self._engine.drop_waiters()
        self._engine.shutdown_pool()
        await self._engine.close_processes()
        self._store.close()

    async def __aenter__(self) -> JobManager:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"JobManager({self.path!r}, worker_id={self.worker_id!r})"


def _seconds(name: str, value: object) -> float:
    if is_finite_number(value) and 0 <= value <= MAX_TIMEOUT_SECONDS:
        return float(value)
    raise JobValidationError(
        f"{name} must be a number of seconds in [0, {MAX_TIMEOUT_SECONDS:g}]",
        code="JOB_INVALID_OPTION",
        params={name: repr(value)},
    )


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _type_name(job_type: JobType[Any] | str) -> str:
    return job_type.name if isinstance(job_type, JobType) else job_type


def _workflow_not_found(workflow_id: object) -> JobNotFound:
    return JobNotFound(
        f"no workflow with id {workflow_id!r}",
        code="JOB_WORKFLOW_NOT_FOUND",
        params={"workflow_id": str(workflow_id)},
    )


def _check_page(limit: object, offset: object) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise JobValidationError("limit must be an integer >= 1", code="JOB_INVALID_OPTION")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_INT:
        raise JobValidationError(
            "offset must be an integer in [0, 2**62]", code="JOB_INVALID_OPTION"
        )


def _check_reason(reason: object) -> None:
    if reason is None:
        return
    if not isinstance(reason, str) or has_surrogate(reason):
        raise JobValidationError(
            "reason must be a string (of UTF-8 text)", code="JOB_INVALID_OPTION"
        )
    if len(reason) > MAX_REASON:
        raise JobValidationError(
            f"the cancel reason is {len(reason)} characters; the limit is {MAX_REASON}",
            code="JOB_CANCEL_REASON_TOO_LONG",
            params={"length": len(reason), "limit": MAX_REASON},
        )


_STATUSES = frozenset(s.value for s in JobStatus)
TERMINAL_NAMES = frozenset(("completed", "failed", "cancelled"))


def _filter(
    status: JobStatus | str | Sequence[JobStatus | str] | None,
    queue: str | None,
    type_: JobType[Any] | str | None,
    schedule_id: str | None,
    parent_id: str | None,
    workflow_id: str | None = None,
    search: str | None = None,
) -> JobFilter:
    statuses: tuple[str, ...] = ()
    term = None if search is None else parse_search(search)
    _check_filter_values(
        queue=queue,
        type=type_,
        schedule_id=schedule_id,
        parent_id=parent_id,
        workflow_id=workflow_id,
    )
    if status is not None:
        try:
            raw = (status,) if isinstance(status, str) else tuple(status)
        except TypeError:
            raise JobValidationError(
                f"status must be a status or a list of them, not {status!r}",
                code="JOB_INVALID_OPTION",
            ) from None
        for s in raw:
            if str(s) not in _STATUSES:
                raise JobValidationError(
                    f"unknown status {s!r}; expected one of {', '.join(sorted(_STATUSES))}",
                    code="JOB_INVALID_OPTION",
                )
        statuses = tuple(str(s) for s in raw)
    return JobFilter(
        status=statuses,
        queue=queue,
        type=None if type_ is None else _type_name(type_),
        schedule_id=schedule_id,
        parent_id=parent_id,
        workflow_id=workflow_id,
        search=term,
    )


def _check_filter_values(**values: object) -> None:
    """A filter is a string (or a JobType, for `type`) that a stored row could hold."""
    for name, value in values.items():
        if value is None or isinstance(value, JobType):
            continue
        if not isinstance(value, str) or has_surrogate(value):
            raise JobValidationError(
                f"{name} must be a string of UTF-8 text, not {value!r}",
                code="JOB_INVALID_OPTION",
                params={name: repr(value)[:200]},
            )


def _check_queue(queue: object) -> str:
    if (
        not isinstance(queue, str)
        or not queue
        or len(queue) > 200
        or bad_name_char(queue) is not None
    ):
        raise JobValidationError(
            "queue must be a non-empty string of at most 200 characters, without control "
            f"characters, not {queue!r}",
            code="JOB_INVALID_OPTION",
        )
    return queue


def _limits(queue: str, record: QueueSettingsRecord | None) -> QueueLimits:
    if record is None:
        return QueueLimits(queue, None, None, False)
    rate = stored_rate(record.rate_limit, record.rate_per_ms)
    return QueueLimits(queue, record.concurrency, rate, record.paused)
