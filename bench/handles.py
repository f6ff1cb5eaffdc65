"""The user's path: enqueue `n` no-op jobs, start one worker, await every handle.

Two cases in one run, alternating `--repeat` times, each in a fresh directory:

- `rows`: what `drain.py` measures. The rows are written before the clock starts
  (`_common.prefill`) and the clock stops when the table holds `n` completed rows.
- `handles`: the same `n` rows written by this manager's own `enqueue_many` (chunks of
  1,000, like `prefill`, before the clock starts), keeping the handles; the clock stops
  when `asyncio.gather` of every `handle.finished` has returned.
- `futures` (with `--futures`): a reference, not a product path. As `handles`, but the
  clock's gather is of `n` plain futures, made inside the clock, each resolved with
  `None` when its job settles on the rows drain's path (nothing read back, no snapshot,
  no read at await): what awaiting costs when nothing of ours is in it, asyncio's gather
  and futures alone. `futures / rows` is the most any handle built on asyncio futures
  could reach on this machine; `handles / futures` is what our part of a handle costs.

Both run one queue of concurrency 50 under a global cap of 50, an async no-op handler,
and time from `start()`. The record of each case carries its rate; the summary record
(`handles_summary`) carries the median of `handles / rows` over the pairs.

`--count-sql`: also count the SQL statements each case runs (a trace callback on every
connection the store opens, set here only), reported per job. The callback costs time,
so the rates of such a run are not the figures to quote.

`--cpu-time`: time the CPU of the loop's thread (`time.thread_time()`) over the same
region instead of the wall clock. On a machine shared with other work it moves far
less than wall time; the rates are then jobs per CPU second of that thread.

`--gc`: also report, per case, what Python's cyclic collector did while the clock ran
(`gc.callbacks`): the collections of each generation (`gc_collections`, youngest
first) and the milliseconds they took (`gc_ms`).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Any, TypeVar

import jobledger._storage.sqlite.store as sqlite_store
from _common import (
    NOOP,
    Counter,
    base_parser,
    emit,
    fresh_dir,
    make_manager,
    prefill,
    rate,
    wait_completed,
)

T = TypeVar("T")
Clock = Callable[[], float]  # seconds: the wall clock, or the thread's CPU (`--cpu-time`)


class GcWatch:
    """Collections per generation, and their time, inside its `with` block."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._began

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


class SqlCount:
    """Counts statements on the store's connections (the writer and every reader)."""

    def __init__(self) -> None:
        self.n = 0
        self._last = ""
        self._open_reader = sqlite_store.open_reader

    def _hit(self, sql: str) -> None:
        # SQLite calls back again, with the same text, at each trigger program a
        # statement runs (the attempts triggers, once per row): counted once.
        if sql != self._last:
            self.n += 1
        self._last = sql

    def install(self, jobs: Any) -> None:
        jobs._store.conn.set_trace_callback(self._hit)
        opener = self._open_reader

        def open_reader(path: str) -> sqlite3.Connection:
            conn = opener(path)
            conn.set_trace_callback(self._hit)
            return conn

        sqlite_store.open_reader = open_reader  # type: ignore[assignment]
        self.n = 0

    def uninstall(self) -> None:
        sqlite_store.open_reader = self._open_reader  # type: ignore[assignment]


def main() -> None:
    p = base_parser(__doc__ or "", systems=("jobledger",))
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=1, help="pairs (rows, handles), alternating")
    p.add_argument("--count-sql", action="store_true")
    p.add_argument("--cpu-time", action="store_true", help="the loop thread's CPU time")
    p.add_argument("--gc", action="store_true", help="the cyclic collector's work per case")
    p.add_argument("--futures", action="store_true", help="also the `futures` reference case")
    args = p.parse_args()
    clock = time.thread_time if args.cpu_time else time.perf_counter
    ratios: list[float] = []
    cases = ("rows", "handles", "futures") if args.futures else ("rows", "handles")
    runs = {"rows": _rows, "handles": _handles, "futures": _futures}
    rates: dict[str, list[float]] = {case: [] for case in cases}
    per_job: dict[str, list[float]] = {case: [] for case in cases}
    ceiling: list[float] = []
    for rep in range(args.repeat):
        order = cases if rep % 2 == 0 else cases[::-1]
        got: dict[str, float] = {}
        for case in order:
            with fresh_dir() as d:
                count = SqlCount() if args.count_sql else None
                watch = GcWatch() if args.gc else None
                path = os.path.join(d, "jobs.db")
                run = runs[case]
                seconds = asyncio.run(run(path, args.sync, args.n, count, clock, watch))
            got[case] = rate(args.n, seconds)
            rates[case].append(got[case])
            extra: dict[str, Any] = {}
            if count is not None:
                extra["sql_per_job"] = round(count.n / args.n, 2)
                per_job[case].append(extra["sql_per_job"])
            if watch is not None:
                extra["gc_collections"] = watch.collections
                extra["gc_ms"] = round(watch.seconds * 1000, 1)
            emit(f"handles_{case}", "jobledger", args.sync, n=args.n, repeat=rep,
                 seconds=round(seconds, 4), rate=got[case], **extra)  # fmt: skip
        ratios.append(round(got["handles"] / got["rows"], 3))
        if args.futures:
            ceiling.append(round(got["futures"] / got["rows"], 3))
    summary: dict[str, Any] = {
        "n": args.n,
        "pairs": args.repeat,
        "rows_rate": statistics.median(rates["rows"]),
        "handles_rate": statistics.median(rates["handles"]),
        "ratio": round(statistics.median(ratios), 3),
        "ratios": ratios,
    }
    if args.futures:
        summary["futures_rate"] = statistics.median(rates["futures"])
        summary["futures_ratio"] = round(statistics.median(ceiling), 3)
        summary["futures_ratios"] = ceiling
    if args.count_sql:
        summary["rows_sql_per_job"] = statistics.median(per_job["rows"])
        summary["handles_sql_per_job"] = statistics.median(per_job["handles"])
    emit("handles_summary", "jobledger", args.sync, **summary)
    sql = args.count_sql
    print("\n| case | jobs/s (median) |" + (" SQL statements per job |" if sql else ""))
    print("|---|---:|" + ("---:|" if sql else ""))
    labels = {
        "rows": "drain, rows counted",
        "handles": "await every handle",
        "futures": "reference: plain futures, resolved at settle",
    }
    for case in cases:
        label = labels[case]
        cell = f" {summary[f'{case}_sql_per_job']} |" if sql else ""
        print(f"| {label} | {summary[f'{case}_rate']:,.0f} |{cell}")
    print(f"\nhandles / rows: median {summary['ratio']} over {args.repeat} pair(s) {ratios}")
    if args.futures:
        print(f"futures / rows: median {summary['futures_ratio']} {ceiling}")


