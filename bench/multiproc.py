"""Several worker processes on one file: aggregate throughput, and lock errors seen.

`-n` no-op jobs are pending before the clock starts. `--procs` worker processes
("spawn") each open the file and start their consumer held back; once all are ready,
they are released together and the clock starts. (jobledger: each manager is started
paused and the pause is released then. Its start, which opens the file, registers the
worker and takes part in the leader election, took 50-250 ms per process when four
started at once on two cores; it used to run inside the clock, four times over in the
four-process run and once in the one-process run.) While they drain,
this process acts as a user next to them: it enqueues `--extra` more jobs one at a time
(every 2 ms) into the same queue. The clock stops when all `n + extra` jobs are done; it
cannot stop before the producer is through (`producer_seconds`, about 1.2 s), so `-n`
must be large enough for the drain to take longer (`run_all.py` uses 60,000).

Counted as "database is locked" errors reaching users: an exception out of the user's
`enqueue`, a log record at WARNING or above that mentions a busy/locked database (a
claim or finalize that failed), and a job that ended `failed` because of one.

`--cpu-ms M` makes every job compute for M ms first (on both sides), and
`--process-max K` sets each jobledger worker's `process_max_concurrency`; the record is
then named `cpu_w<procs>` (`cpu_w<procs>_pmax` with K). Use `--extra 0` with them.

jobledger: each process is a started manager, async no-op handler, concurrency 50,
global cap 50. huey: each process runs its consumer's `Worker.loop()` in its main thread
(default polling); a shared counter says when all tasks have executed.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from _common import (
    NOOP,
    Counter,
    base_parser,
    burn,
    count_completed,
    emit,
    fresh_dir,
    huey_prefill,
    huey_worker,
    make_huey,
    make_manager,
    prefill,
    rate,
)

LOCK_WORDS = ("database is locked", "database is busy", "db_busy", "sqlite_busy")


class LockCounter(logging.Handler):
    """Counts log records (WARNING and above) that mention a busy/locked database."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.locked = 0
        self.other = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" {exc} {getattr(exc, 'code', '')} {exc.__cause__ or ''}"
        if any(word in text.lower() for word in LOCK_WORDS):
            self.locked += 1
        else:
            self.other += 1


def _install_counter() -> LockCounter:
    handler = LockCounter()
    logging.getLogger().addHandler(handler)
    return handler


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--extra", type=int, default=500)
    p.add_argument("--cpu-ms", type=float, default=0.0, help="each job computes this long")
    p.add_argument("--process-max", type=int, default=None, help="process_max_concurrency")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    with fresh_dir() as d:
        name = "jobs.db" if args.system == "jobledger" else "huey.db"
        path = os.path.join(d, name)
        result = _run(
            ctx, path, args.system, args.sync, args.n, args.procs, args.extra,
            Work(args.cpu_ms, args.process_max),
        )  # fmt: skip
    total = args.n + args.extra
    name = f"procs_{args.procs}"
    if args.cpu_ms:
        name = f"cpu_w{args.procs}" + ("" if args.process_max is None else "_pmax")
    emit(
        name,
        args.system,
        args.sync,
        n=total,
        procs=args.procs,
        seconds=round(result["seconds"], 4),
        producer_seconds=round(result["producer_seconds"], 4),
        rate=rate(total, result["seconds"]),
        locked_errors=result["locked"],
        other_errors=result["other"],
        per_process=result["per_process"],
        cpu_ms=args.cpu_ms,
        process_max=args.process_max,
    )


@dataclass(frozen=True)
class Work:
    """What each job does (`cpu_ms` of computation, none by default) and the workers'
    `process_max_concurrency` (jobledger only: a huey worker runs one task at a time)."""

    cpu_ms: float = 0.0
    process_max: int | None = None


def _run(
    ctx: Any, path: str, system: str, sync: str, n: int, procs: int, extra: int, work: Work
) -> dict[str, Any]:
    if system == "jobledger":
        prefill(path, n)
        done_count: Any = None
    else:
        huey = make_huey(path, sync)
        huey_prefill(huey, _huey_task(huey, cpu_ms=work.cpu_ms), n)
        huey.storage.close()
        done_count = ctx.Value("q", 0)
    ready = ctx.Barrier(procs + 1)
    finish = ctx.Event()
    results = ctx.Queue()
    target = _jobledger_worker if system == "jobledger" else _huey_worker
    workers = [
        ctx.Process(target=target, args=(path, sync, ready, finish, results, done_count, work))
        for _ in range(procs)
    ]
    for w in workers:
        w.start()
    ready.wait(60)
    started = time.perf_counter()
    user_locked, user_other = _produce(path, system, sync, extra)
    producer_seconds = time.perf_counter() - started
    total = n + extra
    if system == "jobledger":
        seconds = _jobledger_done(path, total, started)
    else:
        while done_count.value < total:
            time.sleep(0.02)
        seconds = time.perf_counter() - started
    finish.set()
    per_process = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(30)
    failed_locked = _failed_locked(path) if system == "jobledger" else 0
    return {
        "seconds": seconds,
        "producer_seconds": producer_seconds,
        "locked": user_locked + failed_locked + sum(r["locked"] for r in per_process),
        "other": user_other + sum(r["other"] for r in per_process),
        "per_process": [r["handled"] for r in per_process],
    }


