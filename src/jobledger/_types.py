"""The values jobledger hands out: statuses, snapshots, events and verdicts.

A leaf module: it imports nothing of jobledger at run time, so every other module may
import it. Every value is a frozen dataclass; payloads and outputs in snapshots and
events are plain JSON values (dicts, lists, scalars), never the validated payload type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from jobledger._core.rate import RateLimit
    from jobledger._scheduling.triggers import CatchUpPolicy, Trigger

__all__ = [
    "TERMINAL_STATUSES",
    "AttemptOutcome",
    "AttemptSnapshot",
    "CancelManyResult",
    "CancelOutcome",
    "DrainVerdict",
    "Executor",
    "JobErrorInfo",
    "JobSnapshot",
    "JobStatus",
    "LogLine",
    "MissedEvent",
    "QueueInfo",
    "QueueLimits",
    "RecoveryStrategy",
    "ScheduleSnapshot",
    "SettledEvent",
    "WorkflowEdge",
    "WorkflowInfo",
    "WorkflowSnapshot",
    "WorkflowStatus",
    "workflow_status",
]

JSON = Any
RecoveryStrategy = Literal["abandon", "retry", "singleton"]
# How a handler runs (DESIGN.md §8.10): on the loop, in a pool thread, in a child process.
Executor = Literal["async", "thread", "process"]
CancelOutcome = Literal["cancelled", "timed-out", "not-cancellable"]
# How one attempt ended: "interrupted" by a shutdown (the job went back to pending, its
# attempt unspent), "lost" when its worker died while it ran.
AttemptOutcome = Literal["completed", "retry", "failed", "cancelled", "interrupted", "lost"]


class JobStatus(StrEnum):
    PENDING = "pending"
    DELAYED = "delayed"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # A workflow step whose upstream jobs have not all finished (issue 23): no slot,
    # never claimed. Last, so the positions of the six statuses before it do not move.
    WAITING = "waiting"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})


@dataclass(frozen=True, slots=True)
class JobErrorInfo:
    """Why an attempt failed. `retryable` describes the kind of error, not what happened."""

    code: str
    message: str
    retryable: bool
    params: Mapping[str, JSON] = field(default_factory=dict)
    # The formatted traceback of the exception a handler raised (at most 16 KiB, its
    # end kept); None for cancels and for errors the library itself raised.
    traceback: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "params": dict(self.params),
            "traceback": self.traceback,
        }


def _iso(value: datetime | None) -> str | None:
    # Six fractional digits always, so the strings sort as the times do.
    if value is None:
        return None
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a handler logged through `ctx.logger`, as kept with its attempt.

    `level` is the logging level's name (`"INFO"`, `"WARNING"`, ...); `message` is the
    formatted message, with the traceback appended for `ctx.logger.exception(...)`."""

    at: datetime
    level: str
    message: str

    def to_json(self) -> dict[str, JSON]:
        return {"at": _iso(self.at), "level": self.level, "message": self.message}


