"""The observers' operations: typed values the read-only `Store` operations return.

Backend-neutral on purpose: each dialect (`sqlite/observe.py`, `postgres/observe.py`)
turns its rows into these, and the read model (`_observe/read_model.py`) never sees a
dialect row, a connection or SQL. Times are epoch milliseconds, as in the table.

Values that another release may have written differently (a schedule's JSON columns, a
worker's handler list) are carried as stored; the read model maps them defensively.

The counters of `/metrics` must never go down when GC deletes rows, so every backend
keeps `job_totals`: per (queue, status), what the collected terminal rows contributed
(rows, attempts started, retries), added by a trigger in the deleting transaction (the
migrations that create it say how). A counter is what the surviving rows hold plus that.

The overview's counts, `/metrics` and the throughput chart read what the write path keeps
(`job_counts`, `job_minutes`; SQLite migrations 16 and 18, PostgreSQL 12 and 14, which say how),
so they cost O(queues + running rows) and O(minutes) whatever the size of `jobs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobledger._core.recovery import pid_alive as pid_alive  # re-exported for observers
from jobledger._types import JobStatus
from jobledger.errors import StorageError

__all__ = [
    "KEPT_BOUNDS_MS",
    "MINUTES_KEPT",
    "STATUSES",
    "AuditRecord",
    "CheckpointResult",
    "CollectedTotal",
    "DatabaseMissing",
    "JobMetrics",
    "LeaderLease",
    "MetricGroup",
    "QueueCounts",
    "QueueSettingsRecord",
    "ReadOnlyStoreError",
    "ScheduleRecord",
    "SearchIndexRecord",
    "StorageFacts",
    "WorkerRecord",
    "WorkflowRecord",
    "pid_alive",
]

STATUSES: tuple[str, ...] = tuple(s.value for s in JobStatus)
# The throughput chart's kept minutes (`job_minutes`) that `gc(before_ms)` keeps before
# the minute of `before_ms`: a day, the longest chart (`ReadModel.throughput`).
MINUTES_KEPT = 1440
# The histogram bounds (ms) the kept counts' triggers bake in (`read_model.HISTOGRAM_BUCKETS`;
# changing them is a migration). `job_metrics` with other bounds scans `jobs`.
KEPT_BOUNDS_MS: tuple[int, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000, 3600000,
)  # fmt: skip


class DatabaseMissing(StorageError):
    """The database file does not exist (observers never create it)."""

    code = "DB_NOT_FOUND"


class ReadOnlyStoreError(StorageError):
    """A write was attempted on a store opened with `read_only=True` (a bug in the
    caller: observers never write). The connections themselves refuse writes too."""

    code = "DB_READ_ONLY"


@dataclass(frozen=True, slots=True)
class QueueSettingsRecord:
    """What an operator set for a queue (`queue_settings`, DESIGN.md §8.7); None: not set."""

    queue: str
    concurrency: int | None
    rate_limit: int | None
    rate_per_ms: int | None
    paused: bool
    updated_at: int


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    """One workflow of a listing (`Store.list_workflows`): its row and how many of its
    jobs are in each status (`STATUSES` order), counted in the listing's one query."""

    id: str
    name: str
    created_at: int
    counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One row of `audit_log`: `detail` is its JSON text, `at` epoch ms."""

    id: int
    at: int
    actor: str
    action: str
    target: str
    detail: str


@dataclass(frozen=True, slots=True)
class SearchIndexRecord:
    """One row of `search_indexes`: a JSON field with an index of its own (`payload.user`)
    and when it was declared (epoch ms)."""

    field: str
    created_at: int


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue: rows per status (`STATUSES` order) and its oldest pending row's
    `scheduled_at`. `type` is None for a queue only rows name (not registered)."""

    name: str
    type: str | None
    counts: tuple[int, ...]
    oldest_pending_at: int | None


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A `workers` row as stored; `handlers` is its JSON text."""

    id: str
    hostname: str
    pid: int
    handlers: str | None
    started_at: int
    heartbeat_at: int
    stopped_at: int | None


@dataclass(frozen=True, slots=True)
class LeaderLease:
    worker_id: str
    term: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A `job_schedules` row with its columns as stored (JSON as text); a column an
    older or newer release lacks is None."""

    id: Any
    type: Any
    name: Any = None
    trigger: Any = None
    payload: Any = None
    catch_up: Any = None
    enabled: Any = None
    next_run: Any = None
    last_run: Any = None
    fire_count: Any = None
    metadata: Any = None
    created_at: Any = None
    updated_at: Any = None
    overlap: Any = None
    jitter_ms: Any = None
    skipped_count: Any = None

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> ScheduleRecord:
        known = {k: v for k, v in columns.items() if k in cls.__dataclass_fields__}
        known.setdefault("id", None)
        known.setdefault("type", None)
        return cls(**known)


@dataclass(frozen=True, slots=True)
class MetricGroup:
    """One group of the metrics pass over `jobs`: rows of one queue and status whose run
    time and queue latency fall in the same histogram buckets (index into the bounds
    asked for; `len(bounds)` is above the last one; None: the row is not covered)."""

    queue: str
    status: str
    run_bucket: int | None
    latency_bucket: int | None
    rows: int
    started: int  # attempts started: attempt, plus one if the current one started
    retried: int  # sum of attempt
    run_ms: int  # sum of finished_at - started_at over the rows the run histogram covers
    latency_ms: int  # sum of max(0, started_at - scheduled_at) over started rows


@dataclass(frozen=True, slots=True)
class CollectedTotal:
    """What GC'd terminal rows of one (queue, status) contributed to the counters."""

    queue: str
    status: str
    rows: int
    started: int
    retried: int


@dataclass(frozen=True, slots=True)
class JobMetrics:
    """Everything `/metrics` takes from the tables, read together."""

    groups: list[MetricGroup]
    totals: list[CollectedTotal]
    queues: list[str]  # registered queues (series exist even without rows)
    oldest_pending: dict[str, int]  # queue -> min(scheduled_at) of its pending rows
    leader_term: int | None


@dataclass(frozen=True, slots=True)
class StorageFacts:
    """What `doctor` checks below the jobledger tables; fields a backend has no notion
    of stay None (SQLite: the file; PostgreSQL: the server)."""

    kind: str  # "sqlite" | "postgres"
    library_schema_version: int
    integrity: list[str] | None = None  # PRAGMA integrity_check
    journal_mode: str | None = None
    db_bytes: int | None = None
    wal_bytes: int | None = None
    # Processes on this host still writing to a deleted file that was at the path.
    unlinked_holders: list[int] = field(default_factory=list)
    server_version: str | None = None
    read_only: bool | None = None  # the session refuses writes (PostgreSQL)


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    busy: int
    log: int
    checkpointed: int
    wal_bytes_after: int
