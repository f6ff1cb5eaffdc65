"""The observers' reads on SQLite: statements and their mapping to `_storage/observe.py`.

Each function takes a connection and runs in one `SqliteStore.read` (autocommit, every
cursor read to the end, so no read snapshot outlives the call). The grouped passes over
`jobs` are single statements whose costs were measured on a million rows (below);
`tests/http/test_table_scans.py` checks them against a row-by-row count.

A file no worker has upgraded yet is read as it is (observers never migrate): a table a
later migration added (`job_totals`) may be missing, and is then read as empty.

From schema 16 the overview's counts, `/metrics` and the throughput chart read the tables
the triggers of `migrations/0016_job_counts.sql` keep (`job_counts`, `job_minutes`):
O(queues x buckets) and O(minutes) rows, whatever the size of `jobs`. From schema 18
(`migrations/0018_open_counts.sql`) pending and running rows share a key, and the counts
are read through the view `job_counts_now`, which adds the running rows (bounded by the
caps) back from `jobs_running_idx`. A file older than schema 16 is read by the passes
over `jobs` below, as before. The oldest pending row of each
queue is read from the head of `jobs_claim_idx`, one seek per (queue, priority) present
(`OLDEST_PENDING`), so it counts the claimable rows (`cancel_requested = 0`); a pending
row whose cancel was requested is cancelled in the same transaction.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from jobledger._storage.layout import JOB_COLUMNS
from jobledger._storage.observe import (
    KEPT_BOUNDS_MS,
    STATUSES,
    CheckpointResult,
    CollectedTotal,
    JobMetrics,
    LeaderLease,
    MetricGroup,
    QueueCounts,
    QueueSettingsRecord,
    ScheduleRecord,
    StorageFacts,
    WorkerRecord,
    WorkflowRecord,
)
from jobledger._storage.sqlite.connections import checkpoint_truncate, open_writer
from jobledger._storage.sqlite.files import unlinked_holders
from jobledger._storage.sqlite.keys import ROWID_KEY_VERSION
from jobledger._storage.sqlite.migrate import SCHEMA_VERSION

__all__ = [
    "checkpoint",
    "collected_totals",
    "count_finished_before",
    "count_workflows",
    "get_by_id",
    "has_job_of_type",
    "job_metrics",
    "kept_count",
    "kept_counts",
    "leader_lease",
    "queue_counts",
    "queue_settings",
    "schedule_records",
    "schema_version",
    "storage_facts",
    "throughput",
    "wal_bytes",
    "worker_records",
    "workflow_edges",
    "workflow_records",
]

_TERMINAL = "status IN ('completed', 'failed', 'cancelled')"
# The rows `gc` deletes (the condition of `queries.GC_TERMINAL`).
_COUNT_FINISHED_BEFORE = (
    f"SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ? AND {_TERMINAL}"
)
_LIST_WORKERS = (
    "SELECT id, hostname, pid, handlers, started_at, heartbeat_at, stopped_at FROM workers"
)
_LEADER = "SELECT worker_id, term, expires_at FROM leader WHERE id = 1"
_GET_BY_ID = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"
# No index on `type`: a type no row has reads the whole table, once per
# `jobledger jobs enqueue` without --app (the CLI's check), which is rare enough.
_HAS_TYPE = "SELECT EXISTS (SELECT 1 FROM jobs WHERE type = ?)"

# A file before schema 16: the dashboard's per-queue counts in one pass, grouped by
# queue alone: the GROUP BY's sort of every row is most of the cost, and a key of
# (queue, status) made it ~25% dearer than per-status sums (0.50 against 0.62-0.73 s
# at a million rows), before a second pass for the oldest pending row.
QUEUE_STATS_SCAN = (
    "SELECT queue, min(CASE WHEN status = 'pending' THEN scheduled_at END), "
    + ", ".join(f"sum(status = '{status}')" for status in STATUSES)
    + " FROM jobs GROUP BY queue"
)


# The kept counts (schema 16): per queue and status, and whole rows for `/metrics`, from
# `_counts_source`. The view repeats a key (each running row takes its part out of the
# pending one), so rows are summed per key.
_KEPT_QUEUE_COUNTS = (
    "SELECT queue, status, sum(jobs) FROM {counts} GROUP BY queue, status HAVING sum(jobs) <> 0"
)
_KEPT_GROUPS = (
    "SELECT queue, status, rb, lb, sum(jobs), sum(started), sum(retried), sum(run_ms), "
    "sum(latency_ms) FROM {counts} GROUP BY queue, status, rb, lb HAVING sum(jobs) <> 0"
)
# The oldest claimable pending row of queue ?1: a loose scan of jobs_claim_idx (queue,
# priority, scheduled_at), one seek to each next priority present and one to its first
# time, so O(priorities x log n) instead of every pending row. The conditions repeat the
# index's own, which SQLite needs to use a partial index.
_PENDING = "FROM jobs WHERE status = 'pending' AND cancel_requested = 0 AND queue = ?1"
OLDEST_PENDING = (
    "WITH RECURSIVE p(pr) AS ("
    f"SELECT (SELECT priority {_PENDING} ORDER BY priority LIMIT 1) "
    f"UNION ALL SELECT (SELECT priority {_PENDING} AND priority > p.pr ORDER BY priority LIMIT 1) "
    "FROM p WHERE p.pr IS NOT NULL) "
    f"SELECT min((SELECT scheduled_at {_PENDING} AND priority = p.pr "
    "ORDER BY scheduled_at LIMIT 1)) FROM p WHERE p.pr IS NOT NULL"
)
# Completed and failed jobs per minute in [?1, ?2) (minute numbers, finished_at / 60000).
_THROUGHPUT_KEPT = (
    "SELECT minute, completed, failed FROM job_minutes WHERE minute >= ?1 AND minute < ?2"
)
# A file before schema 16: the same figures from the rows, through jobs_finished_idx.
_THROUGHPUT_SCAN = (
    "SELECT finished_at / 60000 AS m, sum(status = 'completed'), sum(status = 'failed') "
    "FROM jobs WHERE finished_at IS NOT NULL AND finished_at >= ?1 * 60000 "
    "AND finished_at < ?2 * 60000 AND (status = 'completed' OR status = 'failed') GROUP BY m"
)


@functools.cache
def metrics_scan(bounds_ms: tuple[int, ...]) -> str:
    """Every figure `/metrics` takes from `jobs`, in ONE pass over the table: what a file
    before schema 16 is read by (later ones keep the same figures in `job_counts`).

    Grouped by queue, status and the bucket each histogram's value falls in (NULL for a
    row the histogram does not cover, `len(bounds_ms)` above the last bound), so each
    row costs two CASE chains and a few sums; the cumulative buckets are added up by the
    read model. At a million rows this takes 1.4 s; four passes with a `sum(CASE ...)`
    per bucket took 3.5 s, most of it in those per-row sums (the GROUP BY's sort of
    every row, ~0.6 s, is what is left)."""
    run_ok = (
        "status IN ('completed', 'failed') AND started_at IS NOT NULL AND finished_at IS NOT NULL"
    )
    run = "finished_at - started_at"
    lat = "started_at - scheduled_at"  # below 0 counts as 0: every bound is positive

    def bucket(value: str) -> str:
        whens = " ".join(f"WHEN {value} <= {int(b)} THEN {i}" for i, b in enumerate(bounds_ms))
        return f"CASE {whens} ELSE {len(bounds_ms)} END"

    return (
        "SELECT queue, status, "
        f"CASE WHEN {run_ok} THEN {bucket(run)} END AS rb, "
        f"CASE WHEN started_at IS NOT NULL THEN {bucket(lat)} END AS lb, "
        "count(*), sum(attempt + (started_at IS NOT NULL)), sum(attempt), "
        f"sum(CASE WHEN {run_ok} THEN {run} END), "
        f"sum(CASE WHEN started_at IS NOT NULL THEN max(0, {lat}) END) "
        "FROM jobs GROUP BY queue, status, rb, lb"
    )


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def get_by_id(conn: sqlite3.Connection, job_id: str) -> tuple[object, ...] | None:
    """A job by its id alone, for files older than `ROWID_KEY_VERSION` (ids have an index
    there, and rowids are not keys); None on newer files, where `SqliteStore.get` is
    the lookup."""
    if schema_version(conn) >= ROWID_KEY_VERSION:
        return None
    row: tuple[object, ...] | None = conn.execute(_GET_BY_ID, (job_id,)).fetchone()
    return row


def _kept(conn: sqlite3.Connection) -> bool:
    return _counts_source(conn) is not None


def _counts_source(conn: sqlite3.Connection) -> str | None:
    """What the kept counts are read from: `job_counts_now` from schema 18, the table
    itself at schemas 16 and 17, None before (no kept counts)."""
    names = {
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN ('job_counts', 'job_counts_now')"
        )
    }
    if "job_counts_now" in names:
        return "job_counts_now"
    return "job_counts" if "job_counts" in names else None


def kept_count(conn: sqlite3.Connection, statuses: Sequence[str], queue: str | None) -> int | None:
    """Rows in any of `statuses` (all when empty) of `queue` (any when None), from the
    kept counts; None on a file without them."""
    counts = _counts_source(conn)
    if counts is None:
        return None
    sql = f"SELECT coalesce(sum(jobs), 0) FROM {counts}"
    parts: list[str] = []
    params: list[str] = []
    if statuses:
        parts.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(statuses)
    if queue is not None:
        parts.append("queue = ?")
        params.append(queue)
    if parts:
        sql += " WHERE " + " AND ".join(parts)
    return int(conn.execute(sql, params).fetchone()[0])


def _oldest_pending(conn: sqlite3.Connection, queues: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in queues:
        at = conn.execute(OLDEST_PENDING, (name,)).fetchone()[0]
        if at is not None:
            out[name] = int(at)
    return out


def kept_counts(conn: sqlite3.Connection) -> dict[str, tuple[int | None, tuple[int, ...]]]:
    """Per queue: its oldest claimable pending row's time and its rows per status
    (`STATUSES` order), from the kept counts; only queues with rows."""
    counts: dict[str, list[int]] = {}
    index = {status: i for i, status in enumerate(STATUSES)}
    source = _counts_source(conn) or "job_counts"
    for name, status, n in conn.execute(_KEPT_QUEUE_COUNTS.format(counts=source)).fetchall():
        if status in index:
            counts.setdefault(str(name), [0] * len(STATUSES))[index[status]] = int(n)
    pending = index["pending"]
    oldest = _oldest_pending(conn, [q for q, c in counts.items() if c[pending]])
    return {name: (oldest.get(name), tuple(c)) for name, c in counts.items()}


def queue_counts(conn: sqlite3.Connection) -> list[QueueCounts]:
    registered = dict(conn.execute("SELECT name, type FROM queues ORDER BY name").fetchall())
    scanned: dict[str, tuple[int | None, tuple[int, ...]]] = {}
    if _kept(conn):
        scanned = kept_counts(conn)
    else:
        for name, oldest, *counts in conn.execute(QUEUE_STATS_SCAN).fetchall():
            scanned[name] = (oldest, tuple(int(n or 0) for n in counts))
    empty = (0,) * len(STATUSES)
    out: list[QueueCounts] = []
    for name in sorted(registered.keys() | scanned.keys()):
        oldest, counts = scanned.get(name, (None, empty))
        out.append(QueueCounts(name, registered.get(name), counts, oldest))
    return out


def queue_settings(conn: sqlite3.Connection) -> list[QueueSettingsRecord]:
    if not _has_table(conn, "queue_settings"):  # a file no worker has migrated yet
        return []
    rows = conn.execute(
        "SELECT queue, concurrency, rate_limit, rate_per_ms, paused, updated_at "
        "FROM queue_settings ORDER BY queue"
    ).fetchall()
    return [QueueSettingsRecord(str(r[0]), r[1], r[2], r[3], bool(r[4]), int(r[5])) for r in rows]


def worker_records(conn: sqlite3.Connection) -> list[WorkerRecord]:
    return [WorkerRecord(*row) for row in conn.execute(_LIST_WORKERS).fetchall()]


def leader_lease(conn: sqlite3.Connection) -> LeaderLease | None:
    row = conn.execute(_LEADER).fetchone()
    return None if row is None else LeaderLease(str(row[0]), int(row[1]), int(row[2]))


def schedule_records(conn: sqlite3.Connection) -> list[ScheduleRecord]:
    # SELECT *: a file of another release may lack a column (or have more).
    if not _has_table(conn, "job_schedules"):
        return []
    cur = conn.execute("SELECT * FROM job_schedules ORDER BY type, name, id")
    names = [d[0] for d in cur.description]
    return [
        ScheduleRecord.from_columns(dict(zip(names, row, strict=True))) for row in cur.fetchall()
    ]


def collected_totals(conn: sqlite3.Connection) -> list[CollectedTotal]:
    if not _has_table(conn, "job_totals"):
        return []
    rows = conn.execute("SELECT queue, status, jobs, started, retried FROM job_totals").fetchall()
    return [CollectedTotal(str(q), str(s), int(j), int(st), int(r)) for q, s, j, st, r in rows]


def job_metrics(conn: sqlite3.Connection, bounds_ms: tuple[int, ...]) -> JobMetrics:
    source = _counts_source(conn) if bounds_ms == KEPT_BOUNDS_MS else None
    kept = source is not None
    groups = [
        MetricGroup(
            queue,
            status,
            None if rb is None else int(rb),
            None if lb is None else int(lb),
            int(n),
            int(started or 0),
            int(retried or 0),
            int(run_ms or 0),
            int(latency_ms or 0),
        )
        for queue, status, rb, lb, n, started, retried, run_ms, latency_ms in conn.execute(
            _KEPT_GROUPS.format(counts=source) if kept else metrics_scan(bounds_ms)
        ).fetchall()
    ]
    if kept:  # the kept table says "not covered" with -1, the scan with NULL
        groups = [
            replace(
                g,
                run_bucket=None if g.run_bucket == -1 else g.run_bucket,
                latency_bucket=None if g.latency_bucket == -1 else g.latency_bucket,
            )
            for g in groups
        ]
    queues = [str(r[0]) for r in conn.execute("SELECT name FROM queues").fetchall()]
    if kept:
        pending = sorted({g.queue for g in groups if g.status == "pending" and g.rows})
        oldest = _oldest_pending(conn, pending)
    else:
        oldest = {
            str(queue): int(at)
            for queue, at in conn.execute(
                "SELECT queue, min(scheduled_at) FROM jobs WHERE status = 'pending' "
                "AND cancel_requested = 0 GROUP BY queue"
            ).fetchall()
        }
    term = conn.execute("SELECT term FROM leader WHERE id = 1").fetchone()
    return JobMetrics(
        groups,
        collected_totals(conn),
        queues,
        oldest,
        None if term is None else int(term[0]),
    )


def throughput(conn: sqlite3.Connection, first: int, end: int) -> dict[int, tuple[int, int]]:
    """Jobs that ended completed and failed per minute number in [first, end) (minutes
    with none are left out)."""
    sql = _THROUGHPUT_KEPT if _has_table(conn, "job_minutes") else _THROUGHPUT_SCAN
    return {
        int(m): (int(done or 0), int(failed or 0))
        for m, done, failed in conn.execute(sql, (first, end)).fetchall()
    }


def count_finished_before(conn: sqlite3.Connection, before_ms: int) -> int:
    return int(conn.execute(_COUNT_FINISHED_BEFORE, (before_ms,)).fetchone()[0])


def has_job_of_type(conn: sqlite3.Connection, type_name: str) -> bool:
    return bool(conn.execute(_HAS_TYPE, (type_name,)).fetchone()[0])


def size(path: str) -> int:
    # os.stat never opens the file, so it cannot drop a POSIX lock this process holds.
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def wal_bytes(path: str) -> int:
    return size(path + "-wal")


def storage_facts(conn: sqlite3.Connection, path: str) -> StorageFacts:
    integrity = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    return StorageFacts(
        kind="sqlite",
        library_schema_version=SCHEMA_VERSION,
        integrity=integrity,
        journal_mode=mode,
        db_bytes=size(path),
        wal_bytes=wal_bytes(path),
        unlinked_holders=unlinked_holders(path),
    )


def checkpoint(path: str) -> CheckpointResult:
    """A TRUNCATE checkpoint on a connection of its own (maintenance: it waits for
    readers up to its busy timeout). It copies pages already committed and changes no
    row, so `doctor --checkpoint` may run it next to a read-only store."""
    conn = open_writer(path, busy_timeout=5.0)
    try:
        busy, log, done = checkpoint_truncate(conn)
    finally:
        conn.close()
    return CheckpointResult(busy, log, done, wal_bytes(path))


# -- workflows (the console's reads, DESIGN.md §8.9) ------------------------------------
# A workflow's id is made from the clock that stamped its `created_at` (`ids.new_id`),
# so id order is creation order and the listing pages along the primary key, newest
# first, with no index of its own. Its jobs are counted through `jobs_workflow_idx`, one
# page of workflows at a time (never the whole table), in the listing's one statement.
_WORKFLOW_PAGE = (
    "SELECT w.id, w.name, w.created_at, "
    + ", ".join(f"coalesce(sum(j.status = '{status}'), 0)" for status in STATUSES)
    + " FROM (SELECT id, name, created_at FROM workflows{where} ORDER BY id DESC"
    " LIMIT ? OFFSET ?) w LEFT JOIN jobs j ON j.workflow_id = w.id"
    " GROUP BY w.id ORDER BY w.id DESC"
)
_COUNT_WORKFLOWS = "SELECT count(*) FROM workflows{where}"
# Keyed on the downstream job being the workflow's: an edge's upstream job may be a job
# of another workflow. A collected job takes its edges with it (`jobs_collect_deps`).
_WORKFLOW_EDGES = (
    "SELECT u.id, j.id, d.policy, d.many FROM jobs j "
    "JOIN job_deps d ON d.job_key = j.rowid JOIN jobs u ON u.rowid = d.upstream_key "
    "WHERE j.workflow_id = ? ORDER BY j.rowid, u.rowid"
)


def workflow_records(
    conn: sqlite3.Connection, name: str | None, limit: int, offset: int
) -> list[WorkflowRecord]:
    if not _has_table(conn, "workflows"):  # a file from before workflows
        return []
    where, params = _name_filter(name)
    rows = conn.execute(_WORKFLOW_PAGE.format(where=where), (*params, limit, offset)).fetchall()
    return [
        WorkflowRecord(str(r[0]), str(r[1]), int(r[2]), tuple(int(n) for n in r[3:])) for r in rows
    ]


def count_workflows(conn: sqlite3.Connection, name: str | None) -> int:
    if not _has_table(conn, "workflows"):
        return 0
    where, params = _name_filter(name)
    return int(conn.execute(_COUNT_WORKFLOWS.format(where=where), params).fetchone()[0])


def workflow_edges(conn: sqlite3.Connection, workflow_id: str) -> list[tuple[str, str, str, bool]]:
    rows = conn.execute(_WORKFLOW_EDGES, (workflow_id,)).fetchall()
    return [(str(r[0]), str(r[1]), str(r[2]), bool(r[3])) for r in rows]


def _name_filter(name: str | None) -> tuple[str, tuple[str, ...]]:
    return ("", ()) if name is None else (" WHERE name = ?", (name,))
