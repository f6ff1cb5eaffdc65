"""The console's reads at a million rows (issue 25): the overview's queue counts,
`/metrics`, the jobs list (first page, by status, each kind of search) and the
throughput chart, timed through the real `ReadModel` and the real Starlette app.

    cd bench && PYTHONPATH=../src python console.py --rows 1000000 --backend sqlite
    cd bench && PYTHONPATH=../src python console.py --rows 1000000 --backend postgres

**The rows.** `--rows` jobs over `--queues` queues (`q00`...), written by the library's own
`enqueue_many` (1,000 a call, a queue a call in turn) on a `FakeClock` that moves from
seven days ago to now, so ids, row keys and times are what producers write. Payloads
hold `user` (20,000 values), `order` and `region`; each call's metadata a `tenant` (50).
Then each row is moved to where a week of real work leaves it, by raw UPDATEs that
write the columns the worker's claim and finalize write (status, worker_id, attempt,
started_at, finished_at, output, error with a traceback) and, for every retry, the
`job_attempts` record the retry trigger writes (so `jobs.attempts()` reads them):

* the newest 3% of rows are the backlog: 92% of them pending, 2% running, 6% delayed
  after one retry;
* the rest ended: 4% failed after 3 attempts (`CARD_DECLINED`), 1% cancelled while
  pending (`JOB_CANCELLED`), 10% completed after one retry, the others completed at
  once; queue latency 0-3 s and run time 5 ms-5 s, from a hash of the row.

Those UPDATEs go through the table, so on a schema with kept counts its triggers keep
them as the worker's statements would. A row's hash: SQLite `rowid`, PostgreSQL
`hashtext(id)`. Building a million rows takes about a minute on SQLite, a few on
PostgreSQL.

**The reads.** Each figure is the median (and range) of `--repeat` calls after one
warm-up call, on a `ReadModel` opened read-only and the app from `create_app` driven by
`starlette.testclient`. A tree without `/api/throughput` (before issue 25's kept counts)
reports it as null.

`--db PATH` (SQLite) or `--schema NAME` (PostgreSQL) keeps the database: a second run
finds it filled and only reads, so two trees can be timed on the same rows (the newer
one migrates it first, which is when its kept counts are built from the rows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

import jobledger as jl  # noqa: E402
from jobledger.testing import FakeClock  # noqa: E402

T = jl.JobType("bench.console", dict)
BATCH = 1000
REGIONS = ("eu", "us", "ap", "sa", "af")
DAYS = 7
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

_TRACEBACK = (
    'Traceback (most recent call last):\\n  File \\"app/billing.py\\", line 88, in charge\\n'
    "    raise CardDeclined(order)\\nbilling.CardDeclined: card declined"
)
FAILED_ERROR = (
    '{"code": "CARD_DECLINED", "message": "card declined", "retryable": false, '
    f'"params": {{}}, "traceback": "{_TRACEBACK}"}}'
)
RETRY_ERROR = '{"code": "UPSTREAM_503", "message": "upstream busy", "retryable": true}'
CANCEL_ERROR = (
    '{"code": "JOB_CANCELLED", "message": "Cancelled by user", "retryable": false, '
    '"params": {"reason": "cancel"}}'
)


def fill(url: str, rows: int, queues: int) -> None:
    clock = FakeClock(NOW - timedelta(days=DAYS))
    jobs = jl.JobManager(url, clock=clock, startup_delay=0)
    calls = max(1, rows // BATCH)
    step = DAYS * 86400 / calls
    n = 0
    for c in range(calls):
        size = min(BATCH, rows - n)
        payloads = [
            {"user": f"u{(n + i) % 20000}", "order": n + i, "region": REGIONS[(n + i) % 5]}
            for i in range(size)
        ]
        jobs.enqueue_many(
            T, payloads, queue=f"q{c % queues:02d}", metadata={"tenant": f"t{c % 50}"}
        )
        n += size
        clock.advance(step)
    jobs._store.close()  # never started: nothing else to stop


def _states_sql(h: str, newest: int, key: str, attempts_key: str) -> list[str]:
    """The UPDATEs that move rows to their week's end (module docstring), for a backend
    whose row hash is `h` (0-999) and whose `job_attempts` names the job by `key`."""
    lat = f"(({h}) * 37 % 3000)"
    run = f"(5 + ({h}) * 53 % 5000)"
    done = (
        f"worker_id = 'bench-worker', started_at = scheduled_at + {lat}, "
        f"finished_at = scheduled_at + {lat} + {run}, updated_at = scheduled_at + {lat} + {run}"
    )
    old = f"created_at < {newest}"
    # Each statement moves only rows still pending, so a run cut short (another session's
    # test terminating backends) can be redone without doubling anything.
    todo = "status = 'pending' AND"
    return [
        # the backlog
        f"UPDATE jobs SET status = 'running', worker_id = 'bench-worker', "
        f"started_at = scheduled_at + {lat}, updated_at = scheduled_at + {lat} "
        f"WHERE {todo} created_at >= {newest} AND ({h}) >= 920 AND ({h}) < 940",
        f"UPDATE jobs SET status = 'delayed', attempt = 1, error = '{RETRY_ERROR}', "
        f"scheduled_at = scheduled_at + 8 * 86400000 "
        f"WHERE {todo} created_at >= {newest} AND ({h}) >= 940",
        # what ended
        f"UPDATE jobs SET status = 'failed', attempt = 2, error = '{FAILED_ERROR}', {done} "
        f"WHERE {todo} {old} AND ({h}) < 40",
        f"UPDATE jobs SET status = 'cancelled', error = '{CANCEL_ERROR}', "
        f"finished_at = scheduled_at + {lat}, updated_at = scheduled_at + {lat} "
        f"WHERE {todo} {old} AND ({h}) >= 40 AND ({h}) < 50",
        f"UPDATE jobs SET status = 'completed', attempt = 1, output = '{{\"ok\": true}}', "
        f"{done} WHERE {todo} {old} AND ({h}) >= 50 AND ({h}) < 150",
        f"UPDATE jobs SET status = 'completed', output = '{{\"ok\": true}}', {done} "
        f"WHERE {todo} {old} AND ({h}) >= 150",
        # the retries' records, as the retry trigger writes them
        "INSERT INTO job_attempts (job_key, n, attempt, worker_id, started_at, finished_at, "
        f"outcome, error) SELECT {attempts_key}, g.n, g.n, 'bench-worker', scheduled_at - 60000, "
        f"scheduled_at - 59000, 'retry', '{RETRY_ERROR}' FROM jobs "
        "JOIN (SELECT 0 AS n UNION ALL SELECT 1) g ON g.n < jobs.attempt "
        "WHERE NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_key = "
        f"{attempts_key} AND a.n = g.n)",
    ]


def settle_sqlite(path: str, rows: int) -> None:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    newest = _newest_cut(conn.execute("SELECT min(created_at), max(created_at) FROM jobs"))
    # rowid's low bits are the id's per-millisecond sequence: spread by a multiplier.
    h = "(rowid % 1000003) * 7919 % 1000"
    conn.execute("BEGIN IMMEDIATE")
    for sql in _states_sql(h, newest, "rowid", "jobs.rowid"):
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("ANALYZE")
    conn.close()


def settle_postgres(url: str, schema: str) -> None:
    import psycopg

    dsn = url.split("?")[0]
    for attempt in range(5):
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{schema}"')
                cut = conn.execute("SELECT min(created_at), max(created_at) FROM jobs")
                newest = _newest_cut(cut)
                for sql in _states_sql("abs(hashtext(id)) % 1000", newest, "id", "jobs.id"):
                    conn.execute(sql.replace("job_key", "job_id"))  # one transaction each
                conn.execute("VACUUM ANALYZE jobs")
                conn.execute("VACUUM ANALYZE job_attempts")
                return
        except psycopg.OperationalError:
            if attempt == 4:
                raise
            time.sleep(5)


def unsettled(dsn: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FILTER (WHERE status = 'pending') * 10 > count(*) "
            f'FROM "{schema}".jobs'
        ).fetchone()
        return bool(row and row[0])


def _newest_cut(cur: Any) -> int:
    lo, hi = cur.fetchone()
    return int(hi - (hi - lo) * 0.03)


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, Any]:
    fn()  # warm-up: caches, prepared statements, the pool
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return {
        "median_ms": round(statistics.median(runs), 2),
        "min_ms": round(min(runs), 2),
        "max_ms": round(max(runs), 2),
    }


def measure(url: str, repeat: int) -> list[dict[str, Any]]:
    from starlette.testclient import TestClient

    from jobledger._observe.http import create_app
    from jobledger._observe.read_model import JobQuery, ReadModel

    rm = ReadModel(url, clock=FakeClock(NOW))
    client = TestClient(create_app(url, read_model=rm))
    failed = rm.list_jobs(JobQuery(status=("failed",)), limit=1)
    prefix = failed[0].id[:13] if failed else "0000"

    def get(path: str) -> Callable[[], Any]:
        def call() -> Any:
            r = client.get(path)
            if r.status_code == 404:
                raise LookupError(path)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
            return r

        return call

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("overview counts (ReadModel.queue_stats)", rm.queue_stats),
        ("GET /api/queues", get("/api/queues")),
        ("GET /metrics", get("/metrics")),
        ("GET /api/jobs", get("/api/jobs")),
        ("GET /api/jobs?status=pending", get("/api/jobs?status=pending")),
        ("GET /api/jobs?status=failed", get("/api/jobs?status=failed")),
        ("GET /api/jobs?status=completed", get("/api/jobs?status=completed")),
        (f"GET /api/jobs?q={prefix} (id prefix)", get(f"/api/jobs?q={prefix}")),
        ("GET /api/jobs?q=payload.user:u123", get("/api/jobs?q=payload.user:u123")),
        ("GET /api/jobs?q=metadata.tenant:t7", get("/api/jobs?q=metadata.tenant:t7")),
        ("GET /api/jobs?q=CARD_DECLINED", get("/api/jobs?q=CARD_DECLINED")),
        ("GET /api/throughput", get("/api/throughput")),
    ]
    out = []
    for name, fn in cases:
        try:
            result: dict[str, Any] | None = timed(fn, repeat)
        except LookupError:
            result = None
        out.append({"read": name, **(result or {"median_ms": None})})
    rm.close()
    return out


def declare_search_indexes(url: str, fields: list[str], drop: bool) -> list[dict[str, Any]]:
    """Each field's `add_search_index`, timed once (building an index is not repeated)."""
    jobs = jl.JobManager(url, startup_delay=0)
    out: list[dict[str, Any]] = []
    try:
        if not hasattr(jobs, "add_search_index"):
            return out
        if drop:
            for field in jobs.search_indexes():
                jobs.drop_search_index(field)
        for field in fields:
            t = time.perf_counter()
            made = jobs.add_search_index(field)
            ms = round((time.perf_counter() - t) * 1000, 1)
            out.append({"read": f"add_search_index({field!r}) {'built' if made else 'found'}",
                        "median_ms": ms, "min_ms": ms, "max_ms": ms})  # fmt: skip
    finally:
        jobs._store.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--queues", type=int, default=20)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--db", help="SQLite: keep the database at this path (reused when filled)")
    p.add_argument("--schema", help="PostgreSQL: keep this schema (reused when filled)")
    p.add_argument(
        "--search-index",
        action="append",
        default=[],
        metavar="FIELD",
        help="declare a search index on FIELD (payload.user, metadata.tenant) before the "
        "reads, timed (repeatable; a tree without search indexes ignores it)",
    )
    p.add_argument(
        "--drop-search-indexes",
        action="store_true",
        help="drop every declared search index first (to time the searches without them)",
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("JOBLEDGER_BENCH_PG_DSN")
        or "postgresql://postgres@127.0.0.1:5432/test",
    )
    args = p.parse_args()
    tmp = None
    if args.backend == "sqlite":
        if args.db:
            url = args.db
        else:
            tmp = tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR"))
            url = os.path.join(tmp.name, "console.db")
        fresh = not os.path.exists(url)
    else:
        import psycopg

        schema = args.schema or f"jlbench_console_{os.getpid()}"
        url = f"{args.dsn}?schema={schema}"
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".jobs',)).fetchone()
            fresh = found is None or found[0] is None
    started = time.perf_counter()
    if fresh:
        fill(url, args.rows, args.queues)
        if args.backend == "sqlite":
            settle_sqlite(url, args.rows)
        else:
            settle_postgres(url, schema)
    else:
        if args.backend == "postgres" and unsettled(args.dsn, schema):
            settle_postgres(url, schema)  # a run cut short: finish moving its rows
        # A kept database: let this tree migrate it (as a worker's start would) first.
        jl.JobManager(url, startup_delay=0)._store.close()
    built = time.perf_counter() - started
    indexed = declare_search_indexes(url, args.search_index, args.drop_search_indexes)
    try:
        results = indexed + measure(url, args.repeat)
    finally:
        if args.backend == "postgres" and not args.schema:
            import psycopg

            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        if tmp is not None:
            tmp.cleanup()
    for r in results:
        print(json.dumps({"bench": "console", "backend": args.backend, "rows": args.rows,
                          "built_s": round(built, 1), **r}), flush=True)  # fmt: skip
    print(f"\n{args.rows:,} rows, {args.queues} queues, {args.backend}; medians of "
          f"{args.repeat} [min-max] (setup {built:.0f} s)", file=sys.stderr)  # fmt: skip
    for r in results:
        if r["median_ms"] is None:
            print(f"  {r['read']:<48} n/a", file=sys.stderr)
        else:
            print(f"  {r['read']:<48} {r['median_ms']:>9.2f} ms "
                  f"[{r['min_ms']:.2f}-{r['max_ms']:.2f}]", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
