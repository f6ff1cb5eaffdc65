"""The shapes of the HTTP API as pydantic models: the source of `/openapi.json`.

Every JSON answer and request body of `http.py` has a model here, and `openapi.py`
builds the OpenAPI document from these models (pydantic writes the JSON Schema; nobody
writes it by hand). The handlers do not serialise through the models: they return the
`to_json()` of the read model's values, as the CLI's `--json` does. What keeps the two
together is `tests/http/test_api_models.py`, which validates real answers of every
route, on both backends, with `Model.model_validate_json(body)` (strict by config).

Invariants:

* `extra="forbid"` on every model: a key that `to_json()` grows and the model lacks
  fails those tests (and the fuzz test's schema check), so the document cannot fall
  behind the code. `strict=True`: no coercion either (`"5"` is not an integer).
* A field is required exactly when `to_json()` always writes it, nullable exactly when
  it may write `null`. Response models carry no constraint the stored rows do not
  guarantee: a row another process wrote (or a hostile one) must still conform, so a
  priority or an attempt count is any integer, and a text field any string.
* Times are `Time`: an ISO-8601 UTC string with six fractional digits and a `Z`
  (`read_model.iso`); the schema says `format: date-time`, and validation also checks
  that exact spelling.
* Enumerations come from the code's own types (`JobStatus`, `AttemptOutcome`,
  `CancelOutcome`), so a new member shows up in the document by itself.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Json,
    JsonValue,
    NonNegativeInt,
    RootModel,
    Strict,
)

from jobledger._observe.auth import Role
from jobledger._observe.read_model import MAX_THROUGHPUT_MINUTES
from jobledger._types import AttemptOutcome, CancelOutcome, JobStatus

__all__ = [
    "ApiModel",
    "Attempt",
    "AttemptList",
    "AuditEntry",
    "AuditPage",
    "AuditQuery",
    "BackfillBody",
    "BackfillResult",
    "CancelManyBody",
    "CancelManyResult",
    "CancelQuery",
    "CancelResult",
    "CronTrigger",
    "ErrorBody",
    "ErrorEnvelope",
    "EveryTrigger",
    "Explanation",
    "Gone",
    "GoneEvent",
    "Health",
    "HealthError",
    "Job",
    "JobErrorInfo",
    "JobEvent",
    "JobListQuery",
    "JobPage",
    "JobsPageQuery",
    "Leader",
    "LimitsBody",
    "LogLine",
    "Name",
    "OpenAPIDocument",
    "PathSegment",
    "ProgressEvent",
    "ProgressUpdateEvent",
    "Queue",
    "QueueLimits",
    "QueueList",
    "RateLimit",
    "Reason",
    "RetryBody",
    "RetryManyBody",
    "RetryManyResult",
    "RunResult",
    "Schedule",
    "ScheduleList",
    "SnapshotEvent",
    "StatusCounts",
    "Throughput",
    "ThroughputMinute",
    "ThroughputQuery",
    "Time",
    "TriggerBody",
    "WhoAmI",
    "Worker",
    "WorkerList",
    "Workflow",
    "WorkflowDetail",
    "WorkflowEdge",
    "WorkflowListQuery",
    "WorkflowPage",
    "WorkflowStep",
]

_ISO_Z = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def _iso_z(value: Any) -> Any:
    # The spelling is checked here; AwareDatetime then checks it is a real time. It runs
    # non-strict (a strict datetime takes no str once a validator has run), so anything
    # but such a string is refused here, a number (a lax epoch) included.
    if not (isinstance(value, str) and _ISO_Z.fullmatch(value)):
        raise ValueError("a time is ISO 8601 UTC text with six fractional digits and a Z")
    return value


Time = Annotated[AwareDatetime, Strict(False), BeforeValidator(_iso_z)]
# A path parameter: any non-empty text (a "/" in it, sent as %2F, reaches another route).
PathSegment = Annotated[str, Field(min_length=1)]
# A text field of a request body: null or left out means none, "" is refused.
Name = Annotated[str, Field(min_length=1)]
WorkflowStatus = Literal["running", "completed", "failed", "cancelled"]
UpstreamPolicy = Literal["cancel", "run"]


class ApiModel(BaseModel):
    """The base of every model: closed (`extra="forbid"`), strict, read-only."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# -- errors ---------------------------------------------------------------------------


