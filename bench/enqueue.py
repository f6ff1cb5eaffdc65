"""Enqueue rate: `n` no-op jobs from a producer-only process.

    single  one `enqueue` call (one committed transaction) per job
    many    one `enqueue_many` call for all `n` jobs (one transaction)

huey has no batch API: its `many` row is its single enqueue. `--system sqlite-raw` is a
ceiling, not a peer: the statements `enqueue_many` runs for such a batch, with their
arguments built beforehand, into jobledger's own `jobs` table, i.e. what SQLite alone
costs for the same rows and indexes on this machine.

`--backend postgres` (jobledger only): the same calls on a PostgreSQL server (`--dsn`,
else `$JOBLEDGER_BENCH_PG_DSN`, `$JOBLEDGER_TEST_PG_DSN`, or the local `test` database),
in a fresh schema, dropped afterwards. `--chunk K` (with `--mode many`): `enqueue_many`
of K jobs at a time, as a producer that writes batches as they come.

    python bench/enqueue.py --mode many                                  # SQLite
    python bench/enqueue.py --backend postgres --mode many --chunk 20
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from typing import Any

import many_queues
from _common import (
    NOOP,
    Stopwatch,
    base_parser,
    emit,
    fresh_dir,
    jl,
    make_huey,
    make_manager,
    rate,
)


def main() -> None:
    p = base_parser(__doc__ or "", systems=("jobledger", "huey", "sqlite-raw"))
    p.add_argument("--mode", choices=("single", "many"), default="single")
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--dsn", default=None)
    p.add_argument("--chunk", type=int, default=0, help="enqueue_many of this many at a time")
    args = p.parse_args()
    bench = f"enqueue_{args.mode}"
    chunk = args.chunk or args.n
    if args.backend == "postgres":
        if args.system != "jobledger":
            p.error("--backend postgres measures jobledger only")
        dsn = args.dsn or many_queues.default_dsn()
        schema = f"jlenq_{uuid.uuid4().hex[:10]}"
        try:
            target = many_queues.with_schema(dsn, schema)
            seconds = _jobledger(target, None, args.mode, args.n, chunk)
        finally:
            many_queues.pg_drop(dsn, schema)
        emit(
            bench,
            "jobledger-pg",
            "server",
            n=args.n,
            chunk=chunk if args.mode == "many" else 1,
            seconds=round(seconds, 4),
            rate=rate(args.n, seconds),
        )
        return
    with fresh_dir() as d:
        if args.system == "jobledger":
            seconds = _jobledger(os.path.join(d, "jobs.db"), args.sync, args.mode, args.n, chunk)
        elif args.system == "huey":
            seconds = _huey(os.path.join(d, "huey.db"), args.sync, args.n)
        else:
            seconds = _raw(os.path.join(d, "jobs.db"), args.sync, args.n)
    emit(
        bench,
        args.system,
        args.sync,
        n=args.n,
        seconds=round(seconds, 4),
        rate=rate(args.n, seconds),
    )


def _jobledger(target: str, sync: str | None, mode: str, n: int, chunk: int) -> float:
    # Never started: a producer, like a web app.
    jobs = jl.JobManager(target) if sync is None else make_manager(target, sync)
    jobs.enqueue(NOOP, {})  # first write registers the queue; not part of the timing
    payloads: list[dict[str, Any]] = [{} for _ in range(n)]
    watch = Stopwatch()
    if mode == "single":
        enqueue = jobs.enqueue
        for payload in payloads:
            enqueue(NOOP, payload)
    else:
        for start in range(0, n, chunk):
            jobs.enqueue_many(NOOP, payloads[start : start + chunk])
    seconds = watch.elapsed()
    jobs._store.close()
    return seconds


def _huey(path: str, sync: str, n: int) -> float:
    huey = make_huey(path, sync)

    @huey.task()  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    noop()
    watch = Stopwatch()
    for _ in range(n):
        noop()
    seconds = watch.elapsed()
    huey.storage.close()
    return seconds


def _raw(path: str, sync: str, n: int) -> float:
    from jobledger._core.ids import new_keyed_id
    from jobledger._storage.interface import new_row
    from jobledger._storage.sqlite import queries as q
    from jobledger._storage.sqlite.store import SHARED_CHUNK, shared_insert

    jl.JobManager(path)._store.close()  # create the schema
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA synchronous = {sync}")
    now = 1_700_000_000_000
    # The statements `enqueue_many` runs for such a batch, their arguments built
    # beforehand: what is left is SQLite's own work.
    rows = [
        (key, new_row(job_id, NOOP.name, "pending", NOOP.name, 0, "{}", 3, None, None, None,
                      None, "{}", "bench", now, now))
        for key, job_id in (new_keyed_id(now) for _ in range(n))
    ]  # fmt: skip
    shared = tuple(rows[0][1][c] for c in q.SHARED_COLUMNS)
    statements = [
        shared_insert(shared, rows[i : i + SHARED_CHUNK]) for i in range(0, n, SHARED_CHUNK)
    ]
    watch = Stopwatch()
    conn.execute("BEGIN IMMEDIATE")
    for sql, params in statements:
        conn.execute(sql, params)
    conn.execute("COMMIT")
    seconds = watch.elapsed()
    conn.close()
    return seconds


if __name__ == "__main__":
    main()
