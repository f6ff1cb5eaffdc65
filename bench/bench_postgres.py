"""End-to-end drain on PostgreSQL: jobledger vs procrastinate, on the same server.

    python bench/bench_postgres.py                    # both systems, 10,000 jobs, once
    python bench/bench_postgres.py -n 20000 --repeat 3
    python bench/bench_postgres.py --sync OFF         # synchronous_commit=off for both

What is timed, for each system: `n` no-op jobs are written first (untimed), then ONE
worker process with an async no-op handler and concurrency 50 starts, and the clock runs
from the worker's start until the table holds `n` finished rows (committed): the same
"handler ran" counter + "table says done" poll as `drain.py`.

* jobledger: `JobManager("postgresql://...?schema=...")`, one queue, concurrency 50,
  global cap 50, the quiet window off.
* procrastinate: `App(PsycopgConnector)`, `run_worker_async(concurrency=50)`, its own
  LISTEN/NOTIFY on (its default); jobs deferred with `batch_defer_async`. Its tables live
  in a schema of their own (the connections' `search_path`), created with
  `app.schema_manager.apply_schema_async()`.
* Both job tables are ANALYZEd after the prefill (untimed), so neither is planned as
  the empty table it was a moment before.

Every measurement runs in a fresh interpreter (this script calls itself with `--one`) on
a fresh schema, dropped afterwards; the systems alternate when `--repeat` > 1. Both use
the server's `synchronous_commit` (`on`: durable at COMMIT) unless `--sync OFF`, which sets
`synchronous_commit=off` for both (jobledger: `synchronous="OFF"`; procrastinate: the
connection option). Output: one JSON line per measurement, then one summary line with
the medians and the ratio jobledger / procrastinate.

The server: `--dsn`, else `$JOBLEDGER_BENCH_PG_DSN`, else `$JOBLEDGER_TEST_PG_DSN`, else
`postgresql://postgres@127.0.0.1:5432/test`. Exit status 2 when it is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import NOOP, Counter, Stopwatch, jl, machine, rate  # noqa: E402

SYSTEMS = ("jobledger", "procrastinate")
CONCURRENCY = 50
CHUNK = 1000


def default_dsn() -> str:
    return (
        os.environ.get("JOBLEDGER_BENCH_PG_DSN")
        or os.environ.get("JOBLEDGER_TEST_PG_DSN")
        or "postgresql://postgres@127.0.0.1:5432/test"
    )


def unavailable(dsn: str) -> str | None:
    """Why the server cannot be used, or None when it can (used by `run_all.py`)."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {dsn} is unreachable: {str(exc).strip()}"
    return None


