"""The read model: what observers (CLI, HTTP API, dashboard, metrics) may know.

Invariants:

* One read-only SQLite connection (`mode=ro`): an observer can never write, not even by
  accident, and never takes the write lock. Every statement runs in autocommit and is
  read to the end (`fetchall`), so no read snapshot is held open between calls (an open
  snapshot would stop WAL checkpoints from finishing).
* One lock serialises the connection, so a `ReadModel` may be shared by threads (the
  HTTP server runs reads in its thread pool).
* Rows become values through the same mapping the library uses
  (`jobledger._storage.rows.snapshot_from_row`), so the CLI, the API and `jobs.get()`
  agree on every field.
* Schedules, workers and the leader are mapped defensively: a row written by another
  release (an unknown trigger kind, a missing column, unreadable JSON) is shown as well as
  possible instead of breaking the page.

Times are epoch milliseconds in the table and aware UTC datetimes / ISO-8601 strings
(`...Z`) here.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from jobledger._core.recovery import pid_alive
from jobledger._storage import layout as L
from jobledger._storage.rows import snapshot_from_row
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.connections import open_reader
from jobledger._storage.sqlite.files import unlinked_holders
from jobledger._storage.sqlite.keys import ROWID_KEY_VERSION, key_of
from jobledger._storage.sqlite.migrate import SCHEMA_VERSION
from jobledger._types import JobSnapshot, JobStatus
from jobledger.clock import Clock, SystemClock, from_ms
from jobledger.errors import StorageError

__all__ = [
    "HISTOGRAM_BUCKETS",
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
    "WorkerInfo",
    "iso",
    "parse_statuses",
    "unlinked_problem",
]

T = TypeVar("T")

STATUSES: tuple[str, ...] = tuple(s.value for s in JobStatus)
_WAITING = ("pending", "delayed")
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


class DatabaseMissing(StorageError):
    """The database file does not exist (observers never create it)."""

    code = "DB_NOT_FOUND"


def iso(value: datetime | int | None) -> str | None:
    """ISO-8601 UTC with a `Z`, from a datetime or epoch milliseconds.

    Always with six fractional digits: `isoformat()` drops them on a whole second, and
    `...:51Z` then sorts after `...:51.029000Z` as text."""
    if value is None:
        return None
    if isinstance(value, int):
        value = from_ms(value)
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


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

    def where(self) -> q.JobsWhere:
        return q.JobsWhere(self.status, self.queue, self.type, self.schedule_id, self.parent_id)


@dataclass(frozen=True, slots=True)
class JobPage:
    items: list[JobSnapshot]
    total: int
    limit: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [s.to_json() for s in self.items],
            "total": self.total,
            "limit": self.limit,
            "offset": self.offset,
        }


@dataclass(slots=True)
class QueueStats:
    name: str
    type: str | None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    oldest_pending_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "counts": dict(self.counts),
            "oldest_pending_at": iso(self.oldest_pending_at),
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
    """Everything `/metrics` exposes, computed from the rows the table holds now."""

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
class Diagnosis:
    """What `jobledger doctor` reports. `problems` is empty for a healthy database."""

    path: str
    integrity: list[str]
    schema_version: int
    library_schema_version: int
    journal_mode: str
    db_bytes: int
    wal_bytes: int
    jobs: int
    workers: list[WorkerInfo]
    leader: LeaderInfo | None
    stuck_running: list[JobSnapshot]  # running rows whose worker is not alive
    orphans: list[JobSnapshot]  # dead-owned waiting rows whose type no live worker handles
    unhandled: dict[str, int]  # waiting rows per type that no live worker handles
    problems: list[str]
    # Processes on this host still writing to a deleted file that was at `path`.
    unlinked_holders: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": not self.problems,
            "problems": list(self.problems),
            "integrity": list(self.integrity),
            "schema_version": self.schema_version,
            "library_schema_version": self.library_schema_version,
            "journal_mode": self.journal_mode,
            "db_bytes": self.db_bytes,
            "wal_bytes": self.wal_bytes,
            "jobs": self.jobs,
            "workers": [w.to_json() for w in self.workers],
            "leader": None if self.leader is None else self.leader.to_json(),
            "stuck_running": [s.id for s in self.stuck_running],
            "orphans": [s.id for s in self.orphans],
            "unhandled": dict(self.unhandled),
            "unlinked_holders": list(self.unlinked_holders),
        }


class ReadModel:
    """Read-only views over one jobledger database file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        worker_timeout: float = 30.0,
    ) -> None:
        self.path = os.fspath(path)
        self.clock: Clock = clock or SystemClock()
        self.worker_timeout = worker_timeout
        if self.path in ("", ":memory:"):
            raise DatabaseMissing("observers need a database file, not an in-memory database")
        if not os.path.exists(self.path):
            raise DatabaseMissing(
                f"no jobledger database at {self.path}", params={"path": self.path}
            )
        try:
            self._conn = open_reader(self.path, read_only=True)
        except sqlite3.Error as exc:
            raise StorageError(
                f"cannot open {self.path} for reading: {exc}", code="DB_OPEN_FAILED"
            ) from exc
        self._lock = threading.Lock()
        self._hostname = socket.gethostname()

    # -- plumbing -------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ReadModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            try:
                return work(self._conn)
            except sqlite3.Error as exc:
                if "no such table" in str(exc):
                    raise StorageError(
                        f"{self.path} is not a jobledger database (or its schema is not "
                        f"created yet): {exc}",
                        code="DB_SCHEMA",
                    ) from exc
                raise StorageError(f"read failed: {exc}", code="DB_READ_FAILED") from exc

    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return self._read(lambda c: c.execute(sql, params).fetchall())

    def _now_ms(self) -> int:
        return int(self.clock.time() * 1000)

    # -- jobs -----------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobSnapshot | None:
        row = self._read(lambda c: c.execute(q.GET_JOB, (key_of(c, job_id), job_id)).fetchone())
        if row is None and self.schema_version() < ROWID_KEY_VERSION:
            # A file no worker has upgraded yet (observers never migrate): ids have an
            # index there, and rowids are not keys.
            sql = f"SELECT {L.JOB_COLUMNS} FROM jobs WHERE id = ?"
            row = self._read(lambda c: c.execute(sql, (job_id,)).fetchone())
        return None if row is None else snapshot_from_row(row)

    def list_jobs(self, query: JobQuery, *, limit: int, offset: int = 0) -> list[JobSnapshot]:
        """Newest first (created_at, then id), like `JobManager.list`."""
        sql, params = query.where().list_sql(limit=limit, offset=offset)
        rows = self._read(lambda c: c.execute(sql, params).fetchall())
        return [snapshot_from_row(r) for r in rows]

    def count_jobs(self, query: JobQuery) -> int:
        sql, params = query.where().count_sql()
        return int(self._read(lambda c: c.execute(sql, params).fetchone()[0]))

    def count_finished_before(self, cutoff_ms: int) -> int:
        """Rows `gc` would delete (the same condition as `queries.GC_TERMINAL`)."""
        sql = (
            "SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ? "
            "AND status IN ('completed', 'failed', 'cancelled')"
        )
        return int(self._fetch(sql, (cutoff_ms,))[0][0])

    def page(self, query: JobQuery, *, limit: int, offset: int) -> JobPage:
        return JobPage(
            self.list_jobs(query, limit=limit, offset=offset),
            self.count_jobs(query),
            limit,
            offset,
        )

    # -- queues ---------------------------------------------------------------------

    def queue_stats(self) -> list[QueueStats]:
        """Every known queue (from `queues`, plus any queue a row names) with counts."""

        def work(c: sqlite3.Connection) -> list[QueueStats]:
            stats: dict[str, QueueStats] = {}
            for name, type_name in c.execute("SELECT name, type FROM queues ORDER BY name"):
                stats[name] = QueueStats(name, type_name)
            for name, oldest, *counts in c.execute(_QUEUE_STATS_SCAN):
                qs = stats.setdefault(name, QueueStats(name, None))
                qs.counts.update(zip(STATUSES, map(int, counts), strict=True))
                qs.oldest_pending_at = oldest
            return [stats[k] for k in sorted(stats)]

        return self._read(work)

    # -- workers and the leader -----------------------------------------------------

    def workers(self) -> list[WorkerInfo]:
        rows = self._read(lambda c: c.execute(q.LIST_WORKERS).fetchall())
        now = self._now_ms()
        timeout_ms = int(self.worker_timeout * 1000)
        out: list[WorkerInfo] = []
        for wid, host, pid, handlers, started, beat, stopped in rows:
            if stopped is not None:
                state = "stopped"
            elif now - beat > timeout_ms or (host == self._hostname and not pid_alive(pid)):
                state = "dead"
            else:
                state = "alive"
            out.append(
                WorkerInfo(wid, host, pid, _handlers(handlers), started, beat, stopped, state)
            )
        out.sort(key=lambda w: (w.state != "alive", -w.started_at, w.id))
        return out

    def leader(self, workers: Sequence[WorkerInfo] | None = None) -> LeaderInfo | None:
        row = self._read(
            lambda c: c.execute(
                "SELECT worker_id, term, expires_at FROM leader WHERE id = 1"
            ).fetchone()
        )
        if row is None:
            return None
        wid, term, expires = row
        states = {w.id: w.state for w in (workers if workers is not None else self.workers())}
        valid = expires > self._now_ms() and states.get(wid, "alive") == "alive"
        return LeaderInfo(str(wid), int(term), int(expires), valid)

    # -- schedules ------------------------------------------------------------------

    def schedules(self) -> list[dict[str, Any]]:
        """Every persistent schedule, as JSON-ready dicts (see `_schedule_json`)."""

        def work(c: sqlite3.Connection) -> list[dict[str, Any]]:
            try:
                cur = c.execute("SELECT * FROM job_schedules ORDER BY type, name, id")
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []
                raise
            names = [d[0] for d in cur.description]
            return [_schedule_json(dict(zip(names, row, strict=True))) for row in cur.fetchall()]

        return self._read(work)

    def schedule(self, schedule_id: str) -> dict[str, Any] | None:
        for item in self.schedules():
            if item["id"] == schedule_id:
                return item
        return None

    # -- metrics --------------------------------------------------------------------

    def metrics(self) -> MetricsData:
        now = self._now_ms()

        def work(c: sqlite3.Connection) -> MetricsData:
            jobs: dict[tuple[str, str], int] = {}
            started: dict[str, int] = {}
            completed: dict[str, int] = {}
            failed: dict[str, int] = {}
            cancelled: dict[str, int] = {}
            retried: dict[str, int] = {}
            run_parts: dict[str, _HistogramParts] = {}
            latency_parts: dict[str, _HistogramParts] = {}
            for name, status, rb, lb, n, s, r, run_ms, latency_ms in c.execute(_METRICS_SCAN):
                n = int(n)
                jobs[(name, status)] = jobs.get((name, status), 0) + n
                started[name] = started.get(name, 0) + int(s or 0)
                retried[name] = retried.get(name, 0) + int(r or 0)
                for counter, wanted in (
                    (completed, "completed"),
                    (failed, "failed"),
                    (cancelled, "cancelled"),
                ):
                    counter[name] = counter.get(name, 0) + (n if status == wanted else 0)
                if rb is not None:
                    run_parts.setdefault(name, _HistogramParts()).add(rb, n, run_ms)
                if lb is not None:
                    latency_parts.setdefault(name, _HistogramParts()).add(lb, n, latency_ms)
            for (name,) in c.execute("SELECT name FROM queues"):
                for status in STATUSES:
                    jobs.setdefault((name, status), 0)
            run = {name: parts.histogram() for name, parts in run_parts.items()}
            latency = {name: parts.histogram() for name, parts in latency_parts.items()}
            oldest = {
                name: max(0.0, (now - int(at)) / 1000)
                for name, at in c.execute(
                    "SELECT queue, min(scheduled_at) FROM jobs "
                    "WHERE status = 'pending' GROUP BY queue"
                )
            }
            term_row = c.execute("SELECT term FROM leader WHERE id = 1").fetchone()
            return MetricsData(
                jobs,
                started,
                completed,
                failed,
                cancelled,
                retried,
                run,
                latency,
                oldest,
                {},
                None if term_row is None else int(term_row[0]),
            )

        data = self._read(work)
        counts = {"alive": 0, "dead": 0, "stopped": 0}
        for w in self.workers():
            counts[w.state] = counts.get(w.state, 0) + 1
        data.workers.update(counts)
        return data

    # -- health ---------------------------------------------------------------------

    def schema_version(self) -> int:
        return int(self._read(lambda c: c.execute("PRAGMA user_version").fetchone()[0]))

    def diagnose(self) -> Diagnosis:
        """Everything `jobledger doctor` checks; read-only."""
        integrity = [
            str(r[0]) for r in self._read(lambda c: c.execute("PRAGMA integrity_check").fetchall())
        ]
        version = self.schema_version()
        mode = str(self._read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0]))
        problems: list[str] = []
        holders = unlinked_holders(self.path)
        if holders:
            problems.append(unlinked_problem(self.path, holders))
        if integrity != ["ok"]:
            problems.append("integrity_check: " + "; ".join(integrity[:5]))
        if version != SCHEMA_VERSION:
            problems.append(
                f"schema version {version}, this library expects {SCHEMA_VERSION}"
                + (" (start a worker to migrate)" if version < SCHEMA_VERSION else "")
            )
        if mode.lower() != "wal":
            problems.append(f"journal_mode is {mode}, expected wal")
        if version == 0:
            return Diagnosis(
                self.path,
                integrity,
                version,
                SCHEMA_VERSION,
                mode,
                _size(self.path),
                _size(self.path + "-wal"),
                0,
                [],
                None,
                [],
                [],
                {},
                problems,
                holders,
            )
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
        return Diagnosis(
            self.path,
            integrity,
            version,
            SCHEMA_VERSION,
            mode,
            _size(self.path),
            _size(self.path + "-wal"),
            self.count_jobs(JobQuery()),
            workers,
            leader,
            stuck,
            orphans,
            unhandled,
            problems,
            holders,
        )


