"""The observers' reads on PostgreSQL: the statements of `sqlite/observe.py` in this
dialect, mapped to the same values (`_storage/observe.py`).

Each function runs on one reader connection of `PostgresStore.read` (autocommit: each
statement is its own snapshot, none outlives the call). `s` is the store's quoted
schema name. Sums of bigints come back as `Decimal`; everything is turned into `int`.

From schema 12 the queue counts, `/metrics` and the throughput chart read the kept
counts (`migrations/0012_job_counts.sql`), summed over their per-session slots; a schema
older than that is read by the passes over `jobs`, as before. From schema 14 the counts
are read through `job_counts_now` (`migrations/0014_open_counts.sql`): the table keeps
pending and running rows under one key, and the view adds the running rows read live.
The oldest pending row per queue is a loose scan of `jobs_claim_idx`
(`sqlite/observe.OLDEST_PENDING` says how).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg

from jobledger._storage.observe import (
    KEPT_BOUNDS_MS,
    STATUSES,
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
from jobledger._storage.postgres.migrate import SCHEMA_VERSION
from jobledger._storage.settings import record_of

__all__ = [
    "count_finished_before",
    "count_workflows",
    "has_job_of_type",
    "job_metrics",
    "kept_count",
    "leader_lease",
    "queue_counts",
    "queue_settings",
    "schedule_records",
    "storage_facts",
    "throughput",
    "worker_records",
    "workflow_edges",
    "workflow_records",
]

Conn = psycopg.Connection[Any]
_TERMINAL = "status IN ('completed', 'failed', 'cancelled')"


@functools.cache
def _queue_stats_scan(s: str) -> str:
    return (
        "SELECT queue, min(scheduled_at) FILTER (WHERE status = 'pending'), "
        + ", ".join(f"count(*) FILTER (WHERE status = '{status}')" for status in STATUSES)
        + f" FROM {s}.jobs GROUP BY queue"
    )


@functools.cache
def metrics_scan(s: str, bounds_ms: tuple[int, ...]) -> str:
    """`sqlite/observe.metrics_scan` in this dialect: one grouped pass over `jobs`."""
    run_ok = (
        "status IN ('completed', 'failed') AND started_at IS NOT NULL AND finished_at IS NOT NULL"
    )
    run = "finished_at - started_at"
    lat = "started_at - scheduled_at"
    started = "CASE WHEN started_at IS NOT NULL THEN 1 ELSE 0 END"

    def bucket(value: str) -> str:
        whens = " ".join(f"WHEN {value} <= {int(b)} THEN {i}" for i, b in enumerate(bounds_ms))
        return f"CASE {whens} ELSE {len(bounds_ms)} END"

    return (
        "SELECT queue, status, "
        f"CASE WHEN {run_ok} THEN {bucket(run)} END AS rb, "
        f"CASE WHEN started_at IS NOT NULL THEN {bucket(lat)} END AS lb, "
        f"count(*), sum(attempt + {started}), sum(attempt), "
        f"sum(CASE WHEN {run_ok} THEN {run} END), "
        f"sum(CASE WHEN started_at IS NOT NULL THEN greatest(0, {lat}) END) "
        f"FROM {s}.jobs GROUP BY queue, status, rb, lb"
    )


@functools.cache
def _kept_sql(counts: str) -> tuple[str, str]:
    """The queue counts and the metrics' groups, read from `counts` (`_counts`)."""
    queue_counts = (
        f"SELECT queue, status, sum(jobs) FROM {counts} GROUP BY queue, status "
        "HAVING sum(jobs) <> 0"
    )
    groups = (
        "SELECT queue, status, rb, lb, sum(jobs), sum(started), sum(retried), sum(run_ms), "
        f"sum(latency_ms) FROM {counts} GROUP BY queue, status, rb, lb "
        "HAVING sum(jobs) <> 0"
    )
    return queue_counts, groups


