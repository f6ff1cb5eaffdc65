"""Shared plumbing for the benchmark scripts.

Every benchmark script is a small program: it takes `--system`, `--sync` and sizes on
the command line, works in a fresh temporary directory (removed afterwards), and prints
one JSON object per measurement on stdout. `run_all.py` runs them as subprocesses, so
each measurement also gets a fresh interpreter.

The peer is huey's SQLite storage (`huey.SqliteHuey`, WAL). Its `fsync` option can only
choose `synchronous=FULL` (`fsync=True`) or `OFF` (`fsync=False`); left unset it runs at
SQLite's compile-time default (FULL here). To compare like with like, `make_huey` sets
the same `synchronous` as jobledger's writer on every connection huey opens, and checks
it took effect.

The temporary directory is created under `$BENCH_TMPDIR` (default: the system temp
dir). It must be on a real disk: on tmpfs an fsync costs nothing and FULL means NORMAL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:  # run straight from a checkout, installed or not
    sys.path.insert(0, SRC)

import jobledger as jl  # noqa: E402

__all__ = [
    "NOOP",
    "SYNCS",
    "Counter",
    "Stopwatch",
    "base_parser",
    "burn",
    "count_completed",
    "emit",
    "fresh_dir",
    "huey_prefill",
    "huey_worker",
    "jl",
    "machine",
    "make_huey",
    "make_manager",
    "peak_rss_mb",
    "prefill",
    "rate",
    "settle",
    "wait_completed",
]

SYNCS = ("NORMAL", "FULL")
NOOP = jl.JobType("bench.noop", dict)


def emit(bench: str, system: str, sync: str, **fields: Any) -> None:
    """One measurement as one JSON line (what `run_all.py` collects)."""
    print(json.dumps({"bench": bench, "system": system, "sync": sync, **fields}), flush=True)


def base_parser(description: str, *, systems: tuple[str, ...] = ("jobledger", "huey")) -> Any:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--system", choices=systems, default=systems[0])
    p.add_argument("--sync", choices=SYNCS, default="NORMAL")
    return p


@contextmanager
def fresh_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="jlbench-", dir=os.environ.get("BENCH_TMPDIR") or None)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def settle(path: str) -> None:
    """fsync a file a setup step wrote with `synchronous=OFF`, before the clock starts.

    Otherwise the first fsync of the timed run (a checkpoint's, even at NORMAL) writes
    back every page of the setup: ~0.5 s for the 1M-row file, charged to the drain."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kib / 1024, 1)


def rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else float("inf")


class Stopwatch:
    __slots__ = ("started",)

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


# -- jobledger ------------------------------------------------------------------------


class Counter:
    """Counts handler runs and wakes a waiter at a target (set from the handler)."""

    __slots__ = ("event", "n", "target")

    def __init__(self) -> None:
        self.n = 0
        self.target = -1
        self.event: asyncio.Event | None = None

    def hit(self) -> None:
        self.n += 1
        if self.n == self.target and self.event is not None:
            self.event.set()

    async def wait_for(self, target: int) -> None:
        self.event = asyncio.Event()
        self.target = target
        if self.n >= target:
            return
        await self.event.wait()


def make_manager(
    path: str,
    sync: str,
    *,
    concurrency: int = 50,
    global_cap: int = 50,
    counter: Counter | None = None,
    output_bytes: int = 0,
    cpu_ms: float = 0.0,
    **options: Any,
) -> jl.JobManager:
    """A manager with the no-op async handler registered (quiet window off); with
    `output_bytes`, the handler returns a string of that many characters; with `cpu_ms`,
    it first computes for that long (holding the loop, as CPU-bound handlers do)."""
    jobs = jl.JobManager(
        path,
        startup_delay=0,
        synchronous=sync,  # type: ignore[arg-type]
        global_max_concurrency=global_cap,
        **options,
    )
    hit = counter.hit if counter is not None else None
    output = "y" * output_bytes if output_bytes else None

    @jobs.handler(NOOP, recovery="retry", concurrency=concurrency)
    async def noop(ctx: jl.JobContext[dict[str, Any]]) -> str | None:
        if cpu_ms:
            burn(cpu_ms)
        if hit is not None:
            hit()
        return output

    return jobs


def burn(ms: float) -> None:
    """Keep the CPU busy for `ms` milliseconds (a stand-in for real computation)."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


async def wait_completed(jobs: jl.JobManager, counter: Counter, n: int) -> None:
    """Until `n` jobs are `completed` in the table (committed), without a polling tax.

    The handler counter says when the last handler ran; only then is the table polled,
    for the last grouped finalize to commit."""
    await counter.wait_for(n)
    while jobs._store.read(lambda c: c.execute(COUNT_COMPLETED).fetchone()[0]) < n:
        await asyncio.sleep(0.001)


def bench_payload(payload_bytes: int) -> dict[str, Any]:
    """`{}`, or a payload whose one string has `payload_bytes` characters."""
    return {"blob": "x" * payload_bytes} if payload_bytes else {}


def prefill(
    path: str, n: int, *, queues: int = 1, chunk: int = 1000, payload_bytes: int = 0
) -> None:
    """Write `n` pending no-op jobs (round-robin over `queues` queues) before a timed run.

    The rows are exactly what `enqueue` writes; they are written with `enqueue_many` in
    chunks only to keep the suite short (the writes are not what is being timed).
    """
    producer = jl.JobManager(path, startup_delay=0)
    payload = bench_payload(payload_bytes)
    try:
        for start in range(0, n, chunk):
            size = min(chunk, n - start)
            if queues == 1:
                producer.enqueue_many(NOOP, [payload] * size)
            else:
                for qi in range(queues):
                    count = len(range(start + qi, start + size, queues))
                    if count:
                        producer.enqueue_many(NOOP, [payload] * count, queue=f"q{qi}")
    finally:
        producer._store.close()


# Read off the finished index: `count(status="completed")` scans the table (schema 0002
# has no status index), which at 1M rows would add ~0.2 s to each poll of a timed run.
COUNT_COMPLETED = "SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL AND status = 'completed'"


def count_completed(path: str) -> int:
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute(COUNT_COMPLETED).fetchone()[0])
    finally:
        conn.close()


# -- huey -----------------------------------------------------------------------------


def make_huey(path: str, sync: str, *, name: str = "bench") -> Any:
    """A `SqliteHuey` on `path` whose connections run at `synchronous=sync` (see above)."""
    from huey import SqliteHuey
    from huey.storage import SqliteStorage

    level = {"NORMAL": 1, "FULL": 2}[sync]

    class Storage(SqliteStorage):  # type: ignore[misc]
        def _create_connection(self) -> sqlite3.Connection:
            conn: sqlite3.Connection = super()._create_connection()
            conn.execute(f"PRAGMA synchronous = {level}")
            return conn

    huey = SqliteHuey(name, filename=path, storage_class=Storage)
    got = huey.storage.conn.execute("PRAGMA synchronous").fetchone()[0]
    mode = huey.storage.conn.execute("PRAGMA journal_mode").fetchone()[0]
    if got != level or mode != "wal":
        raise RuntimeError(f"huey runs synchronous={got}, journal_mode={mode}")
    return huey


def huey_worker(
    huey: Any, *, delay: float = 0.1, max_delay: float = 10.0, backoff: float = 1.15
) -> Any:
    """huey's own consumer worker: what each thread of `huey_consumer -w 1` runs.

    `Worker.loop()` dequeues one task and executes it, or sleeps when the queue is empty
    (huey's defaults: 0.1 s, backing off by 1.15 up to 10 s)."""
    import threading

    from huey.consumer import Worker

    return Worker(huey, threading.Event(), delay, max_delay, backoff)


def huey_prefill(huey: Any, task: Any, n: int, *args: Any) -> None:
    """Insert `n` serialized task messages, the rows `huey.enqueue(task(*args))` writes."""
    data = [(huey.name, huey.serialize_task(task.s(*args)), 0) for _ in range(n)]
    conn = huey.storage.conn
    with huey.storage.lock:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO task (queue, data, priority) VALUES (?, ?, ?)", data)
        conn.execute("COMMIT")


def machine() -> dict[str, Any]:
    import platform

    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