@dataclass(frozen=True, slots=True)
class AttemptSnapshot:
    """One attempt of a job that ended. `attempt` is 1-based: the n-th of `max_attempts`
    (an interrupted attempt is not spent, so the next one has its number again)."""

    attempt: int
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime
    outcome: AttemptOutcome
    error: JobErrorInfo | None
    logs: list[LogLine] = field(default_factory=list)

    def to_json(self) -> dict[str, JSON]:
        return {
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_json(),
            "logs": [line.to_json() for line in self.logs],
        }


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """One job row as it was when read."""

    id: str
    type: str
    status: JobStatus
    queue: str
    priority: int
    payload: JSON
    output: JSON
    error: JobErrorInfo | None
    attempt: int
    max_attempts: int
    timeout: float | None
    idempotency_key: str | None
    parent_id: str | None
    schedule_id: str | None
    metadata: Mapping[str, JSON]
    progress: float | None
    progress_detail: str | None
    cancel_requested: bool
    worker_id: str | None
    scheduled_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    enqueued_by: str | None = None
    # The job this one re-runs (`jobs.retry`); None for every job written otherwise.
    retry_of: str | None = None
    # The workflow this job is a step of (`jobs.workflow`), and the step's name; None
    # for every job enqueued otherwise.
    workflow_id: str | None = None
    step: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_json(self) -> dict[str, JSON]:
        """The snapshot as JSON-ready values (ISO-8601 UTC times)."""
        iso = _iso
        return {
            "id": self.id,
            "type": self.type,
            "status": str(self.status),
            "queue": self.queue,
            "priority": self.priority,
            "payload": self.payload,
            "output": self.output,
            "error": None if self.error is None else self.error.to_json(),
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "timeout": self.timeout,
            "idempotency_key": self.idempotency_key,
            "parent_id": self.parent_id,
            "schedule_id": self.schedule_id,
            "metadata": dict(self.metadata),
            "progress": self.progress,
            "progress_detail": self.progress_detail,
            "cancel_requested": self.cancel_requested,
            "worker_id": self.worker_id,
            "scheduled_at": iso(self.scheduled_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "retry_of": self.retry_of,
            "workflow_id": self.workflow_id,
            "step": self.step,
        }


WorkflowStatus = Literal["running", "completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class WorkflowEdge:
    """One edge of a workflow's graph: the job `job_id` waited for `upstream_id`.

    The downstream job is always one of the workflow's; the upstream job may belong to
    another workflow (a later workflow may be built on jobs an earlier one completed).
    `on_upstream_failure` is the downstream step's policy; `many` says whether the
    upstream step is an `add_many` one (its outputs reach `ctx.upstream` as a list)."""

    upstream_id: str
    job_id: str
    on_upstream_failure: Literal["cancel", "run"]
    many: bool

    def to_json(self) -> dict[str, JSON]:
        return {
            "upstream_id": self.upstream_id,
            "job_id": self.job_id,
            "on_upstream_failure": self.on_upstream_failure,
            "many": self.many,
        }


@dataclass(frozen=True, slots=True)
class WorkflowSnapshot:
    """A workflow (`jobs.workflow`) as it was when read: its jobs in the order they
    were written, and the edges between them (`WorkflowEdge`, ordered by downstream
    job, then upstream job). `status` is `running` while any job is not terminal, then
    `completed` when every job completed, `failed` when any failed, else `cancelled`."""

    id: str
    name: str
    status: WorkflowStatus
    jobs: tuple[JobSnapshot, ...]
    created_at: datetime
    edges: tuple[WorkflowEdge, ...] = ()
    # The workflow this one re-runs (`jobs.retry_workflow`), None for any other.
    retry_of: str | None = None

    def to_json(self) -> dict[str, JSON]:
        """The snapshot as JSON-ready values: its jobs as `JobSnapshot.to_json()`."""
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "created_at": _iso(self.created_at),
            "retry_of": self.retry_of,
            "jobs": [j.to_json() for j in self.jobs],
            "edges": [e.to_json() for e in self.edges],
        }

    def steps(self) -> dict[str, list[JobSnapshot]]:
        """The jobs by step name, each step's in order."""
        out: dict[str, list[JobSnapshot]] = {}
        for job in self.jobs:
            out.setdefault(job.step or "", []).append(job)
        return out


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """A workflow as a listing shows it (`jobs.list_workflows`): how many of its jobs are
    in each status (every status is a key, 0 included), not the jobs themselves.
    `status` is `WorkflowSnapshot.status` of those jobs."""

    id: str
    name: str
    status: WorkflowStatus
    created_at: datetime
    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        """How many of its jobs are terminal (completed, failed or cancelled)."""
        return sum(self.counts.get(s, 0) for s in TERMINAL_STATUSES)

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "created_at": _iso(self.created_at),
            "counts": dict(self.counts),
            "total": self.total,
        }


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One action a person took (`jobs.audit_log`, the console's audit page): who
    (`actor`: a token's name, or `cli:USER`), what (`action`, e.g. "job.retry",
    "queue.pause"), on what (`target`: a job id, queue or schedule id, or a filter), and
    `detail` (what was asked and what it did)."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: Mapping[str, Any]

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "at": _iso(self.at),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "detail": dict(self.detail),
        }


