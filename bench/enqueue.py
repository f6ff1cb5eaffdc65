"""Enqueue rate: `n` no-op jobs from a producer-only process.

    single  one `enqueue` call (one committed transaction) per job
    many    one `enqueue_many` call for all `n` jobs (one transaction)

huey has no batch API: its `many` row is its single enqueue. `--system sqlite-raw` is a
ceiling, not a peer: the statements `enqueue_many` runs for such a batch, with their
arguments built beforehand, into jobledger's own `jobs` table, i.e. what SQLite alone
costs for the same rows and indexes on this machine.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

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
    args = p.parse_args()
    bench = f"enqueue_{args.mode}"
    with fresh_dir() as d:
        if args.system == "jobledger":
            seconds = _jobledger(os.path.join(d, "jobs.db"), args.sync, args.mode, args.n)
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


def _jobledger(path: str, sync: str, mode: str, n: int) -> float:
    jobs = make_manager(path, sync)  # never started: a producer, like a web app
    jobs.enqueue(NOOP, {})  # first write registers the queue; not part of the timing
    payloads: list[dict[str, Any]] = [{} for _ in range(n)]
    watch = Stopwatch()
    if mode == "single":
        enqueue = jobs.enqueue
        for payload in payloads:
            enqueue(NOOP, payload)
    else:
        jobs.enqueue_many(NOOP, payloads)
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