@functools.cache
def _oldest_sql(s: str) -> str:
    """`sqlite/observe.OLDEST_PENDING` for every queue asked for (a text[]) in one
    statement: one recursion per queue along jobs_claim_idx."""
    pending = f"FROM {s}.jobs j WHERE j.status = 'pending' AND j.cancel_requested = 0"
    return (
        "WITH RECURSIVE p(queue, pr) AS ("
        f"SELECT q.name, (SELECT j.priority {pending} AND j.queue = q.name "
        'ORDER BY j.priority LIMIT 1) FROM (SELECT unnest(%s::text[]) COLLATE "C" AS name) q '
        f"UNION ALL SELECT p.queue, (SELECT j.priority {pending} AND j.queue = p.queue "
        "AND j.priority > p.pr ORDER BY j.priority LIMIT 1) FROM p WHERE p.pr IS NOT NULL) "
        f"SELECT queue, min((SELECT j.scheduled_at {pending} AND j.queue = p.queue "
        "AND j.priority = p.pr ORDER BY j.scheduled_at LIMIT 1)) FROM p "
        "WHERE p.pr IS NOT NULL GROUP BY queue"
    )


@functools.cache
def _throughput_sql(s: str, kept: bool) -> str:
    if kept:
        return (
            f"SELECT minute, sum(completed), sum(failed) FROM {s}.job_minutes "
            "WHERE minute >= %s AND minute < %s GROUP BY minute"
        )
    return (
        "SELECT finished_at / 60000, count(*) FILTER (WHERE status = 'completed'), "
        f"count(*) FILTER (WHERE status = 'failed') FROM {s}.jobs "
        "WHERE finished_at IS NOT NULL AND finished_at >= %s * 60000 "
        "AND finished_at < %s * 60000 AND status IN ('completed', 'failed') GROUP BY 1"
    )


def _counts(conn: Conn, s: str) -> str | None:
    """Where the kept counts are read: the view of schema 14 on, the table of schemas 12
    and 13; None before (the readers scan `jobs`)."""
    found = conn.execute(
        "SELECT to_regclass(%s), to_regclass(%s)", (f"{s}.job_counts_now", f"{s}.job_counts")
    ).fetchone()
    if found is None or found[1] is None:
        return None
    return f"{s}.job_counts_now" if found[0] is not None else f"{s}.job_counts"


def kept_count(conn: Conn, s: str, statuses: Sequence[str], queue: str | None) -> int | None:
    """`sqlite/observe.kept_count` in this dialect (summed over the slots)."""
    counts = _counts(conn, s)
    if counts is None:
        return None
    sql = f"SELECT coalesce(sum(jobs), 0) FROM {counts}"
    parts: list[str] = []
    params: list[Any] = []
    if statuses:
        parts.append("status = ANY(%s)")
        params.append(list(statuses))
    if queue is not None:
        parts.append("queue = %s")
        params.append(queue)
    if parts:
        sql += " WHERE " + " AND ".join(parts)
    row = conn.execute(sql, params).fetchone()
    return 0 if row is None else _int(row[0])


def _oldest_pending(conn: Conn, s: str, queues: list[str]) -> dict[str, int]:
    if not queues:
        return {}
    rows = conn.execute(_oldest_sql(s), (queues,)).fetchall()
    return {str(q): int(at) for q, at in rows if at is not None}


def throughput(conn: Conn, s: str, first: int, end: int) -> dict[int, tuple[int, int]]:
    sql = _throughput_sql(s, _has_table(conn, s, "job_minutes"))
    return {
        int(m): (_int(done), _int(failed))
        for m, done, failed in conn.execute(sql, (first, end)).fetchall()
    }


def _has_table(conn: Conn, s: str, name: str) -> bool:
    found = conn.execute("SELECT to_regclass(%s)", (f"{s}.{name}",)).fetchone()
    return found is not None and found[0] is not None


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def queue_settings(conn: Conn, s: str) -> list[QueueSettingsRecord]:
    found = conn.execute("SELECT to_regclass(%s)", (f"{s}.queue_settings",)).fetchone()
    if found is None or found[0] is None:  # a schema no worker has migrated yet
        return []
    rows = conn.execute(
        "SELECT queue, concurrency, rate_limit, rate_per_ms, paused, updated_at "
        f"FROM {s}.queue_settings ORDER BY queue"
    ).fetchall()
    return [record_of(str(r[0]), r[1:]) for r in rows]