def unlinked_problem(path: str, holders: Sequence[int]) -> str:
    pids = ", ".join(map(str, holders[:10]))
    return (
        f"the database file {path} was deleted or replaced while process(es) {pids} had it "
        "open: they are writing to an unlinked file nobody else sees"
    )


def _size(path: str) -> int:
    # os.stat never opens the file, so it cannot drop a POSIX lock this process holds.
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _handlers(raw: str | None) -> dict[str, str]:
    """`workers.handlers` holds `"type=strategy"` strings (older rows: bare type names)."""
    try:
        items = json.loads(raw or "[]")
    except ValueError:
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


def _metrics_scan() -> str:
    """Every figure `/metrics` takes from `jobs`, in ONE pass over the table.

    Grouped by queue, status and the bucket each histogram's value falls in (NULL for a
    row the histogram does not cover, `len(HISTOGRAM_BUCKETS)` above the last bound), so
    each row costs two CASE chains and a few sums; the cumulative buckets are added up in
    Python. At a million rows this takes 1.4 s; four passes with a `sum(CASE ...)` per
    bucket took 3.5 s, most of it in those per-row sums (the GROUP BY's sort of every
    row, ~0.6 s, is what is left)."""
    run_ok = (
        "status IN ('completed', 'failed') AND started_at IS NOT NULL AND finished_at IS NOT NULL"
    )
    run = "finished_at - started_at"
    lat = "started_at - scheduled_at"  # below 0 counts as 0: every bound is positive

    def bucket(value: str) -> str:
        whens = " ".join(
            f"WHEN {value} <= {int(b * 1000)} THEN {i}" for i, b in enumerate(HISTOGRAM_BUCKETS)
        )
        return f"CASE {whens} ELSE {len(HISTOGRAM_BUCKETS)} END"

    return (
        "SELECT queue, status, "
        f"CASE WHEN {run_ok} THEN {bucket(run)} END AS rb, "
        f"CASE WHEN started_at IS NOT NULL THEN {bucket(lat)} END AS lb, "
        "count(*), sum(attempt + (started_at IS NOT NULL)), sum(attempt), "
        f"sum(CASE WHEN {run_ok} THEN {run} END), "
        f"sum(CASE WHEN started_at IS NOT NULL THEN max(0, {lat}) END) "
        "FROM jobs GROUP BY queue, status, rb, lb"
    )


