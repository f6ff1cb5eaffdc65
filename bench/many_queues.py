"""Many queues under one global cap, across worker processes (issue 21, DESIGN 8.6's case).

    python bench/many_queues.py                                  # the full matrix, SQLite
    python bench/many_queues.py --backend postgres               # the same on PostgreSQL
    python bench/many_queues.py --queues 1,1000 --procs 1,2 --repeat 3
    python bench/many_queues.py --arrival interleaved            # job i to queue i % Q

The case: `-n` jobs (20,000) whose handler awaits `--handler-ms` (5 ms), spread
round-robin over `Q` queues. One queue runs at concurrency 50; `Q` > 1 queues run at
concurrency 5 each under a global cap of 50 (one queue per knowledge base, "never more
than 50 running at once"). Either way at most 50 jobs run, so the ideal is
50 / 5 ms = 10,000 jobs/s, and `Q` > 1 should drain as fast as one queue.

Each case: the rows are written first (untimed), `P` worker processes ("spawn") start
paused, and once all are ready they are released together and the clock starts. The
clock stops at the first poll that finds nothing pending or running.

Reported per case (one JSON line each, then a markdown table):

* `rate` (jobs/s), `vs_1q` (the rate over one queue's at the same process count, in the
  same run) and `vs_1p` (over the same queue count at one process);
* `max_running` / `max_in_queue` as sampled from the table (`status = 'running'` rows,
  polled every `--sample-ms` by this process) and as seen by the handlers (each records
  its start and end on the system-wide monotonic clock; the overlap of those intervals,
  over every process, is an exact lower bound on what ran at once). Caps: 50 overall,
  5 per queue (50 for one queue);
* the spread of per-queue first starts, as fractions of the drain: `first_start_p50` and
  `first_start_max` (when the last queue to start first started; the target is < 0.1);
* in each run's line, `per_process` (the jobs each worker ran) and `cpu_per_process`
  (each worker's CPU seconds from its release until the drain was seen to end): what
  the processes that hold no slot cost the one that does; and the finalize flushes of
  all workers: `flushes`, `outcomes_per_flush`, `in_waves` (the share of outcomes
  written in flushes of 40 or more: the slots ended together, in waves) and
  `flush_ms_p50` (how long a flush held its loop). Each case's summary line carries the
  runs' `in_waves`, which tells the slower regime from the faster (docs/benchmarks.md,
  twenty-third round).

PostgreSQL: `--dsn`, else `$JOBLEDGER_BENCH_PG_DSN`, else `$JOBLEDGER_TEST_PG_DSN`, else
`postgresql://postgres@127.0.0.1:5432/test`; every case runs in a fresh schema, dropped
afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sqlite3
import statistics
import sys
import time
import uuid
from collections import defaultdict
from typing import Any
from urllib.parse import quote

from _common import NOOP, emit, fresh_dir, jl, machine, rate

GLOBAL_CAP = 50
QUEUE_CAP = 5  # of each queue when there are several
SQLITE_RUNNING = "SELECT queue, count(*) FROM jobs WHERE status = 'running' GROUP BY queue"
SQLITE_LEFT = (
    "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending' AND cancel_requested = 0) "
    "OR EXISTS (SELECT 1 FROM jobs WHERE status = 'running')"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--queues", default="1,100,1000,5000", help="comma-separated queue counts")
    p.add_argument("--procs", default="1,2,4", help="comma-separated worker process counts")
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--handler-ms", type=float, default=5.0)
    p.add_argument("--sample-ms", type=float, default=5.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--sync", default="NORMAL", choices=("NORMAL", "FULL"))
    p.add_argument("--dsn", default=None)
    p.add_argument("--timeout", type=float, default=600.0, help="give a case up after this")
    p.add_argument(
        "--arrival",
        choices=("grouped", "interleaved"),
        default="grouped",
        help="grouped: each queue's jobs enqueued together; interleaved: round-robin",
    )
    args = p.parse_args()
    queue_counts = sorted({1, *(int(x) for x in args.queues.split(","))})
    proc_counts = sorted({1, *(int(x) for x in args.procs.split(","))})
    records: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        # Interleaved: every case of one repeat before the next repeat.
        for procs in proc_counts:
            for queues in queue_counts:
                r = run_case(args, queues, procs)
                r["repeat"] = rep
                records.append(r)
                sys.stderr.write(
                    f"[{rep + 1}/{args.repeat}] {queues} queue(s), {procs} proc(s): "
                    f"{r['rate']} jobs/s\n"
                )
    summary = summarize(records, queue_counts, proc_counts)
    for s in summary:
        # One record name per case, so `run_all.py` can pick each one out.
        bench = f"many_queues_{s['queues']}q_{s['procs']}p"
        emit(bench, "jobledger", args.sync, backend=args.backend, **s)
    print()
    print(table(summary, args))


def run_case(args: argparse.Namespace, queues: int, procs: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    if args.backend == "sqlite":
        with fresh_dir() as d:
            target = os.path.join(d, "jobs.db")
            prefill(target, args.n, queues, args.arrival)
            result = drive(ctx, args, target, queues, procs, sqlite_sampler(target))
    else:
        dsn = args.dsn or default_dsn()
        schema = f"jlmq_{uuid.uuid4().hex[:10]}"
        target = with_schema(dsn, schema)
        try:
            prefill(target, args.n, queues, args.arrival)
            pg_analyze(dsn, schema)
            result = drive(ctx, args, target, queues, procs, pg_sampler(dsn, schema))
        finally:
            pg_drop(dsn, schema)
    record = {
        "backend": args.backend,
        "queues": queues,
        "procs": procs,
        "n": args.n,
        "handler_ms": args.handler_ms,
        "arrival": args.arrival,
        **result,
    }
    emit("many_queues", "jobledger", args.sync, **record)
    return record


def payloads_by_queue(n: int, queues: int) -> dict[int, int]:
    """How many of `n` jobs, dealt round-robin, each queue gets."""
    return {qi: len(range(qi, n, queues)) for qi in range(queues)}


def prefill(target: str, n: int, queues: int, arrival: str = "grouped") -> None:
    """`grouped`: each queue's jobs enqueued together, queue after queue, so a queue's
    rows are neighbours in the table and the heads of different queues are not.
    `interleaved`: job i goes to queue i % Q, enqueued in that order through the
    handler's `queue=lambda p: f"kb.{p['kb']}"` (the seeds' spelling), so the heads of
    neighbouring queues share pages."""
    producer = jl.JobManager(target, startup_delay=0)
    try:
        if arrival == "interleaved":

            @producer.handler(NOOP, recovery="retry", queue=lambda p: f"kb.{p['kb']}")
            async def unused(ctx: jl.JobContext[dict[str, Any]]) -> None:
                raise AssertionError("the producer never starts")

            for start in range(0, n, 1000):
                stop = min(n, start + 1000)
                producer.enqueue_many(NOOP, [{"kb": i % queues} for i in range(start, stop)])
            return
        for qi, count in payloads_by_queue(n, queues).items():
            for start in range(0, count, 1000):
                size = min(1000, count - start)
                producer.enqueue_many(NOOP, [{"kb": qi}] * size, queue=f"kb.{qi}")
    finally:
        asyncio.run(producer.stop())


def drive(
    ctx: Any, args: argparse.Namespace, target: str, queues: int, procs: int, sampler: Any
) -> dict[str, Any]:
    ready = ctx.Barrier(procs + 1)
    finish = ctx.Event()
    results = ctx.Queue()
    concurrency = GLOBAL_CAP if queues == 1 else QUEUE_CAP
    workers = [
        ctx.Process(
            target=worker,
            args=(target, args.sync, concurrency, args.handler_ms, ready, finish, results),
        )
        for _ in range(procs)
    ]
    for w in workers:
        w.start()
    max_total = 0
    max_queue = 0
    try:
        ready.wait(120)
        started = time.monotonic()
        seconds = None
        step = args.sample_ms / 1000
        while True:
            now = time.monotonic()
            running, left = sampler()
            if running:
                max_total = max(max_total, sum(running.values()))
                max_queue = max(max_queue, max(running.values()))
            if not left:
                seconds = now - started
                break
            if now - started > args.timeout:
                break
            time.sleep(step)
    finally:
        finish.set()
        spans: list[tuple[int, float, float]] = []
        handled: list[int] = []
        cpu: list[float] = []
        flushes: list[tuple[int, float]] = []
        for _ in workers:
            got = results.get(timeout=120)
            spans.extend(got["spans"])
            handled.append(len(got["spans"]))
            cpu.append(round(got["cpu"], 3))
            flushes.extend(got["flushes"])
        for w in workers:
            w.join(60)
    timed_out = seconds is None
    if seconds is None:
        # Given up: the rate is what the handlers did in the time allowed.
        seconds = args.timeout
        sys.stderr.write(f"!! {queues} queues x {procs} procs: not drained in {seconds}s\n")
    done = len(spans) if timed_out else args.n
    return {
        "seconds": round(seconds, 4),
        "rate": rate(done, seconds),
        "timed_out": timed_out,
        "per_process": handled,
        "cpu_per_process": cpu,
        **flush_view(flushes),
        "max_running_table": max_total,
        "max_in_queue_table": max_queue,
        **handler_view(spans, started, seconds),
    }


def flush_view(flushes: list[tuple[int, float]]) -> dict[str, Any]:
    """The finalize flushes of every worker: how many, their outcomes (mean, and the
    share written in flushes of 40 or more: waves), and the median time one held the
    loop."""
    if not flushes:
        return {"flushes": 0}
    outcomes = sum(size for size, _ in flushes)
    return {
        "flushes": len(flushes),
        "outcomes_per_flush": round(outcomes / len(flushes), 1),
        "in_waves": round(sum(size for size, _ in flushes if size >= 40) / outcomes, 3),
        "flush_ms_p50": round(statistics.median(t for _, t in flushes) * 1000, 2),
    }


def handler_view(
    spans: list[tuple[int, float, float]], started: float, seconds: float
) -> dict[str, Any]:
    """What the handlers saw: the most that overlapped (overall, in one queue) and when
    each queue first started, as a fraction of the drain."""
    events: list[tuple[float, int, int]] = []
    first: dict[int, float] = {}
    for qi, start, end in spans:
        events.append((start, 1, qi))
        events.append((end, -1, qi))
        if qi not in first or start < first[qi]:
            first[qi] = start
    events.sort(key=lambda e: (e[0], e[1]))  # at one instant an end goes first
    total = best = best_q = 0
    per: dict[int, int] = defaultdict(int)
    for _, delta, qi in events:
        total += delta
        per[qi] += delta
        best = max(best, total)
        best_q = max(best_q, per[qi])
    fracs = sorted((t - started) / seconds for t in first.values())
    return {
        "handled": len(spans),
        "max_running_handlers": best,
        "max_in_queue_handlers": best_q,
        "first_start_p50": round(statistics.median(fracs), 4) if fracs else None,
        "first_start_max": round(fracs[-1], 4) if fracs else None,
    }


def worker(
    target: str,
    sync: str,
    concurrency: int,
    handler_ms: float,
    ready: Any,
    finish: Any,
    results: Any,
) -> None:
    spans: list[tuple[int, float, float]] = []
    options: dict[str, Any] = {"synchronous": sync} if "://" not in target else {}
    jobs = jl.JobManager(target, startup_delay=0, global_max_concurrency=GLOBAL_CAP, **options)
    pause = handler_ms / 1000

    @jobs.handler(NOOP, recovery="retry", concurrency=concurrency)
    async def handle(ctx: jl.JobContext[dict[str, Any]]) -> None:
        start = time.monotonic()
        await asyncio.sleep(pause)
        spans.append((int(ctx.payload["kb"]), start, time.monotonic()))

    # Each finalize flush's outcomes and its time on the loop (the engine's private
    # `_flush`, wrapped on this instance): whether a run settled into waves (every slot
    # ending together, one flush of 50) or staggered groups shows in its line.
    engine = jobs._engine
    plain_flush = engine._flush
    flushes: list[tuple[int, float]] = []

    def flush() -> None:
        size, began = len(engine._buffer), time.perf_counter()
        plain_flush()
        written = size - len(engine._buffer)  # outcomes a failed write kept stay queued
        if written:
            flushes.append((written, time.perf_counter() - began))

    engine._flush = flush  # type: ignore[method-assign]

    async def run() -> None:
        hold = jobs.pause("bench: until every worker is ready")
        await jobs.start()
        ready.wait(120)
        hold.dispose()
        cpu[0] = time.process_time()
        while not finish.is_set():
            await asyncio.sleep(0.01)
        cpu[0] = time.process_time() - cpu[0]
        await jobs.stop()

    cpu = [0.0]
    asyncio.run(run())
    results.put({"spans": spans, "cpu": cpu[0], "flushes": flushes})


# -- sampling the table ---------------------------------------------------------------


def sqlite_sampler(path: str) -> Any:
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5)

    def sample() -> tuple[dict[str, int], bool]:
        # One read transaction: the running rows and what is left, from one snapshot.
        conn.execute("BEGIN")
        try:
            running = dict(conn.execute(SQLITE_RUNNING).fetchall())
            left = bool(conn.execute(SQLITE_LEFT).fetchone()[0])
        finally:
            conn.execute("COMMIT")
        return running, left

    return sample


def default_dsn() -> str:
    return (
        os.environ.get("JOBLEDGER_BENCH_PG_DSN")
        or os.environ.get("JOBLEDGER_TEST_PG_DSN")
        or "postgresql://postgres@127.0.0.1:5432/test"
    )


def with_schema(dsn: str, schema: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + f"schema={schema}"


def pg_sampler(dsn: str, schema: str) -> Any:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET enable_seqscan = off")  # see below
    # One statement, so one snapshot under READ COMMITTED and one round trip a sample:
    # the sampler shares the cores with the workers and the server it measures. The
    # last row (queue NULL) says whether anything is left. Both parts read a partial
    # index (`jobs_running_idx`, and `jobs_claim_idx` for the pending rows, as
    # SQLITE_LEFT). The statistics of the prefill say every row is pending, so the
    # planner looked for one by scanning the table from its first page, past every row
    # finished since: ~1.5-1.9 ms a sample by the end of a drain, as much server time
    # over a run as the workers' claims. Hence no sequential scans on this connection.
    sql = (
        f"SELECT queue, count(*) FROM \"{schema}\".jobs WHERE status = 'running' "
        "GROUP BY queue UNION ALL "
        f"SELECT NULL, (EXISTS (SELECT 1 FROM \"{schema}\".jobs WHERE status = 'pending' "
        "AND cancel_requested = 0) "
        f"OR EXISTS (SELECT 1 FROM \"{schema}\".jobs WHERE status = 'running'))::int"
    )

    def sample() -> tuple[dict[str, int], bool]:
        rows = conn.execute(sql).fetchall()
        running = {str(q): int(c) for q, c in rows if q is not None}
        left = any(q is None and c for q, c in rows)
        return running, left

    return sample


def pg_analyze(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".jobs')


def pg_drop(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- the summary ----------------------------------------------------------------------


def summarize(
    records: list[dict[str, Any]], queue_counts: list[int], proc_counts: list[int]
) -> list[dict[str, Any]]:
    """Medians per (procs, queues), with the ratios taken repeat by repeat (each against
    the one-queue / one-process case of the same repeat) and then their median."""
    by: dict[tuple[int, int, int], dict[str, Any]] = {
        (r["repeat"], r["procs"], r["queues"]): r for r in records
    }
    out: list[dict[str, Any]] = []
    for procs in proc_counts:
        for queues in queue_counts:
            mine = [r for (_, p, q), r in by.items() if (p, q) == (procs, queues)]
            if not mine:
                continue
            vs_1q = [
                r["rate"] / by[(r["repeat"], procs, 1)]["rate"]
                for r in mine
                if (r["repeat"], procs, 1) in by
            ]
            vs_1p = [
                r["rate"] / by[(r["repeat"], 1, queues)]["rate"]
                for r in mine
                if (r["repeat"], 1, queues) in by
            ]
            out.append(
                {
                    "queues": queues,
                    "procs": procs,
                    "runs": len(mine),
                    "rate": statistics.median(r["rate"] for r in mine),
                    "rate_min": min(r["rate"] for r in mine),
                    "rate_max": max(r["rate"] for r in mine),
                    "vs_1q": round(statistics.median(vs_1q), 3) if vs_1q else None,
                    "vs_1p": round(statistics.median(vs_1p), 3) if vs_1p else None,
                    "max_running_table": max(r["max_running_table"] for r in mine),
                    "max_in_queue_table": max(r["max_in_queue_table"] for r in mine),
                    "max_running_handlers": max(r["max_running_handlers"] for r in mine),
                    "max_in_queue_handlers": max(r["max_in_queue_handlers"] for r in mine),
                    "first_start_p50": _median(r["first_start_p50"] for r in mine),
                    "first_start_max": max(r["first_start_max"] or 0 for r in mine),
                    "in_waves": [r.get("in_waves") for r in mine],
                }
            )
    return out


def _median(values: Any) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 4) if got else None


def table(summary: list[dict[str, Any]], args: argparse.Namespace) -> str:
    info = machine()
    lines = [
        f"many queues, {args.backend}, {args.n:,} jobs of {args.handler_ms:g} ms, global cap "
        f"{GLOBAL_CAP} (1 queue: c={GLOBAL_CAP}; else c={QUEUE_CAP} each), "
        f"{info['nproc']} CPUs, repeat={args.repeat}, arrival {args.arrival}",
        "",
        "| queues | procs | jobs/s | vs 1 queue | vs 1 proc | max running (table / handlers) "
        "| max in a queue (table / handlers) | first start p50 / last |",
        "|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for s in summary:
        spread = ""
        if s["runs"] > 1:
            spread = f" [{s['rate_min']:,.0f}-{s['rate_max']:,.0f}]"
        lines.append(
            f"| {s['queues']:,} | {s['procs']} | {s['rate']:,.0f}{spread} | "
            f"{_ratio(s['vs_1q'])} | {_ratio(s['vs_1p'])} | "
            f"{s['max_running_table']} / {s['max_running_handlers']} | "
            f"{s['max_in_queue_table']} / {s['max_in_queue_handlers']} | "
            f"{_pct(s['first_start_p50'])} / {_pct(s['first_start_max'])} |"
        )
    return "\n".join(lines)


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * max(x, 0.0):.0f}%"


if __name__ == "__main__":
    main()