def queue_counts(conn: Conn, s: str) -> list[QueueCounts]:
    registered = {
        str(r[0]): str(r[1])
        for r in conn.execute(f"SELECT name, type FROM {s}.queues ORDER BY name").fetchall()
    }
    scanned: dict[str, tuple[int | None, tuple[int, ...]]] = {}
    source = _counts(conn, s)
    if source is not None:
        index = {status: i for i, status in enumerate(STATUSES)}
        kept: dict[str, list[int]] = {}
        for name, status, n in conn.execute(_kept_sql(source)[0]).fetchall():
            if status in index:
                kept.setdefault(str(name), [0] * len(STATUSES))[index[status]] = _int(n)
        at = _oldest_pending(conn, s, [q for q, c in kept.items() if c[index["pending"]]])
        scanned = {name: (at.get(name), tuple(c)) for name, c in kept.items()}
    else:
        for name, oldest, *found in conn.execute(_queue_stats_scan(s)).fetchall():
            scanned[str(name)] = (None if oldest is None else int(oldest), tuple(map(_int, found)))
    empty = (0,) * len(STATUSES)
    out: list[QueueCounts] = []
    for name in sorted(registered.keys() | scanned.keys()):
        oldest, counts = scanned.get(name, (None, empty))
        out.append(QueueCounts(name, registered.get(name), counts, oldest))
    return out


def worker_records(conn: Conn, s: str) -> list[WorkerRecord]:
    rows = conn.execute(
        f"SELECT id, hostname, pid, handlers, started_at, heartbeat_at, stopped_at FROM {s}.workers"
    ).fetchall()
    return [
        WorkerRecord(str(r[0]), str(r[1]), int(r[2]), r[3], int(r[4]), int(r[5]), _opt_int(r[6]))
        for r in rows
    ]


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def leader_lease(conn: Conn, s: str) -> LeaderLease | None:
    row = conn.execute(
        f"SELECT worker_id, term, expires_at FROM {s}.leader WHERE id = 1"
    ).fetchone()
    return None if row is None else LeaderLease(str(row[0]), int(row[1]), int(row[2]))


def schedule_records(conn: Conn, s: str) -> list[ScheduleRecord]:
    cur = conn.execute(f"SELECT * FROM {s}.job_schedules ORDER BY type, name, id")
    names = [d.name for d in cur.description or ()]
    return [
        ScheduleRecord.from_columns(dict(zip(names, row, strict=True))) for row in cur.fetchall()
    ]


def _collected_totals(conn: Conn, s: str) -> list[CollectedTotal]:
    rows = conn.execute(f"SELECT queue, status, jobs, started, retried FROM {s}.job_totals")
    return [
        CollectedTotal(str(q), str(st), int(j), int(sta), int(r))
        for q, st, j, sta, r in rows.fetchall()
    ]


def job_metrics(conn: Conn, s: str, bounds_ms: tuple[int, ...]) -> JobMetrics:
    counts = _counts(conn, s) if bounds_ms == KEPT_BOUNDS_MS else None
    kept = counts is not None
    groups = [
        MetricGroup(
            str(queue),
            str(status),
            _opt_int(rb),
            _opt_int(lb),
            _int(n),
            _int(started),
            _int(retried),
            _int(run_ms),
            _int(latency_ms),
        )
        for queue, status, rb, lb, n, started, retried, run_ms, latency_ms in conn.execute(
            _kept_sql(counts)[1] if counts is not None else metrics_scan(s, bounds_ms)
        ).fetchall()
    ]
    queues = [str(r[0]) for r in conn.execute(f"SELECT name FROM {s}.queues").fetchall()]
    if kept:  # the kept table says "not covered" with -1, the scan with NULL
        groups = [
            replace(
                g,
                run_bucket=None if g.run_bucket == -1 else g.run_bucket,
                latency_bucket=None if g.latency_bucket == -1 else g.latency_bucket,
            )
            for g in groups
        ]
        pending = sorted({g.queue for g in groups if g.status == "pending" and g.rows})
        oldest = _oldest_pending(conn, s, pending)
    else:
        oldest = {
            str(queue): int(at)
            for queue, at in conn.execute(
                f"SELECT queue, min(scheduled_at) FROM {s}.jobs WHERE status = 'pending' "
                "AND cancel_requested = 0 GROUP BY queue"
            ).fetchall()
        }
    term = conn.execute(f"SELECT term FROM {s}.leader WHERE id = 1").fetchone()
    return JobMetrics(
        groups,
        _collected_totals(conn, s),
        queues,
        oldest,
        None if term is None else int(term[0]),
    )