class ErrorBody(ApiModel):
    code: str = Field(description="A stable code: INVALID_QUERY, JOB_NOT_FOUND, ...")
    message: str = Field(description="For a person; never a traceback.")


class ErrorEnvelope(ApiModel):
    """Every error answer: `{"error": {"code", "message"}}`."""

    error: ErrorBody


# -- jobs -----------------------------------------------------------------------------


class JobErrorInfo(ApiModel):
    code: str
    message: str
    retryable: bool
    params: dict[str, JsonValue]
    traceback: str | None


class Job(ApiModel):
    """One job: `JobSnapshot.to_json()`. `attempt` counts from 0."""

    id: str
    type: str
    status: JobStatus
    queue: str
    priority: int
    payload: JsonValue
    output: JsonValue
    error: JobErrorInfo | None
    attempt: int
    max_attempts: int
    timeout: float | None = Field(description="Seconds.")
    idempotency_key: str | None
    parent_id: str | None
    schedule_id: str | None
    metadata: dict[str, JsonValue]
    progress: float | None = Field(description="As the handler last reported it.")
    progress_detail: str | None
    cancel_requested: bool
    worker_id: str | None
    scheduled_at: Time
    started_at: Time | None
    finished_at: Time | None
    created_at: Time
    updated_at: Time
    retry_of: str | None
    workflow_id: str | None
    step: str | None


class JobPage(ApiModel):
    items: list[Job]
    total: NonNegativeInt = Field(
        description="The jobs matching the filters, counted up to 10,000: when more "
        "match, 10,000 and `total_exact` false."
    )
    total_exact: bool = Field(description="False when more than `total` jobs match.")
    limit: int
    offset: int


class LogLine(ApiModel):
    at: Time
    level: str
    message: str


class Attempt(ApiModel):
    """One ended attempt: `AttemptSnapshot.to_json()` (`attempt` counts from 1)."""

    attempt: int
    worker_id: str | None
    started_at: Time | None
    finished_at: Time
    outcome: AttemptOutcome
    error: JobErrorInfo | None
    logs: list[LogLine]


class AttemptList(ApiModel):
    items: list[Attempt]


class Reason(ApiModel):
    code: str = Field(description="RUN_AT_IN_FUTURE, QUEUE_FULL, ... (`jobs.explain`).")
    message: str


class Explanation(ApiModel):
    job_id: str
    status: JobStatus
    reasons: list[Reason]


class ProgressEvent(ApiModel):
    """The data of a `progress` server-sent event."""

    id: str
    status: JobStatus
    progress: float | None
    progress_detail: str | None
    updated_at: Time


class Gone(ApiModel):
    """The data of a `gone` server-sent event: the row was deleted while watched."""

    id: str


class SnapshotEvent(ApiModel):
    """A `snapshot` event: the whole job, first and whenever anything but progress
    changes. Its `data` is a Job as JSON text."""

    event: Literal["snapshot"]
    id: str = Field(description="Increasing from 1 within the stream.")
    data: Json[Job]


class ProgressUpdateEvent(ApiModel):
    """A `progress` event: the job's progress changed."""

    event: Literal["progress"]
    id: str
    data: Json[ProgressEvent]


class GoneEvent(ApiModel):
    """A `gone` event: the row was deleted while watched; the stream ends."""

    event: Literal["gone"]
    id: str
    data: Json[Gone]


class JobEvent(RootModel[SnapshotEvent | ProgressUpdateEvent | GoneEvent]):
    """One event of `/api/jobs/{id}/events` as a parser reads it (`event`, `id`, `data`);
    the `retry:` line and the `: ping` comments carry no data and are not events."""

    model_config = ConfigDict(strict=True, frozen=True)


# -- workflows ------------------------------------------------------------------------


class StatusCounts(ApiModel):
    """Jobs per status; every status is a key (0 included)."""

    pending: NonNegativeInt
    delayed: NonNegativeInt
    running: NonNegativeInt
    completed: NonNegativeInt
    failed: NonNegativeInt
    cancelled: NonNegativeInt
    waiting: NonNegativeInt


class Workflow(ApiModel):
    id: str
    name: str
    status: WorkflowStatus
    created_at: Time
    counts: StatusCounts
    total: NonNegativeInt


class WorkflowPage(ApiModel):
    items: list[Workflow]
    total: NonNegativeInt
    limit: int
    offset: int


