"""The read model: what observers (CLI, HTTP API, dashboard, metrics) may know.

Invariants:

* It reads through one store opened with `open_store(path_or_url, read_only=True)`: the
  named operations of `Store` (`get`, `list`, `count` and the observers' section), never
  SQL, and on either backend. That store never creates or migrates anything, and its
  connections refuse writes (SQLite `mode=ro`, PostgreSQL read-only sessions), so an
  observer cannot write, not even by accident, and never takes the write lock.
* No read snapshot is held open between calls (SQLite: autocommit, every cursor read to
  the end; one open snapshot would stop WAL checkpoints from finishing), and a
  `ReadModel` may be shared by threads (the HTTP server reads in its thread pool): the
  store keeps a connection per thread (SQLite) or a pool (PostgreSQL).
* Rows become values through the same mapping the library uses
  (`jobledger._storage.rows.snapshot_from_row`), so the CLI, the API and `jobs.get()`
  agree on every field.
* Schedules, workers and the leader are mapped defensively: a row written by another
  release (an unknown trigger kind, a missing column, unreadable JSON) is shown as well as
  possible instead of breaking the page.
* Counters (`MetricsData.started` ... `retried`) never go down: they add what GC has
  collected (`job_totals`, see `_storage/observe.py`) to what the stored rows hold.
* The queue counts, `/metrics` and the throughput chart cost O(queues) and O(minutes),
  not O(rows): they read what the write path keeps (`job_counts`, `job_minutes`,
  migration 16 on SQLite, 12 on PostgreSQL), exact at every commit.

Times are epoch milliseconds in the table and aware UTC datetimes / ISO-8601 strings
(`...Z`) here.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobledger._core.audit import audit_entry
from jobledger._core.rate import RateLimit, stored_rate
from jobledger._core.search import Search
from jobledger._storage.interface import JobFilter, Store
from jobledger._storage.observe import (
    MINUTES_KEPT,
    STATUSES,
    DatabaseMissing,
    ScheduleRecord,
    StorageFacts,
    pid_alive,
)
from jobledger._storage.open import is_postgres_url, open_store, redact
from jobledger._storage.rows import (
    attempt_snapshot,
    snapshot_from_row,
    workflow_info,
    workflow_snapshot,
)
from jobledger._storage.settings import by_queue
from jobledger._types import (
    AttemptSnapshot,
    AuditEntry,
    Explanation,
    JobSnapshot,
    JobStatus,
    Reason,
    WorkflowInfo,
    WorkflowSnapshot,
)
from jobledger.clock import Clock, SystemClock, from_ms

__all__ = [
    "COUNT_CAP",
    "HISTOGRAM_BUCKETS",
    "MAX_THROUGHPUT_MINUTES",
    "STATUSES",
    "DatabaseMissing",
    "Diagnosis",
    "Histogram",
    "JobPage",
    "JobQuery",
    "LeaderInfo",
    "MetricsData",
    "QueueStats",
    "ReadModel",
    "Throughput",
    "WorkerInfo",
    "WorkflowPage",
    "WorkflowStep",
    "WorkflowView",
    "iso",
    "parse_statuses",
    "progress_label",
    "shown_progress",
    "step_status",
    "unlinked_problem",
    "workflow_steps",
]

_WAITING = ("pending", "delayed", "waiting")
_STRANDED_SHOWN = 100
_TERMINAL = ("completed", "failed", "cancelled")
# Seconds. Run times and queue latencies of background jobs span milliseconds to hours.
HISTOGRAM_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
_BOUNDS_MS: tuple[int, ...] = tuple(int(b * 1000) for b in HISTOGRAM_BUCKETS)
MAX_THROUGHPUT_MINUTES = MINUTES_KEPT  # a day: what `gc` keeps of the minutes at least


def iso(value: datetime | int | None) -> str | None:
    """ISO-8601 UTC with a `Z`, from a datetime or epoch milliseconds.

    Always with six fractional digits: `isoformat()` drops them on a whole second, and
    `...:51Z` then sorts after `...:51.029000Z` as text."""
    if value is None:
        return None
    if isinstance(value, int):
        value = from_ms(value)
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def shown_progress(snap: JobSnapshot) -> float | None:
    """The progress a person is shown (dashboard, `jobs list`, `jobs wait`): 100 for a
    completed job, whatever its handler last reported (it did all its work; a handler
    that reports 10% and returns must not look a tenth done); else the last reported
    value, None if none was. Machines get the value as reported (`JobSnapshot.progress`,
    `to_json()`, the API, `--json`): that is data, this is a display rule."""
    if snap.status == "completed":
        return 100.0
    return snap.progress


def progress_label(snap: JobSnapshot) -> str:
    """`shown_progress` as text, to one decimal (`33.3%`); "" when there is none.
    `dashboard/static/app.js` (`setProgress`) writes the same text for live updates."""
    value = shown_progress(snap)
    return "" if value is None else f"{round(value, 1):g}%"


def parse_statuses(raw: str | Iterable[str] | None) -> tuple[str, ...]:
    """A comma list (or several) of statuses; empty items are ignored. ValueError if unknown."""
    if raw is None:
        return ()
    parts = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for part in parts:
        for item in part.split(","):
            name = item.strip()
            if not name:
                continue
            if name not in STATUSES:
                raise ValueError(f"unknown status {name!r}; expected one of {', '.join(STATUSES)}")
            if name not in out:
                out.append(name)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Filters of a job listing; omitted (empty/None) means no filter."""

    status: tuple[str, ...] = ()
    queue: str | None = None
    type: str | None = None
    schedule_id: str | None = None
    parent_id: str | None = None
    workflow_id: str | None = None
    search: Search | None = None  # `q=`, the console's search box

    def filter(self) -> JobFilter:
        return JobFilter(
            self.status,
            self.queue,
            self.type,
            self.schedule_id,
            self.parent_id,
            self.workflow_id,
            self.search,
        )