_METRICS_SCAN = _metrics_scan()

# The dashboard's per-queue counts in one pass, grouped by queue alone: the GROUP BY's
# sort of every row is most of the cost, and a key of (queue, status) made it ~25%
# dearer than per-status sums (0.50 against 0.62-0.73 s at a million rows), before a
# second pass for the oldest pending row.
_QUEUE_STATS_SCAN = (
    "SELECT queue, min(CASE WHEN status = 'pending' THEN scheduled_at END), "
    + ", ".join(f"sum(status = '{status}')" for status in STATUSES)
    + " FROM jobs GROUP BY queue"
)


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
    except ValueError:
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


def _schedule_json(row: dict[str, Any]) -> dict[str, Any]:
    trigger = _loads(row.get("trigger"))
    name = row.get("name")
    enabled = row.get("enabled")
    metadata = _loads(row.get("metadata"))
    return {
        "id": str(row.get("id")),
        "type": str(row.get("type")),
        "name": name if isinstance(name, str) and name != "" else None,
        "trigger": trigger,
        "trigger_text": describe_trigger(trigger),
        "payload": _loads(row.get("payload")),
        "catch_up": _loads(row.get("catch_up")),
        "enabled": bool(enabled) if enabled is not None else True,
        "next_run": _ms(row.get("next_run")),
        "last_run": _ms(row.get("last_run")),
        "fire_count": row.get("fire_count") if isinstance(row.get("fire_count"), int) else 0,
        "metadata": metadata if isinstance(metadata, dict) else {},
        "created_at": _ms(row.get("created_at")),
        "updated_at": _ms(row.get("updated_at")),
    }