class WorkflowEdge(ApiModel):
    upstream_id: str
    job_id: str
    on_upstream_failure: UpstreamPolicy
    many: bool


class WorkflowStep(ApiModel):
    """One node of the graph: a step and its jobs counted per status."""

    key: str = Field(description="Unique in the graph: the name, or workflow_id/step.")
    name: str
    workflow_id: str | None
    outside: bool = Field(description="The step is another workflow's.")
    types: list[str]
    jobs: NonNegativeInt
    job_ids: list[str]
    counts: StatusCounts
    status: JobStatus
    upstream: list[str] = Field(description="Keys of the steps it waits for.")
    on_upstream_failure: UpstreamPolicy | None


class WorkflowDetail(ApiModel):
    id: str
    name: str
    status: WorkflowStatus
    created_at: Time
    retry_of: str | None
    jobs: list[Job]
    edges: list[WorkflowEdge]
    counts: StatusCounts
    steps: list[WorkflowStep]


# -- queues, schedules, workers, health -----------------------------------------------


class RateLimit(ApiModel):
    limit: int
    per: float = Field(description="Seconds.")
    text: str = Field(description='As written: "10/s".')


class Queue(ApiModel):
    name: str
    type: str | None
    counts: StatusCounts
    oldest_pending_at: Time | None
    concurrency: int | None
    rate_limit: RateLimit | None
    paused: bool


class QueueList(ApiModel):
    items: list[Queue]


class QueueLimits(ApiModel):
    """What is set for a queue: `QueueLimits.to_json()`."""

    queue: str
    concurrency: int | None
    rate_limit: RateLimit | None
    paused: bool


class Schedule(ApiModel):
    id: str
    type: str
    name: str | None = Field(description="null for the type's singleton schedule.")
    trigger: JsonValue = Field(description='The stored trigger, e.g. {"kind": "cron", ...}.')
    trigger_text: str
    payload: JsonValue
    catch_up: JsonValue
    enabled: bool
    next_run: Time | None
    last_run: Time | None
    fire_count: int
    metadata: dict[str, JsonValue]
    created_at: Time | None
    updated_at: Time | None
    overlap: Literal["allow", "skip", "buffer_one"]
    jitter: float = Field(description="Seconds.")
    skipped_fires: int


class ScheduleList(ApiModel):
    items: list[Schedule]


class Worker(ApiModel):
    id: str
    hostname: str
    pid: int
    handlers: list[str]
    started_at: Time
    heartbeat_at: Time
    stopped_at: Time | None
    state: Literal["alive", "dead", "stopped"]


class Leader(ApiModel):
    worker_id: str
    term: int
    expires_at: Time
    valid: bool


class WorkerList(ApiModel):
    items: list[Worker] = Field(description="Alive first.")
    leader: Leader | None


class ThroughputMinute(ApiModel):
    at: Time = Field(description="The minute's start (UTC).")
    completed: NonNegativeInt
    failed: NonNegativeInt


class Throughput(ApiModel):
    """Jobs that ended completed and failed per minute, oldest first, the current
    (unfinished) minute last, zeros included."""

    minutes: int
    items: list[ThroughputMinute]


class AuditEntry(ApiModel):
    """One action a person took: `AuditEntry.to_json()`."""

    id: int
    at: Time
    actor: str = Field(description="A token's name, or cli:USER.")
    action: str = Field(description='"job.retry", "queue.pause", ...')
    target: str = Field(description="A job id, queue or schedule id, or a filter.")
    detail: dict[str, JsonValue]


class AuditPage(ApiModel):
    items: list[AuditEntry] = Field(description="Newest first.")
    limit: int
    offset: int


class WhoAmI(ApiModel):
    """Who the request's token names (`anonymous` without one) and whether it may act."""

    name: str
    role: Role
    can_act: bool


class Health(ApiModel):
    status: Literal["ok"]
    schema_version: int


class HealthError(ApiModel):
    status: Literal["error"]
    error: ErrorBody