# A page's total is counted up to this many rows. Past it, counting every match of a
# search over a million rows would cost more than the exact number is worth to a person
# (and, on PostgreSQL, a visit to each matching row).
COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class JobPage:
    items: list[JobSnapshot]
    total: int  # at most COUNT_CAP
    limit: int
    offset: int
    total_exact: bool = True  # False: more than `total` match

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [s.to_json() for s in self.items],
            "total": self.total,
            "total_exact": self.total_exact,
            "limit": self.limit,
            "offset": self.offset,
        }

    @property
    def exact_total(self) -> int | None:
        """`total` when exact, else None (unknown)."""
        return self.total if self.total_exact else None

    @property
    def total_text(self) -> str:
        """`1,234`, or `10,000+` when the count stopped at the cap."""
        return f"{self.total:,}" + ("" if self.total_exact else "+")


@dataclass(frozen=True, slots=True)
class WorkflowPage:
    items: list[WorkflowInfo]
    total: int
    limit: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [w.to_json() for w in self.items],
            "total": self.total,
            "limit": self.limit,
            "offset": self.offset,
        }


def step_status(counts: dict[str, int]) -> str:
    """One status for a step (a group of jobs), as the graph colours it: while any of its
    jobs is unfinished, the most active of running, pending, delayed, waiting; once all
    are finished, the rule of `WorkflowSnapshot.status` (completed, failed, cancelled)."""
    for status in ("running", "pending", "delayed", "waiting"):
        if counts.get(status):
            return status
    if counts.get("failed"):
        return "failed"
    if counts.get("cancelled"):
        return "cancelled"
    return "completed"


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """One node of a workflow's graph: a step and its jobs (one, or an `add_many`'s
    list), counted per status. `key` is unique in the graph: the step's name, or for a
    step of another workflow that one of this workflow's steps waits for (`outside`),
    `workflow_id/step`. `upstream` holds the keys of the steps it waits for."""

    key: str
    name: str
    workflow_id: str | None
    outside: bool
    types: tuple[str, ...]
    job_ids: tuple[str, ...]
    counts: dict[str, int]
    status: str
    upstream: tuple[str, ...]
    on_upstream_failure: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "workflow_id": self.workflow_id,
            "outside": self.outside,
            "types": list(self.types),
            "jobs": len(self.job_ids),
            "job_ids": list(self.job_ids),
            "counts": dict(self.counts),
            "status": self.status,
            "upstream": list(self.upstream),
            "on_upstream_failure": self.on_upstream_failure,
        }


