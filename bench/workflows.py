"""Workflows (issue 23, DESIGN 8.8): what a graph costs over plain jobs, and the join.

    python bench/workflows.py                       # every case, SQLite NORMAL, once
    python bench/workflows.py --repeat 5            # interleaved 5 times; medians
    python bench/workflows.py --backend postgres    # the same in a fresh PostgreSQL schema
    python bench/workflows.py --only chains,plain --chains 1000

One worker process, the no-op async handler of `_common.make_manager` (concurrency 50,
global cap 50) for every job; the rows are written before the clock starts, and the
clock runs from `start()` until the table holds every job `completed` (committed).

* `plain`: 2 x `--chains` (2,000) plain jobs (`enqueue_many`).
* `chains`: `--chains` (1,000) workflows of two steps, a -> b: the same 2,000 jobs, half
  of them `waiting` until their `a` completes and releases them (the trigger, in the
  finalize's transaction). Reported as jobs/s and as the ratio to `plain` of the same
  repeat (target >= 0.7); the table gives the median of those ratios.
* `fanout`: one workflow of `--width` (10,000) jobs in one `add_many` step and a join
  after it. `build_s` is the builder's `add_many` + `add`, `enqueue_s` the `enqueue()`
  call (the graph's check and its one transaction: 10,001 jobs and 10,000 edges);
  `seconds` (the drain) runs from `start()` until the join completed.

  The join's **release time** (`release_ms`) is the wall time of the finalize write that
  ended the last fan-out job: the engine's `store.finalize` / `finalize_and_claim` call,
  timed around the call, so it is the transaction from BEGIN to COMMIT plus any wait for
  the process's writer lock (PostgreSQL's `finalize_and_claim` runs `finalize`'s
  transaction and then the claim's; there only the first is timed). The call is the one
  whose outcomes bring the count of finalized fan-out jobs to `--width`. The release
  runs in that transaction (the trigger of the UPDATE that ends a workflow job), so
  this is the transaction in which it happens, with the other outcomes of its batch
  (`release_batch` of them) and, for SQLite's `finalize_and_claim`, the claim that rides
  along. `batch_ms_median` is the median of every other fan-out finalize, for
  comparison: each of those runs the trigger too (it takes its jobs off the join's
  `upstream_left`), so the release proper is about `release_ms - batch_ms_median`.
  `join_start_ms` runs from the return of that call to the join's handler starting (the
  manager's look at the workflow, the kick and the claim). Comparing the join's
  `updated_at` with the last upstream's `finished_at` would measure nothing: the
  trigger stamps the join with the upstream row's own `updated_at`.

Each case prints one JSON line; a table with medians [min-max] follows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import NOOP, Counter, emit, fresh_dir, jl, machine, make_manager, rate, settle

CASES = ("plain", "chains", "fanout")


@contextmanager
def target(backend: str, dsn: str | None) -> Iterator[str]:
    """A fresh database: a SQLite file in a fresh directory, or a fresh schema."""
    if backend == "sqlite":
        with fresh_dir() as d:
            yield os.path.join(d, "jobs.db")
        return
    from many_queues import default_dsn, pg_drop, with_schema

    base = dsn or default_dsn()
    schema = f"jlwf_{uuid.uuid4().hex[:10]}"
    try:
        yield with_schema(base, schema)
    finally:
        pg_drop(base, schema)


def prepared(path: str, backend: str, dsn: str | None) -> None:
    """After the rows are written and before the clock: the file on disk (see
    `_common.settle`), or fresh planner statistics for the schema."""
    if backend == "sqlite":
        settle(path)
        return
    from many_queues import default_dsn, pg_analyze

    schema = path.rsplit("schema=", 1)[1]
    pg_analyze(dsn or default_dsn(), schema)


def producer(path: str, sync: str) -> jl.JobManager:
    return jl.JobManager(path, startup_delay=0, synchronous=sync)  # type: ignore[arg-type]


def close(jobs: jl.JobManager) -> None:
    jobs._store.close()


async def wait_done(jobs: jl.JobManager, counter: Counter, n: int) -> None:
    """Until `n` rows are `completed` (committed): the handler count first, then the
    table (as `_common.wait_completed`, through the public count, which both backends
    answer; these tables are small)."""
    await counter.wait_for(n)
    while jobs.count(status="completed") < n:
        await asyncio.sleep(0.001)


async def drain(path: str, sync: str, n: int) -> float:
    counter = Counter()
    jobs = make_manager(path, sync, counter=counter)
    t0 = time.perf_counter()
    await jobs.start()
    await wait_done(jobs, counter, n)
    seconds = time.perf_counter() - t0
    await jobs.stop()
    return seconds


def run_plain(args: argparse.Namespace) -> dict[str, Any]:
    n = 2 * args.chains
    with target(args.backend, args.dsn) as path:
        jobs = producer(path, "OFF" if args.backend == "sqlite" else args.sync)
        try:
            for start in range(0, n, 1000):
                jobs.enqueue_many(NOOP, [{}] * min(1000, n - start))
        finally:
            close(jobs)
        prepared(path, args.backend, args.dsn)
        seconds = asyncio.run(drain(path, args.sync, n))
    return {"n": n, "seconds": round(seconds, 4), "rate": rate(n, seconds)}


def run_chains(args: argparse.Namespace) -> dict[str, Any]:
    n = 2 * args.chains
    with target(args.backend, args.dsn) as path:
        jobs = producer(path, "OFF" if args.backend == "sqlite" else args.sync)
        try:
            for i in range(args.chains):
                wf = jobs.workflow(f"chain{i}")
                a = wf.add(NOOP, {}, name="a")
                wf.add(NOOP, {}, name="b", after=[a])
                wf.enqueue()
        finally:
            close(jobs)
        prepared(path, args.backend, args.dsn)
        seconds = asyncio.run(drain(path, args.sync, n))
    return {"n": n, "seconds": round(seconds, 4), "rate": rate(n, seconds)}


def timed_finalize(
    jobs: jl.JobManager, fan: set[str], log: list[tuple[float, int, int]], released: list[float]
) -> None:
    """Wrap the store's two finalize writes: (seconds, fan-out outcomes, fan-out jobs
    finalized so far) per call that ended fan-out jobs; `released` gets the clock at
    the return of the call that ended the last of them."""
    store: Any = jobs._store
    done = 0
    # One flag per call in progress: whether a call inside it was timed. PostgreSQL's
    # `finalize_and_claim` is two transactions, `finalize`'s and then the claim's; there
    # the inner `finalize` is the transaction, and the outer call is not counted again.
    nested: list[bool] = []

    def wrap(name: str) -> None:
        real: Callable[..., Any] = getattr(store, name)

        def timed(outcomes: Any, *rest: Any, **kw: Any) -> Any:
            nonlocal done
            nested.append(False)
            t = time.perf_counter()
            try:
                out = real(outcomes, *rest, **kw)
            finally:
                took = time.perf_counter() - t
                inner = nested.pop()
            if inner:
                return out
            if nested:
                nested[-1] = True
            ours = sum(1 for o in outcomes if o.job_id in fan)
            if ours:
                done += ours
                log.append((took, ours, done))
                if done == len(fan):
                    released.append(time.perf_counter())
            return out

        setattr(store, name, timed)

    wrap("finalize")
    wrap("finalize_and_claim")


def run_fanout(args: argparse.Namespace) -> dict[str, Any]:
    width = args.width
    with target(args.backend, args.dsn) as path:
        counter = Counter()
        jobs = make_manager(path, args.sync, counter=counter)
        joined: list[float] = []
        join_type = jl.JobType("bench.join", dict)

        @jobs.handler(join_type, recovery="retry")
        async def join(ctx: jl.JobContext[dict[str, Any]]) -> int:
            joined.append(time.perf_counter())
            counter.hit()
            return len(ctx.upstream["fan"])

        t0 = time.perf_counter()
        wf = jobs.workflow("fanout")
        fan_step = wf.add_many(NOOP, [{}] * width, name="fan")
        wf.add(join_type, {}, name="join", after=[fan_step])
        t1 = time.perf_counter()
        handle = wf.enqueue()
        t2 = time.perf_counter()
        prepared(path, args.backend, args.dsn)
        fan = {h.id for h in handle.jobs["fan"]}
        log: list[tuple[float, int, int]] = []
        released: list[float] = []
        timed_finalize(jobs, fan, log, released)

        async def main() -> float:
            t = time.perf_counter()
            await jobs.start()
            await wait_done(jobs, counter, width + 1)
            seconds = time.perf_counter() - t
            snap = jobs.get(handle.jobs["join"][0].id)
            assert snap is not None
            assert snap.output == width, snap
            await jobs.stop()
            return seconds

        seconds = asyncio.run(main())
    last = next(e for e in log if e[2] == width)
    others = [e[0] for e in log if e is not last]
    return {
        "width": width,
        "build_s": round(t1 - t0, 4),
        "enqueue_s": round(t2 - t1, 4),
        "enqueue_rate": rate(width + 1, t2 - t1),
        "seconds": round(seconds, 4),
        "rate": rate(width + 1, seconds),
        "release_ms": round(last[0] * 1000, 3),
        "release_batch": last[1],
        "batch_ms_median": round(statistics.median(others) * 1000, 3) if others else None,
        "batches": len(log),
        "join_start_ms": round((joined[0] - released[0]) * 1000, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--dsn", default=None, help="PostgreSQL (default: many_queues.default_dsn)")
    p.add_argument("--sync", choices=("NORMAL", "FULL"), default="NORMAL")
    p.add_argument("--chains", type=int, default=1_000)
    p.add_argument("--width", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--only", default=",".join(CASES))
    args = p.parse_args()
    cases = [c for c in args.only.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        sys.exit(f"unknown cases: {sorted(unknown)}")
    emit("workflows_machine", "jobledger", args.sync, backend=args.backend, **machine())
    runners = {"plain": run_plain, "chains": run_chains, "fanout": run_fanout}
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    ratios: list[float] = []
    for rep in range(args.repeat):
        for case in cases:
            r = runners[case](args)
            results[case].append(r)
            emit(f"workflows_{case}", "jobledger", args.sync, backend=args.backend,
                 repeat=rep, **r)  # fmt: skip
        if "plain" in cases and "chains" in cases:
            ratios.append(results["chains"][-1]["rate"] / results["plain"][-1]["rate"])
    summary: dict[str, Any] = {"repeat": args.repeat, "backend": args.backend}
    if ratios:
        summary["chains_vs_plain"] = round(statistics.median(ratios), 3)
        summary["chains_vs_plain_all"] = [round(x, 3) for x in ratios]
    emit("workflows_summary", "jobledger", args.sync, **summary)
    print()
    print(table(args, results, ratios))


def spread(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    text = format(med, fmt)
    if len(values) > 1:
        text += f" [{format(min(values), fmt)}-{format(max(values), fmt)}]"
    return text


def table(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]],
          ratios: list[float]) -> str:  # fmt: skip
    head = f"workflows, {args.backend}, sync {args.sync}, median [min-max] of {args.repeat}"
    lines = [head, "", "| case | figure | value |", "|---|---|---:|"]
    for case in ("plain", "chains"):
        if results.get(case):
            n = results[case][0]["n"]
            rates = [r["rate"] for r in results[case]]
            label = f"{n:,} plain jobs" if case == "plain" else f"{n // 2:,} chains a->b"
            lines.append(f"| {label} | drain, jobs/s | {spread(rates, ',.0f')} |")
    if ratios:
        lines.append(f"| chains vs plain | ratio, per repeat | {spread(ratios, '.2f')} |")
    if results.get("fanout"):
        rs = results["fanout"]
        w = rs[0]["width"]

        def row(label: str, key: str, fmt: str) -> str:
            values = [float(r[key]) for r in rs if r[key] is not None]
            return f"| fan-out {w:,} + join | {label} | {spread(values, fmt)} |"

        lines += [
            row("build (add_many + add), s", "build_s", ".3f"),
            row("enqueue(), s", "enqueue_s", ".3f"),
            row("drain to the join's end, s", "seconds", ".3f"),
            row("drain, jobs/s", "rate", ",.0f"),
            row("release: the last fan-out finalize, ms", "release_ms", ".2f"),
            row("  other fan-out finalizes (median), ms", "batch_ms_median", ".2f"),
            row("  its batch, jobs", "release_batch", ".0f"),
            row("release -> join's handler starts, ms", "join_start_ms", ".2f"),
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