class OpenAPIDocument(BaseModel):
    """`/openapi.json` itself, checked only at its top level."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    openapi: Literal["3.1.0"]
    info: dict[str, JsonValue]
    paths: dict[str, JsonValue]
    components: dict[str, JsonValue]


# -- actions --------------------------------------------------------------------------


class CancelResult(ApiModel):
    id: str
    outcome: CancelOutcome


class RunResult(ApiModel):
    id: str
    enqueued: bool = Field(description="Whether a job row was written.")


class BackfillResult(ApiModel):
    id: str
    written: NonNegativeInt


class RetryManyResult(ApiModel):
    retried: NonNegativeInt
    items: list[Job] = Field(description="The new jobs.")


class CancelManyResult(ApiModel):
    cancelled: NonNegativeInt = Field(description="Jobs that were waiting, now cancelled.")
    asked_to_stop: NonNegativeInt = Field(description="Running jobs marked to be cancelled.")


class RetryBody(ApiModel):
    """The new job's payload; without it, the old job's."""

    payload: JsonValue = None


class LimitsBody(ApiModel):
    """A field left out or null is cleared."""

    concurrency: int | None = Field(None, description="Jobs at once in every worker.")
    rate_limit: str | None = Field(None, description='Starts per window: "10/s", "600/m".')


class RetryManyBody(ApiModel):
    """Which finished jobs to re-run, each as a new job (at most `limit`, only jobs no
    job re-runs yet)."""

    status: JobStatus | list[JobStatus] = Field(
        JobStatus.FAILED,
        description="A terminal status or a list of them (a comma list in one string is read too).",
    )
    queue: Name | None = None
    type: Name | None = None
    q: Name | None = Field(None, description="A search, as `GET /api/jobs?q=`.")
    limit: int = Field(1000, ge=1, le=1000)


class CancelManyBody(ApiModel):
    """Cancel every unfinished job of a queue or a type (one of them is required)."""

    queue: Name | None = None
    type: Name | None = None
    reason: Name | None = None


class CronTrigger(ApiModel):
    cron: str = Field(description='A 5- or 6-field cron expression: "*/5 * * * *".')
    timezone: str | None = Field(None, description='An IANA zone: "Europe/Berlin".')


class EveryTrigger(ApiModel):
    every: float = Field(description="Seconds between fires.")


class TriggerBody(RootModel[CronTrigger | EveryTrigger]):
    """A schedule's new trigger: a cron (with an optional zone) or an interval."""

    model_config = ConfigDict(strict=True, frozen=True)


class BackfillBody(ApiModel):
    """Fires in `[from, to)`; a time without an offset is UTC."""

    # JSON's key is `from`, a Python keyword.
    model_config = ConfigDict(populate_by_name=True)

    from_: AwareDatetime = Field(alias="from")
    to: AwareDatetime


# -- query parameters (each field is one parameter) -----------------------------------


class JobListQuery(ApiModel):
    status: str = Field("", description="A status or a comma list (pending,running); may repeat.")
    queue: str = Field("", description="Only this queue.")
    type: str = Field("", description="Only this job type.")
    schedule_id: str = Field("", description="Only jobs fired by this schedule.")
    parent_id: str = Field("", description="Only children of this job.")
    workflow_id: str = Field("", description="Only jobs of this workflow.")
    q: str = Field(
        "",
        description="A search: an id or id prefix (4 characters or more), "
        "payload.FIELD:VALUE, metadata.FIELD:VALUE (FIELD may have dots), or an error "
        "code (JOB_HANDLER_TIMEOUT).",
    )
    limit: int = Field(50, ge=1, le=500, description="Page size.")
    offset: int = Field(0, ge=0, le=10**18 - 1, description="Rows to skip.")


class JobsPageQuery(JobListQuery):
    confirm: str = Field(
        "",
        description="retry or cancel: the page asks to confirm that bulk action on the "
        "filtered jobs, saying how many it touches (an operator's page; anything else is "
        "ignored).",
    )


class WorkflowListQuery(ApiModel):
    name: str = Field("", description="Only workflows of this name.")
    limit: int = Field(50, ge=1, le=500, description="Page size.")
    offset: int = Field(0, ge=0, le=10**18 - 1, description="Rows to skip.")


class ThroughputQuery(ApiModel):
    minutes: int = Field(
        60, ge=1, le=MAX_THROUGHPUT_MINUTES, description="How many minutes, to now."
    )


class AuditQuery(ApiModel):
    actor: str = Field("", description="Only this actor's entries.")
    action: str = Field("", description="Only entries of this action (job.retry, ...).")
    limit: int = Field(50, ge=1, le=500, description="Page size.")
    offset: int = Field(0, ge=0, le=2**62, description="Rows to skip.")


class CancelQuery(ApiModel):
    reason: str = Field("", description="Why (at most 500 characters are kept).")