async def _rows(
    path: str,
    sync: str,
    n: int,
    count: SqlCount | None,
    clock: Clock = time.perf_counter,
    watch: GcWatch | None = None,
) -> float:
    prefill(path, n)
    counter = Counter()
    jobs = make_manager(path, sync, counter=counter)
    seconds, _ = await _timed(jobs, lambda: wait_completed(jobs, counter, n), count, clock, watch)
    return seconds


def _enqueued(path: str, sync: str, n: int) -> tuple[Any, list[Any]]:
    """A manager and the handles of the `n` rows its `enqueue_many` wrote (chunks of
    1,000: what `prefill` writes, the handles kept)."""
    jobs = make_manager(path, sync)
    handles = []
    for start in range(0, n, 1000):
        handles += jobs.enqueue_many(NOOP, [{}] * min(1000, n - start))
    return jobs, handles


async def _handles(
    path: str,
    sync: str,
    n: int,
    count: SqlCount | None,
    clock: Clock = time.perf_counter,
    watch: GcWatch | None = None,
) -> float:
    jobs, handles = _enqueued(path, sync, n)
    seconds, snaps = await _timed(
        jobs, lambda: asyncio.gather(*(h.finished for h in handles)), count, clock, watch
    )
    if sum(s.status == "completed" for s in snaps) != n:
        raise SystemExit("not every handle resolved completed")
    return seconds


async def _futures(
    path: str,
    sync: str,
    n: int,
    count: SqlCount | None,
    clock: Clock = time.perf_counter,
    watch: GcWatch | None = None,
) -> float:
    jobs, handles = _enqueued(path, sync, n)  # kept as `_handles` keeps them: the same heap
    engine = jobs._engine
    futures: dict[str, asyncio.Future[None]] = {}
    early: set[str] = set()  # settled before `gather` made its future (during `start()`)
    settle_unread = engine._settle_unread

    # With no handle waiting, the finalize reads no row and each attempt settles here
    # (`Engine._settle_unread`): the one place a job of the rows drain ends.
    def settle(attempt: Any) -> None:
        fut = futures.pop(attempt.job_id, None)
        if fut is not None:
            fut.set_result(None)
        else:
            early.add(attempt.job_id)
        settle_unread(attempt)

    engine._settle_unread = settle

    def gather() -> Awaitable[list[None]]:
        loop = asyncio.get_running_loop()
        made = [loop.create_future() for _ in handles]
        for h, fut in zip(handles, made, strict=True):
            if h.id in early:
                fut.set_result(None)
            else:
                futures[h.id] = fut
        return asyncio.gather(*made)

    seconds, done = await _timed(jobs, gather, count, clock, watch)
    if len(done) != n or futures:
        raise SystemExit("not every future resolved")
    return seconds


async def _timed(
    jobs: Any,
    done: Callable[[], Awaitable[T]],
    count: SqlCount | None,
    clock: Clock,
    watch: GcWatch | None,
) -> tuple[float, T]:
    """Seconds from `start()` until what `done()` returns has been awaited (called after
    `start()`, inside the clock: a handle's `finished` registers its waiter then), with
    the statement count and the collector's watch around them."""
    if count is not None:
        count.install(jobs)
    try:
        with watch or nullcontext():
            started = clock()
            await jobs.start()
            result = await done()
            seconds = clock() - started
        await jobs.stop()
    finally:
        if count is not None:
            count.uninstall()
    return seconds, result


if __name__ == "__main__":
    main()