def workflow_steps(
    snap: WorkflowSnapshot, outside: Sequence[JobSnapshot] = ()
) -> list[WorkflowStep]:
    """The graph of `snap` one node per step, not per job (a step of 10,000 jobs is one
    node with its counts): steps of other workflows that its edges start from
    (`outside`, the jobs those edges name) first, then its own, in the order they were
    written. An upstream job neither in `snap` nor in `outside` is left out."""
    own_key = {j.id: j.step or "" for j in snap.jobs}
    key_of = dict(own_key)
    for j in outside:
        if j.id not in key_of:
            key_of[j.id] = f"{j.workflow_id or '-'}/{j.step or j.id}"
    groups: dict[str, list[JobSnapshot]] = {}
    for j in [*(j for j in outside if j.id not in own_key), *snap.jobs]:
        groups.setdefault(key_of[j.id], []).append(j)
    upstream: dict[str, dict[str, None]] = {k: {} for k in groups}
    policy: dict[str, str] = {}
    for e in snap.edges:
        up, down = key_of.get(e.upstream_id), key_of.get(e.job_id)
        if up is None or down is None or up == down:
            continue
        upstream[down][up] = None
        policy[down] = e.on_upstream_failure
    out: list[WorkflowStep] = []
    for key, members in groups.items():
        first = members[0]
        counts = dict.fromkeys(STATUSES, 0)
        for j in members:
            counts[str(j.status)] += 1
        out.append(
            WorkflowStep(
                key,
                first.step or "",
                first.workflow_id,
                first.id not in own_key,
                tuple(dict.fromkeys(j.type for j in members)),
                tuple(j.id for j in members),
                counts,
                step_status(counts),
                tuple(upstream[key]),
                policy.get(key),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A workflow as the console shows it: its snapshot and its graph of steps."""

    snapshot: WorkflowSnapshot
    steps: list[WorkflowStep]

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for j in self.snapshot.jobs:
            counts[str(j.status)] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            **self.snapshot.to_json(),
            "counts": self.counts,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(slots=True)
class QueueStats:
    name: str
    type: str | None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    oldest_pending_at: int | None = None
    # What an operator set (`jobs.set_queue_limits`, `pause_queue`); None: not set.
    concurrency: int | None = None
    rate_limit: RateLimit | None = None
    paused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "counts": dict(self.counts),
            "oldest_pending_at": iso(self.oldest_pending_at),
            "concurrency": self.concurrency,
            "rate_limit": None if self.rate_limit is None else self.rate_limit.to_json(),
            "paused": self.paused,
        }


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    hostname: str
    pid: int
    handlers: dict[str, str]  # job type -> recovery strategy
    started_at: int
    heartbeat_at: int
    stopped_at: int | None
    state: str  # "alive" | "dead" | "stopped"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "hostname": self.hostname,
            "pid": self.pid,
            "handlers": sorted(self.handlers),
            "started_at": iso(self.started_at),
            "heartbeat_at": iso(self.heartbeat_at),
            "stopped_at": iso(self.stopped_at),
            "state": self.state,
        }


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    worker_id: str
    term: int
    expires_at: int
    valid: bool  # the lease has not expired and its holder is not known to be dead

    def to_json(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "term": self.term,
            "expires_at": iso(self.expires_at),
            "valid": self.valid,
        }


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative bucket counts (seconds), their sum and count."""

    buckets: tuple[tuple[float, int], ...]
    total: float
    count: int


@dataclass(frozen=True, slots=True)
class MetricsData:
    """Everything `/metrics` exposes. Gauges and histograms describe the rows stored
    now; the counters also count what GC has collected, so they never go down."""

    jobs: dict[tuple[str, str], int]  # (queue, status) -> rows
    started: dict[str, int]  # queue -> attempts started
    completed: dict[str, int]
    failed: dict[str, int]
    cancelled: dict[str, int]
    retried: dict[str, int]
    run_seconds: dict[str, Histogram]
    latency_seconds: dict[str, Histogram]
    oldest_pending_age: dict[str, float]
    workers: dict[str, int]  # state -> count
    leader_term: int | None


@dataclass(frozen=True, slots=True)
class Throughput:
    """Jobs that ended completed and failed in each of the last `minutes` minutes (UTC),
    oldest first, the current (unfinished) minute last; `items` holds every minute,
    zeros included: (minute start in epoch ms, completed, failed)."""

    minutes: int
    items: tuple[tuple[int, int, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "items": [
                {"at": iso(at), "completed": done, "failed": failed}
                for at, done, failed in self.items
            ],
        }


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What `jobledger doctor` reports. `problems` is empty for a healthy database.

    `facts` are the backend's own (SQLite: the file, PostgreSQL: the server); the rest
    is the same on every backend."""

    path: str  # as shown (a URL's password masked)
    facts: StorageFacts
    schema_version: int
    jobs: int
    workers: list[WorkerInfo]
    leader: LeaderInfo | None
    stuck_running: list[JobSnapshot]  # running rows whose worker is not alive
    orphans: list[JobSnapshot]  # dead-owned waiting rows whose type no live worker handles
    unhandled: dict[str, int]  # waiting rows per type that no live worker handles
    problems: list[str]
    # Worth a look, not broken: the exit code stays 0 (`unhandled` is one).
    warnings: list[str] = field(default_factory=list)
    # `waiting` workflow jobs that nothing will release (the first `_STRANDED_SHOWN`).
    stranded: list[str] = field(default_factory=list)

    @property
    def backend(self) -> str:
        return self.facts.kind

    @property
    def library_schema_version(self) -> int:
        return self.facts.library_schema_version

    @property
    def integrity(self) -> list[str]:
        return list(self.facts.integrity or [])

    @property
    def journal_mode(self) -> str:
        return self.facts.journal_mode or ""

    @property
    def db_bytes(self) -> int:
        return self.facts.db_bytes or 0

    @property
    def wal_bytes(self) -> int:
        return self.facts.wal_bytes or 0

    @property
    def unlinked_holders(self) -> list[int]:
        return list(self.facts.unlinked_holders)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "backend": self.backend,
            "ok": not self.problems,
            "problems": list(self.problems),
            "warnings": list(self.warnings),
        }
        if self.backend == "sqlite":
            data["integrity"] = self.integrity
        else:
            data["server_version"] = self.facts.server_version
        data["schema_version"] = self.schema_version
        data["library_schema_version"] = self.library_schema_version
        if self.backend == "sqlite":
            data["journal_mode"] = self.journal_mode
            data["db_bytes"] = self.db_bytes
            data["wal_bytes"] = self.wal_bytes
        data.update(
            {
                "jobs": self.jobs,
                "workers": [w.to_json() for w in self.workers],
                "leader": None if self.leader is None else self.leader.to_json(),
                "stuck_running": [s.id for s in self.stuck_running],
                "orphans": [s.id for s in self.orphans],
                "unhandled": dict(self.unhandled),
                "stranded_waiting": list(self.stranded),
            }
        )
        if self.backend == "sqlite":
            data["unlinked_holders"] = self.unlinked_holders
        return data


def shown_name(path: str) -> str:
    """How a database is named on a page: a file's base name, a URL with its password
    masked."""
    return redact(path) if is_postgres_url(path) else os.path.basename(path)


@dataclass(frozen=True, slots=True)
class LocalFacts:
    """What a manager adds to `ReadModel.explain`: its handlers' concurrency and rate
    limits by job type, its global cap, whether it is paused."""

    concurrency: dict[str, int]
    rate: dict[str, RateLimit]
    global_cap: int | None
    paused: bool
    # Jobs running in this process whose handler waits for a durable lock: job id -> name.
    lock_waits: dict[str, str] = field(default_factory=dict)


class ReadModel:
    """Read-only views over one jobledger database (a SQLite file or a PostgreSQL URL)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        worker_timeout: float = 30.0,
        store: Store | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.name = shown_name(self.path)
        self.clock: Clock = clock or SystemClock()
        self.worker_timeout = worker_timeout
        self.store: Store = store if store is not None else open_store(self.path, read_only=True)
        self._hostname = socket.gethostname()

    # -- plumbing -------------------------------------------------------------------

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> ReadModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now_ms(self) -> int:
        return int(self.clock.time() * 1000)

    # -- jobs -----------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobSnapshot | None:
        row = self.store.get(job_id)
        return None if row is None else snapshot_from_row(row)

    def attempts(self, job_id: str) -> list[AttemptSnapshot]:
        """The job's ended attempts, oldest first."""
        return [attempt_snapshot(r) for r in self.store.attempts(job_id)]

    def list_jobs(self, query: JobQuery, *, limit: int, offset: int = 0) -> list[JobSnapshot]:
        """Newest first (created_at, then id), like `JobManager.list`."""
        rows = self.store.list(query.filter(), limit=limit, offset=offset)
        return [snapshot_from_row(r) for r in rows]

    def count_jobs(self, query: JobQuery) -> int:
        return self.store.count(query.filter())

    def knows_type(self, type_name: str) -> bool:
        """Whether this database has heard of a job type: a worker row (alive, dead or
        stopped) lists a handler for it, or a job row of any state has it."""
        if any(type_name in w.handlers for w in self.workers()):
            return True
        return self.store.has_job_of_type(type_name)

    def count_finished_before(self, cutoff_ms: int) -> int:
        """Rows `gc` would delete now."""
        return self.store.count_finished_before(cutoff_ms)

    def page(self, query: JobQuery, *, limit: int, offset: int) -> JobPage:
        """A page of jobs and their total, counted up to `COUNT_CAP`."""
        n = self.store.count(query.filter(), cap=COUNT_CAP + 1)
        return JobPage(
            self.list_jobs(query, limit=limit, offset=offset),
            min(n, COUNT_CAP),
            limit,
            offset,
            total_exact=n <= COUNT_CAP,
        )

    def search_indexes(self) -> list[str]:
        """The JSON fields with a search index (`JobManager.add_search_index`)."""
        return [r.field for r in self.store.search_indexes()]

    # -- workflows ------------------------------------------------------------------

    def list_workflows(
        self, *, limit: int, offset: int = 0, name: str | None = None
    ) -> list[WorkflowInfo]:
        """Newest first, each with its jobs counted per status (`jobs.list_workflows`)."""
        rows = self.store.list_workflows(limit=limit, offset=offset, name=name)
        return [workflow_info(r) for r in rows]

    def workflow_page(
        self, *, limit: int, offset: int = 0, name: str | None = None
    ) -> WorkflowPage:
        return WorkflowPage(
            self.list_workflows(limit=limit, offset=offset, name=name),
            self.store.count_workflows(name=name),
            limit,
            offset,
        )

    def workflow(self, workflow_id: str) -> WorkflowView | None:
        """The workflow with its jobs, edges and graph of steps; None for an unknown id.
        Upstream jobs of other workflows are read in batches: they are finished ones
        (a workflow is only built on jobs that completed), so `terminal_among` finds
        them."""
        head = self.store.get_workflow(workflow_id)
        if head is None:
            return None
        store = self.store
        snap = workflow_snapshot(
            head, store.workflow_jobs(workflow_id), store.workflow_edges(workflow_id)
        )
        own = {j.id for j in snap.jobs}
        foreign = list(dict.fromkeys(e.upstream_id for e in snap.edges if e.upstream_id not in own))
        outside = [snapshot_from_row(r) for r in store.terminal_among(foreign)]
        return WorkflowView(snap, workflow_steps(snap, outside))

    # -- queues ---------------------------------------------------------------------

    def queue_stats(self) -> list[QueueStats]:
        """Every known queue (from `queues`, plus any queue a row names or that has
        settings) with counts and what is set for it."""
        return [
            QueueStats(
                name,
                None if qc is None else qc.type,
                dict(zip(STATUSES, qc.counts if qc else (0,) * len(STATUSES), strict=True)),
                None if qc is None else qc.oldest_pending_at,
                None if st is None else st.concurrency,
                None if st is None else stored_rate(st.rate_limit, st.rate_per_ms),
                False if st is None else st.paused,
            )
            for name, qc, st in by_queue(self.store.queue_counts(), self.store.queue_settings())
        ]

    # -- why a job does not run -------------------------------------------------------

    def explain(self, job_id: str, local: LocalFacts | None = None) -> Explanation | None:
        """Why `job_id` is not running now (DESIGN.md §8.9), or None for an unknown id.

        Read from the table alone: a queue's pause, cap and rate limit as set with
        `set_queue_limits`, the running rows, the live workers' handlers. `local` adds
        what only a manager knows (its handlers' concurrency and rate limits, its global
        cap, whether it is paused)."""
        snap = self.get_job(job_id)
        if snap is None:
            return None
        now = self._now_ms()
        reasons: list[Reason] = []
        status = snap.status
        workers = self.workers()
        alive = {w.id: w for w in workers if w.state == "alive"}
        if status == JobStatus.RUNNING:
            waiting_for = None if local is None else local.lock_waits.get(snap.id)
            if waiting_for is not None:
                reasons.append(Reason(
                    "LOCK_HELD",
                    f"its handler waits for the durable lock {waiting_for!r}, held by "
                    "another job",
                ))  # fmt: skip
            if snap.worker_id not in alive:
                reasons.append(Reason(
                    "RECOVERY_PENDING",
                    f"its worker {snap.worker_id} is not alive; a live worker's recovery "
                    "takes the row back by the handler's strategy",
                ))  # fmt: skip
            return Explanation(snap.id, status, tuple(reasons))
        if status not in (JobStatus.PENDING, JobStatus.DELAYED, JobStatus.WAITING):
            return Explanation(snap.id, status, ())
        if status == JobStatus.WAITING:
            what = (
                f"a step of workflow {snap.workflow_id}: its upstream jobs have not all completed"
                if snap.workflow_id is not None
                else "a schedule's fire held back (overlap buffer_one) until the "
                "schedule's unfinished job ends"
            )
            reasons.append(Reason("WAITING_UPSTREAM", what))
        at = int(snap.scheduled_at.timestamp() * 1000)
        if at > now:
            reasons.append(Reason(
                "RUN_AT_IN_FUTURE",
                f"it is due at {snap.scheduled_at.isoformat()} (in {(at - now) / 1000:.1f}s)",
            ))  # fmt: skip
        queue = snap.queue
        every = self.queue_stats()
        stats = next((q for q in every if q.name == queue), None)
        if stats is not None and stats.paused:
            reasons.append(Reason("QUEUE_PAUSED", f"queue {queue!r} is paused"))
        if local is not None and local.paused:
            reasons.append(Reason("MANAGER_PAUSED", "this process's manager is paused"))
        if not any(snap.type in w.handlers for w in alive.values()):
            reasons.append(Reason(
                "NO_LIVE_WORKER",
                f"no live worker handles the type {snap.type!r}"
                + (" (no worker is alive)" if not alive else ""),
            ))  # fmt: skip
        running = stats.counts.get("running", 0) if stats is not None else 0
        cap = stats.concurrency if stats is not None and stats.concurrency is not None else None
        if cap is None and local is not None:
            cap = local.concurrency.get(snap.type)
        if cap is not None and running >= cap:
            reasons.append(Reason(
                "QUEUE_FULL", f"queue {queue!r} runs {running} job(s), its concurrency is {cap}"
            ))  # fmt: skip
        if local is not None and local.global_cap is not None:
            total = sum(q.counts.get("running", 0) for q in every)
            if total >= local.global_cap:
                reasons.append(Reason(
                    "GLOBAL_FULL",
                    f"{total} job(s) run in all, the global cap is {local.global_cap}",
                ))  # fmt: skip
        limit = stats.rate_limit if stats is not None else None
        if limit is None and local is not None:
            limit = local.rate.get(snap.type)
        # A keyed limit is per key, which a snapshot does not carry: only the queue's own.
        if limit is not None and limit.key is None:
            per_ms = max(1, int(limit.per * 1000))
            room, until = self.store.rate_room(queue, limit.limit, per_ms, now)
            if room <= 0:
                when = (
                    ""
                    if until is None
                    else f"; the next start is allowed in {(until - now) / 1000:.2f}s"
                )
                reasons.append(Reason(
                    "RATE_LIMITED",
                    f"queue {queue!r} started {limit.limit} job(s) in the last {limit.per:g}s, "
                    f"its rate limit{when}",
                ))  # fmt: skip
        return Explanation(snap.id, status, tuple(reasons))

    # -- workers and the leader -----------------------------------------------------

    def workers(self) -> list[WorkerInfo]:
        rows = self.store.worker_records()
        now = self._now_ms()
        timeout_ms = int(self.worker_timeout * 1000)
        out: list[WorkerInfo] = []
        for w in rows:
            if w.stopped_at is not None:
                state = "stopped"
            elif now - w.heartbeat_at > timeout_ms or (
                w.hostname == self._hostname and not pid_alive(w.pid)
            ):
                state = "dead"
            else:
                state = "alive"
            out.append(
                WorkerInfo(
                    w.id,
                    w.hostname,
                    w.pid,
                    _handlers(w.handlers),
                    w.started_at,
                    w.heartbeat_at,
                    w.stopped_at,
                    state,
                )
            )
        out.sort(key=lambda w: (w.state != "alive", -w.started_at, w.id))
        return out

    def leader(self, workers: Sequence[WorkerInfo] | None = None) -> LeaderInfo | None:
        lease = self.store.leader_lease()
        if lease is None:
            return None
        states = {w.id: w.state for w in (workers if workers is not None else self.workers())}
        valid = (
            lease.expires_at > self._now_ms() and states.get(lease.worker_id, "alive") == "alive"
        )
        return LeaderInfo(lease.worker_id, lease.term, lease.expires_at, valid)

    # -- schedules ------------------------------------------------------------------

    def audit(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        actor: str | None = None,
        action: str | None = None,
    ) -> list[AuditEntry]:
        """The audit log newest first (`jobs.audit_log`)."""
        rows = self.store.audit_records(limit=limit, offset=offset, actor=actor, action=action)
        return [audit_entry(r) for r in rows]

    def schedules(self) -> list[dict[str, Any]]:
        """Every persistent schedule, as JSON-ready dicts (see `_schedule_json`)."""
        return [_schedule_json(r) for r in self.store.schedule_records()]

    def schedule(self, schedule_id: str) -> dict[str, Any] | None:
        for item in self.schedules():
            if item["id"] == schedule_id:
                return item
        return None

    # -- metrics --------------------------------------------------------------------

    def metrics(self) -> MetricsData:
        now = self._now_ms()
        found = self.store.job_metrics(_BOUNDS_MS)
        jobs: dict[tuple[str, str], int] = {}
        started: dict[str, int] = {}
        retried: dict[str, int] = {}
        ended: dict[str, dict[str, int]] = {status: {} for status in _TERMINAL}
        run_parts: dict[str, _HistogramParts] = {}
        latency_parts: dict[str, _HistogramParts] = {}
        for g in found.groups:
            name = g.queue
            jobs[(name, g.status)] = jobs.get((name, g.status), 0) + g.rows
            started[name] = started.get(name, 0) + g.started
            retried[name] = retried.get(name, 0) + g.retried
            for status, counter in ended.items():
                counter[name] = counter.get(name, 0) + (g.rows if g.status == status else 0)
            if g.run_bucket is not None:
                run_parts.setdefault(name, _HistogramParts()).add(g.run_bucket, g.rows, g.run_ms)
            if g.latency_bucket is not None:
                latency_parts.setdefault(name, _HistogramParts()).add(
                    g.latency_bucket, g.rows, g.latency_ms
                )
        for t in found.totals:
            # A queue every row of which was collected keeps its counter series.
            started[t.queue] = started.get(t.queue, 0) + t.started
            retried[t.queue] = retried.get(t.queue, 0) + t.retried
            for status, counter in ended.items():
                counter[t.queue] = counter.get(t.queue, 0) + (t.rows if t.status == status else 0)
        for name in found.queues:
            for status in STATUSES:
                jobs.setdefault((name, status), 0)
        oldest = {name: max(0.0, (now - at) / 1000) for name, at in found.oldest_pending.items()}
        counts = {"alive": 0, "dead": 0, "stopped": 0}
        for w in self.workers():
            counts[w.state] = counts.get(w.state, 0) + 1
        return MetricsData(
            jobs,
            started,
            ended["completed"],
            ended["failed"],
            ended["cancelled"],
            retried,
            {name: parts.histogram() for name, parts in run_parts.items()},
            {name: parts.histogram() for name, parts in latency_parts.items()},
            oldest,
            counts,
            found.leader_term,
        )

    def throughput(self, minutes: int = 60) -> Throughput:
        """Completed and failed jobs per minute over the last `minutes` (1-1440), the
        dashboard's chart. A minute counts the jobs that ended in it, including those GC
        has collected since (on a database no worker has migrated to the kept counts
        yet: the stored rows that ended in it)."""
        if not 1 <= minutes <= MAX_THROUGHPUT_MINUTES:
            raise ValueError(f"minutes must be between 1 and {MAX_THROUGHPUT_MINUTES}")
        end = self._now_ms() // 60_000 + 1
        first = end - minutes
        found = self.store.throughput(first, end)
        items = tuple((m * 60_000, *found.get(m, (0, 0))) for m in range(first, end))
        return Throughput(minutes, items)

    # -- health ---------------------------------------------------------------------

    def schema_version(self) -> int:
        return self.store.schema_version()

    def diagnose(self) -> Diagnosis:
        """Everything `jobledger doctor` checks; read-only."""
        facts = self.store.storage_facts()
        version = self.schema_version()
        problems: list[str] = []
        if facts.unlinked_holders:
            problems.append(unlinked_problem(self.path, facts.unlinked_holders))
        if facts.integrity is not None and facts.integrity != ["ok"]:
            problems.append("integrity_check: " + "; ".join(facts.integrity[:5]))
        library = facts.library_schema_version
        if version != library:
            problems.append(
                f"schema version {version}, this library expects {library}"
                + (" (start a worker to migrate)" if version < library else "")
            )
        if facts.journal_mode is not None and facts.journal_mode.lower() != "wal":
            problems.append(f"journal_mode is {facts.journal_mode}, expected wal")
        workers = self.workers()
        leader = self.leader(workers)
        alive = {w.id for w in workers if w.state == "alive"}
        dead = {w.id for w in workers if w.state != "alive"}
        handled: set[str] = set()
        for w in workers:
            if w.state == "alive":
                handled.update(w.handlers)
        running = self.list_jobs(JobQuery(status=("running",)), limit=1_000_000)
        stuck = [s for s in running if s.worker_id not in alive]
        waiting = self.list_jobs(JobQuery(status=_WAITING), limit=1_000_000)
        orphans = [
            s
            for s in [*stuck, *waiting]
            if s.type not in handled
            and ((s.status == "running") or (s.enqueued_by is not None and s.enqueued_by in dead))
        ]
        unhandled: dict[str, int] = {}
        for s in waiting:
            if s.type not in handled:
                unhandled[s.type] = unhandled.get(s.type, 0) + 1
        if stuck:
            problems.append(
                f"{len(stuck)} running job(s) belong to workers that are not alive; "
                "a live worker rescues them"
            )
        dead_unstopped = [w for w in workers if w.state == "dead"]
        if dead_unstopped:
            problems.append(
                f"{len(dead_unstopped)} worker(s) died without stopping: "
                + ", ".join(w.id for w in dead_unstopped[:5])
            )
        if orphans and alive:
            problems.append(f"{len(orphans)} orphan job(s): no live worker handles their type")
        stranded = self.store.stranded_waiting(_STRANDED_SHOWN)
        if stranded:
            problems.append(
                f"{len(stranded)}{'+' if len(stranded) == _STRANDED_SHOWN else ''} waiting "
                "workflow job(s) whose upstream jobs have all finished: nothing will release "
                "them (cancel them, or see docs/howto/workflows.md): " + ", ".join(stranded[:5])
            )
        warnings: list[str] = []
        if unhandled:
            # A warning, not a problem: producers may enqueue before any worker of the
            # type is deployed, or between two deploys. But nothing will run these.
            kinds = ", ".join(f"{t} ({n})" for t, n in sorted(unhandled.items()))
            warnings.append(f"waiting jobs of types no live worker handles: {kinds}")
        return Diagnosis(
            redact(self.path),
            facts,
            version,
            self.count_jobs(JobQuery()),
            workers,
            leader,
            stuck,
            orphans,
            unhandled,
            problems,
            warnings,
            stranded,
        )


def unlinked_problem(path: str, holders: Sequence[int]) -> str:
    pids = ", ".join(map(str, holders[:10]))
    return (
        f"the database file {path} was deleted or replaced while process(es) {pids} had it "
        "open: they are writing to an unlinked file nobody else sees"
    )


def _handlers(raw: str | None) -> dict[str, str]:
    """`workers.handlers` holds `"type=strategy"` strings (older rows: bare type names)."""
    try:
        items = json.loads(raw or "[]")
    except (ValueError, RecursionError):
        return {}
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        text = str(item)
        name, sep, strategy = text.rpartition("=")
        if sep and strategy in ("abandon", "retry", "singleton"):
            out[name] = strategy
        else:
            out[text] = ""
    return out


class _HistogramParts:
    """One queue's histogram while the scan's groups are added up."""

    __slots__ = ("count", "in_bucket", "total_ms")

    def __init__(self) -> None:
        self.count = 0
        self.total_ms = 0
        self.in_bucket = [0] * (len(HISTOGRAM_BUCKETS) + 1)

    def add(self, bucket: int, n: int, total_ms: int | None) -> None:
        self.count += n
        self.in_bucket[int(bucket)] += n
        self.total_ms += int(total_ms or 0)

    def histogram(self) -> Histogram:
        cumulative: list[tuple[float, int]] = []
        seen = 0
        for bound, n in zip(HISTOGRAM_BUCKETS, self.in_bucket, strict=False):
            seen += n
            cumulative.append((bound, seen))
        return Histogram(tuple(cumulative), float(self.total_ms) / 1000, self.count)


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
        return text


def _ms(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    try:
        return iso(value)
    except (OverflowError, OSError, ValueError):
        return None


def describe_trigger(trigger: Any) -> str:
    """A short human description of a stored trigger (JSON object)."""
    if not isinstance(trigger, dict):
        return str(trigger)
    kind = trigger.get("kind")
    if kind == "cron":
        text = f"cron {trigger.get('expr')}"
        if trigger.get("timezone"):
            text += f" ({trigger['timezone']})"
        if trigger.get("limit") is not None:
            text += f", limit {trigger['limit']}"
        return text
    if kind == "interval":
        return f"every {trigger.get('seconds')}s"
    if kind == "once":
        return f"once at {_ms(trigger.get('at_ms')) or trigger.get('at_ms')}"
    return json.dumps(trigger, sort_keys=True)


def _schedule_json(row: ScheduleRecord) -> dict[str, Any]:
    trigger = _loads(row.trigger)
    name = row.name
    enabled = row.enabled
    metadata = _loads(row.metadata)
    return {
        "id": str(row.id),
        "type": str(row.type),
        "name": name if isinstance(name, str) and name != "" else None,
        "trigger": trigger,
        "trigger_text": describe_trigger(trigger),
        "payload": _loads(row.payload),
        "catch_up": _loads(row.catch_up),
        "enabled": bool(enabled) if enabled is not None else True,
        "next_run": _ms(row.next_run),
        "last_run": _ms(row.last_run),
        "fire_count": row.fire_count if isinstance(row.fire_count, int) else 0,
        "metadata": metadata if isinstance(metadata, dict) else {},
        "created_at": _ms(row.created_at),
        "updated_at": _ms(row.updated_at),
        # Issue 24's columns; a database no worker migrated yet reads the defaults.
        "overlap": row.overlap if row.overlap in ("allow", "skip", "buffer_one") else "allow",
        "jitter": row.jitter_ms / 1000 if isinstance(row.jitter_ms, int) else 0.0,
        "skipped_fires": row.skipped_count if isinstance(row.skipped_count, int) else 0,
    }