def workflow_status(statuses: Iterable[JobStatus]) -> WorkflowStatus:
    """`WorkflowSnapshot.status` of jobs with these statuses."""
    seen = set(statuses)
    if not seen <= TERMINAL_STATUSES:
        return "running"
    if seen <= {JobStatus.COMPLETED}:
        return "completed"
    return "failed" if JobStatus.FAILED in seen else "cancelled"


@dataclass(frozen=True, slots=True)
class ScheduleSnapshot:
    """One persistent schedule row. `name` is None for the type's singleton schedule."""

    id: str
    type: str
    name: str | None
    trigger: Trigger
    payload: JSON
    catch_up: CatchUpPolicy
    enabled: bool
    next_run: datetime | None
    last_run: datetime | None
    metadata: Mapping[str, JSON]
    created_at: datetime
    updated_at: datetime
    # What a natural fire does while the schedule's previous job has not ended:
    # "allow", "skip" or "buffer_one" (docs/design/schedules.md, "Overlap").
    overlap: str = "allow"
    jitter: float = 0.0  # seconds: each fire's job is due a stable offset in [0, jitter)
    skipped_fires: int = 0  # natural fires `overlap` skipped


@dataclass(frozen=True, slots=True)
class MissedEvent:
    """Given to `on_missed` when catch-up finds a schedule that missed fires while down."""

    schedule_id: str
    type: str
    missed_count: int
    last_fire_at: datetime | None


@dataclass(frozen=True, slots=True)
class SettledEvent:
    """Given to `on_settled` once a job reaches a terminal state."""

    job_id: str
    type: str
    status: JobStatus
    payload: JSON
    output: JSON
    error: JobErrorInfo | None
    attempt: int
    metadata: Mapping[str, JSON]
    parent_id: str | None
    schedule_id: str | None


@dataclass(frozen=True, slots=True)
class DrainVerdict:
    """What `drain_in_flight` saw. Clean means no stragglers and no recovery pending."""

    straggler_ids: tuple[str, ...]
    startup_recovery_pending: bool

    @property
    def clean(self) -> bool:
        return not self.straggler_ids and not self.startup_recovery_pending


@dataclass(frozen=True, slots=True)
class CancelManyResult:
    """`aborted`: running handlers signalled in this process; `transitioned`: rows
    cancelled directly; `requested`: running jobs (in any process) marked to be
    cancelled, which their workers stop."""

    aborted: int
    transitioned: int
    requested: int = 0


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """What is set for a queue in the database (`jobs.set_queue_limits`, `pause_queue`):
    honoured by every process from its next claim, across restarts. None: not set (the
    handler's concurrency; the handler's rate limit, if it has one)."""

    queue: str
    concurrency: int | None
    rate_limit: RateLimit | None
    paused: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "concurrency": self.concurrency,
            "rate_limit": None if self.rate_limit is None else self.rate_limit.to_json(),
            "paused": self.paused,
        }


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue as `jobs.list_queues()` reports it: jobs per status, the oldest pending
    job's time, and what is set for it (`limits`)."""

    name: str
    type: str | None
    counts: dict[str, int]
    oldest_pending_at: datetime | None
    limits: QueueLimits

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "counts": dict(self.counts),
            "oldest_pending_at": None
            if self.oldest_pending_at is None
            else self.oldest_pending_at.isoformat(),
            "concurrency": self.limits.concurrency,
            "rate_limit": None
            if self.limits.rate_limit is None
            else self.limits.rate_limit.to_json(),
            "paused": self.limits.paused,
        }


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a job is not running now (`jobs.explain`): a stable `code` and a
    sentence for a person."""

    code: str
    message: str

    def to_json(self) -> dict[str, JSON]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job is not running now (`jobs.explain`): its status, and every reason that
    holds at the time of the read, most specific first. A running or finished job has
    none (a running one whose worker is not alive has `RECOVERY_PENDING`)."""

    job_id: str
    status: JobStatus
    reasons: tuple[Reason, ...]

    def to_json(self) -> dict[str, JSON]:
        return {
            "job_id": self.job_id,
            "status": self.status.value,
            "reasons": [r.to_json() for r in self.reasons],
        }