def with_query(dsn: str, **params: str) -> str:
    parts = urlsplit(dsn)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *params.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def analyze(dsn: str, table: str) -> None:
    """Fresh planner statistics after the prefill, as a table in service has: without
    them a brand-new table is planned as if empty (procrastinate's fetch then sorts
    every waiting row on each call, ~3x slower)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ANALYZE {table}")


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def wait_rows(count: Any, n: int) -> None:
    """Until `count()` (finished rows, committed) reaches `n`."""
    while await asyncio.to_thread(count) < n:
        await asyncio.sleep(0.001)


# -- jobledger ------------------------------------------------------------------------


async def run_jobledger(dsn: str, schema: str, n: int, sync: str) -> float:
    import psycopg

    url = with_query(dsn, schema=schema)
    producer = jl.JobManager(url, startup_delay=0)
    try:
        for start in range(0, n, CHUNK):
            producer.enqueue_many(NOOP, [{} for _ in range(min(CHUNK, n - start))])
    finally:
        await producer.stop()
    analyze(dsn, f'"{schema}".jobs')

    counter = Counter()
    jobs = jl.JobManager(
        url,
        startup_delay=0,
        synchronous=sync,  # type: ignore[arg-type]
        global_max_concurrency=CONCURRENCY,
    )

    @jobs.handler(NOOP, recovery="retry", concurrency=CONCURRENCY)
    async def noop(ctx: jl.JobContext[dict[str, Any]]) -> None:
        counter.hit()

    with psycopg.connect(dsn, autocommit=True) as reader:
        sql = f"SELECT count(*) FROM \"{schema}\".jobs WHERE status = 'completed'"

        def done() -> int:
            row = reader.execute(sql).fetchone()
            return 0 if row is None else int(row[0])

        watch = Stopwatch()
        await jobs.start()
        await counter.wait_for(n)
        await wait_rows(done, n)
        seconds = watch.elapsed()
        await jobs.stop()
    return seconds


# -- procrastinate --------------------------------------------------------------------


async def run_procrastinate(dsn: str, schema: str, n: int, sync: str) -> float:
    import procrastinate
    import psycopg

    options = f"-c search_path={schema}"
    if sync == "OFF":
        options += " -c synchronous_commit=off"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=dsn,
            kwargs={"options": options},
            min_size=1,
            max_size=CONCURRENCY + 5,
        )
    )
    counter = Counter()

    @app.task(name="noop")
    async def noop() -> None:
        counter.hit()

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, n, CHUNK):
            await noop.batch_defer_async(*[{} for _ in range(min(CHUNK, n - start))])
        analyze(dsn, f'"{schema}".procrastinate_jobs')

        with psycopg.connect(dsn, autocommit=True) as reader:
            table = f'"{schema}".procrastinate_jobs'
            sql = f"SELECT count(*) FROM {table} WHERE status = 'succeeded'"

            def done() -> int:
                row = reader.execute(sql).fetchone()
                return 0 if row is None else int(row[0])

            watch = Stopwatch()
            worker = asyncio.create_task(
                app.run_worker_async(
                    concurrency=CONCURRENCY, wait=True, install_signal_handlers=False
                )
            )
            await counter.wait_for(n)
            await wait_rows(done, n)
            seconds = watch.elapsed()
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass
    return seconds


# -- driver ---------------------------------------------------------------------------


def one(system: str, dsn: str, n: int, sync: str) -> dict[str, Any]:
    schema = f"jlbench_{system}_{uuid.uuid4().hex[:8]}"
    runner = run_jobledger if system == "jobledger" else run_procrastinate
    try:
        seconds = asyncio.run(runner(dsn, schema, n, sync))
    finally:
        drop_schema(dsn, schema)
    return {
        "bench": "pg_drain",
        "system": system,
        "sync": sync,
        "n": n,
        "concurrency": CONCURRENCY,
        "seconds": round(seconds, 4),
        "rate": rate(n, seconds),
    }


def spawn(system: str, dsn: str, n: int, sync: str) -> dict[str, Any] | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", system, "--dsn", dsn]
    cmd += ["-n", str(n), "--sync", sync]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=1800)
    if proc.returncode != 0:
        sys.stderr.write(f"!! {system} failed ({proc.returncode}):\n{proc.stderr[-3000:]}\n")
        return None
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def summary(records: list[dict[str, Any]], sync: str) -> dict[str, Any]:
    rates = {s: [r["rate"] for r in records if r["system"] == s] for s in SYSTEMS}
    med = {s: statistics.median(v) if v else None for s, v in rates.items()}
    ours, theirs = med["jobledger"], med["procrastinate"]
    return {
        "bench": "pg_drain_summary",
        "sync": sync,
        "n": records[0]["n"] if records else None,
        "runs": {s: len(v) for s, v in rates.items()},
        "jobledger_rate": ours,
        "procrastinate_rate": theirs,
        "rates": rates,
        "ratio": round(ours / theirs, 2) if ours and theirs else None,
        "procrastinate_version": _version("procrastinate"),
        "server": _server_version(),
        "machine": machine(),
    }


def _version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "?"


def _server_version() -> str:
    try:
        import psycopg

        with psycopg.connect(default_dsn(), autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return "?" if row is None else str(row[0])
    except Exception:
        return "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-n", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--sync", choices=("NORMAL", "OFF"), default="NORMAL")
    p.add_argument("--system", choices=(*SYSTEMS, "both"), default="both")
    p.add_argument("--dsn", default=None)
    p.add_argument("--one", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = p.parse_args()
    dsn = args.dsn or default_dsn()
    if args.one:
        print(json.dumps(one(args.one, dsn, args.n, args.sync)), flush=True)
        return
    reason = unavailable(dsn)
    if reason is not None:
        sys.stderr.write(f"skipped: {reason}\n")
        sys.exit(2)
    systems = SYSTEMS if args.system == "both" else (args.system,)
    records: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        for system in systems:
            got = spawn(system, dsn, args.n, args.sync)
            if got is not None:
                print(json.dumps(got), flush=True)
                records.append(got)
            time.sleep(0.5)  # let the server settle (checkpoints, autovacuum) between runs
    print(json.dumps(summary(records, args.sync)), flush=True)


if __name__ == "__main__":
    main()
