"""Claim cost against the backlog: drain 10,000 jobs out of `--pending` pending rows.

The backlog is written straight into the table before the clock starts (one
`executemany` of the rows `enqueue` would write, plus the `queues` row a first enqueue
registers; for huey, its `task` rows). Then one worker drains `-n` jobs (async no-op
handler, concurrency 50, global cap 50 / huey's `Worker.loop()` in this thread) and the
rate is compared with the small-backlog case: a claim that scanned the backlog would
show up here. `peak_rss_mb` is this process's peak resident set size at the end.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from _common import (
    NOOP,
    Counter,
    Stopwatch,
    base_parser,
    emit,
    fresh_dir,
    huey_worker,
    jl,
    make_huey,
    make_manager,
    peak_rss_mb,
    rate,
    settle,
    wait_completed,
)

CHUNK = 20_000


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("-n", type=int, default=10_000)
    p.add_argument("--pending", type=int, default=10_000)
    args = p.parse_args()
    n = min(args.n, args.pending)
    with fresh_dir() as d:
        watch = Stopwatch()
        if args.system == "jobledger":
            path = os.path.join(d, "jobs.db")
            _populate(path, args.pending)
            fill = watch.elapsed()
            seconds, first = asyncio.run(_jobledger(path, args.sync, n))
        else:
            path = os.path.join(d, "huey.db")
            seconds, first, fill = _huey(path, args.sync, n, args.pending)
        size_mb = round(os.path.getsize(path) / 2**20, 1)
    emit(
        f"claim_{_label(args.pending)}",
        args.system,
        args.sync,
        n=n,
        pending=args.pending,
        seconds=round(seconds, 4),
        rate=rate(n, seconds),
        first_start_ms=round(first * 1000, 2),
        populate_s=round(fill, 1),
        db_mb=size_mb,
        peak_rss_mb=peak_rss_mb(),
    )


def _label(pending: int) -> str:
    return f"{pending // 1_000_000}M" if pending >= 1_000_000 else f"{pending // 1000}k"


def _rows(total: int) -> Iterator[tuple[Any, ...]]:
    from jobledger._core.ids import new_keyed_id

    now = int(time.time() * 1000) - 1000
    for _ in range(total):
        key, job_id = new_keyed_id(now)
        yield (key, job_id, "{}", NOOP.name, "pending", NOOP.name, 0, 3, None, None, None,
               None, "{}", None, now, now, now)  # fmt: skip


def _populate(path: str, total: int) -> None:
    from jobledger._storage.sqlite import queries as q

    jl.JobManager(path)._store.close()  # create the schema
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # setup only: not what is measured
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(q.REGISTER_QUEUE, (NOOP.name, NOOP.name, int(time.time() * 1000)))
    rows = _rows(total)
    while True:
        chunk = [r for _, r in zip(range(CHUNK), rows, strict=False)]
        if not chunk:
            break
        conn.executemany(q.INSERT_JOB, chunk)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    settle(path)


async def _jobledger(path: str, sync: str, n: int) -> tuple[float, float]:
    counter = Counter()
    jobs = make_manager(path, sync, counter=counter)
    watch = Stopwatch()
    await jobs.start()
    await counter.wait_for(1)
    first = watch.elapsed()
    await wait_completed(jobs, counter, n)
    seconds = watch.elapsed()
    await jobs.stop()
    return seconds, first


def _huey(path: str, sync: str, n: int, pending: int) -> tuple[float, float, float]:
    huey = make_huey(path, sync)
    ran = 0

    @huey.task()  # type: ignore[untyped-decorator]
    def noop() -> None:
        nonlocal ran
        ran += 1

    watch = Stopwatch()
    blob = huey.serialize_task(noop.s())
    conn = huey.storage.conn
    conn.execute("BEGIN")
    for start in range(0, pending, CHUNK):
        size = min(CHUNK, pending - start)
        conn.executemany(
            "INSERT INTO task (queue, data, priority) VALUES (?, ?, 0)", [(huey.name, blob)] * size
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    settle(path)
    fill = watch.elapsed()
    worker = huey_worker(huey)
    watch = Stopwatch()
    worker.loop()
    first = watch.elapsed()
    while ran < n:
        worker.loop()
    seconds = watch.elapsed()
    huey.storage.close()
    return seconds, first, fill


if __name__ == "__main__":
    main()