# Whether any job is left to run. Both halves are answered by a partial index (the claim
# index holds every claimable pending row, jobs_running_idx every running one), so a
# poll costs microseconds. Polling `count_completed` instead, which reads every finished
# row (~10 ms of CPU at 30,000 rows), took about a third of a core from the workers on
# the two-core bench machine; huey's side reads a shared counter.
LEFT_TO_RUN = (
    "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending' AND cancel_requested = 0) "
    "OR EXISTS (SELECT 1 FROM jobs WHERE status = 'running')"
)


def _jobledger_done(path: str, total: int, started: float) -> float:
    """Seconds from `started` until every job is committed `completed`.

    Called once the producer is through, so no job is still to be written: a job the
    poll does not find pending or running has finished. The time is taken before the
    poll's query, whose snapshot is at least that recent; the full count then confirms.
    """
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5)
    try:
        while True:
            now = time.perf_counter()
            if not conn.execute(LEFT_TO_RUN).fetchone()[0]:
                break
            time.sleep(0.02)
    finally:
        conn.close()
    done = count_completed(path)
    if done != total:
        raise RuntimeError(f"{done} of {total} jobs completed; the others did not")
    return now - started


def _produce(path: str, system: str, sync: str, extra: int) -> tuple[int, int]:
    """The user next to the workers: enqueue one job every 2 ms; count what raises."""
    locked = other = 0
    if system == "jobledger":
        from _common import jl

        producer = jl.JobManager(path, startup_delay=0, synchronous=sync)  # type: ignore[arg-type]
        enqueue: Any = lambda: producer.enqueue(NOOP, {})  # noqa: E731
    else:
        huey = make_huey(path, sync)
        enqueue = _huey_task(huey)
    for _ in range(extra):
        try:
            enqueue()
        except Exception as exc:
            text = f"{exc} {getattr(exc, 'code', '')}".lower()
            if any(word in text for word in LOCK_WORDS):
                locked += 1
            else:
                other += 1
        time.sleep(0.002)
    return locked, other


def _failed_locked(path: str) -> int:
    conn = sqlite3.connect(path, timeout=5)
    try:
        rows = conn.execute("SELECT error FROM jobs WHERE status = 'failed'").fetchall()
    finally:
        conn.close()
    return sum(1 for (err,) in rows if any(w in str(err).lower() for w in LOCK_WORDS))


def _jobledger_worker(
    path: str, sync: str, ready: Any, finish: Any, results: Any, _count: Any, work: Work
) -> None:
    counter_log = _install_counter()
    counter = Counter()
    jobs = make_manager(
        path, sync, counter=counter, cpu_ms=work.cpu_ms, process_max_concurrency=work.process_max
    )

    async def run() -> None:
        hold = jobs.pause("bench: until every worker is ready")
        await jobs.start()
        ready.wait(60)
        hold.dispose()
        while not finish.is_set():
            await asyncio.sleep(0.01)
        await jobs.stop()

    asyncio.run(run())
    results.put({"handled": counter.n, "locked": counter_log.locked, "other": counter_log.other})


def _huey_task(huey: Any, count: Any = None, cpu_ms: float = 0.0) -> Any:
    def noop() -> None:
        if cpu_ms:
            burn(cpu_ms)
        if count is not None:
            with count.get_lock():
                count.value += 1

    # huey names a task by its function's module; the same name in every process.
    noop.__module__ = "jlbench"
    return huey.task(name="noop")(noop)


def _huey_worker(
    path: str, sync: str, ready: Any, finish: Any, results: Any, count: Any, work: Work
) -> None:
    counter_log = _install_counter()
    huey = make_huey(path, sync)
    handled = 0

    _huey_task(huey, count, cpu_ms=work.cpu_ms)
    worker = huey_worker(huey, max_delay=0.1)  # idle only at the very end; stop promptly
    ready.wait(60)
    while not finish.is_set():
        before = worker.task_count
        worker.loop()
        handled += worker.task_count - before
    huey.storage.close()
    results.put({"handled": handled, "locked": counter_log.locked, "other": counter_log.other})


if __name__ == "__main__":
    main()