def count_finished_before(conn: Conn, s: str, before_ms: int) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM {s}.jobs WHERE finished_at IS NOT NULL AND finished_at < %s "
        f"AND {_TERMINAL}",
        (before_ms,),
    ).fetchone()
    return 0 if row is None else int(row[0])


def has_job_of_type(conn: Conn, s: str, type_name: str) -> bool:
    """`sqlite/observe.has_job_of_type` in this dialect (also a scan: `type` has no index)."""
    row = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM {s}.jobs WHERE type = %s)", (type_name,)
    ).fetchone()
    return row is not None and bool(row[0])


def storage_facts(conn: Conn) -> StorageFacts:
    version = conn.execute("SHOW server_version").fetchone()
    read_only = conn.execute("SHOW transaction_read_only").fetchone()
    return StorageFacts(
        kind="postgres",
        library_schema_version=SCHEMA_VERSION,
        server_version=None if version is None else str(version[0]),
        read_only=None if read_only is None else str(read_only[0]) == "on",
    )


# -- workflows (the console's reads; `sqlite/observe.py` says why they are shaped so) ----


@functools.cache
def _workflow_page(s: str, by_name: bool) -> str:
    where = " WHERE name = %s" if by_name else ""
    return (
        "SELECT w.id, w.name, w.created_at, "
        + ", ".join(f"count(j.id) FILTER (WHERE j.status = '{status}')" for status in STATUSES)
        + f" FROM (SELECT id, name, created_at FROM {s}.workflows{where} ORDER BY id DESC"
        f" LIMIT %s OFFSET %s) w LEFT JOIN {s}.jobs j ON j.workflow_id = w.id"
        " GROUP BY w.id, w.name, w.created_at ORDER BY w.id DESC"
    )


def _has_workflows(conn: Conn, s: str) -> bool:
    found = conn.execute("SELECT to_regclass(%s)", (f"{s}.workflows",)).fetchone()
    return found is not None and found[0] is not None


def workflow_records(
    conn: Conn, s: str, name: str | None, limit: int, offset: int
) -> list[WorkflowRecord]:
    if not _has_workflows(conn, s):  # a schema from before workflows
        return []
    params = (limit, offset) if name is None else (name, limit, offset)
    rows = conn.execute(_workflow_page(s, name is not None), params).fetchall()
    return [WorkflowRecord(str(r[0]), str(r[1]), int(r[2]), tuple(map(_int, r[3:]))) for r in rows]


def count_workflows(conn: Conn, s: str, name: str | None) -> int:
    if not _has_workflows(conn, s):
        return 0
    if name is None:
        row = conn.execute(f"SELECT count(*) FROM {s}.workflows").fetchone()
    else:
        row = conn.execute(
            f"SELECT count(*) FROM {s}.workflows WHERE name = %s", (name,)
        ).fetchone()
    return 0 if row is None else _int(row[0])


def workflow_edges(conn: Conn, s: str, workflow_id: str) -> list[tuple[str, str, str, bool]]:
    # Keyed on the downstream job being the workflow's (its upstream may be another's).
    rows = conn.execute(
        f"SELECT d.upstream_id, d.job_id, d.policy, d.many FROM {s}.jobs j "
        f"JOIN {s}.job_deps d ON d.job_id = j.id WHERE j.workflow_id = %s "
        "ORDER BY d.job_id, d.upstream_id",
        (workflow_id,),
    ).fetchall()
    return [(str(r[0]), str(r[1]), str(r[2]), bool(r[3])) for r in rows]
