"""Flow control's cost and accuracy (issue 22, DESIGN 8.7): rate limits counted in SQL.

    python bench/flow.py                          # every case, SQLite NORMAL
    python bench/flow.py --only base,rate_high --repeat 3
    python bench/flow.py --only binding --seconds 30

Cases, one worker process each, `-n` pending no-op jobs written before the clock starts
(their write is not timed), concurrency 50, global cap 50:

* `base`: no rate limit (the plain drain).
* `rate_high`: a handler rate limit far above what is achieved (10,000,000 per second):
  every claim counts the window and logs its starts. Target: >= 0.9 of `base`.
* `keyed`: the same limit per key, over `--keys` keys (1,000), the payload's `k`; the
  rows carry their key, written by a producer with the handler registered. Target:
  >= 0.8 of `rate_high` (the unkeyed limit) and of `base`.
* `keyed_mid`: a keyed limit of `--key-limit` (100) per key per second, over `--keys`
  keys: far above what any one key achieves (about 20 per second each at 20,000 jobs/s
  over 1,000 keys) but below the queue's total, so every claim reads its keys' windows
  (the realistic keyed case: many tenants, each well under its own limit). Target: as
  `keyed`.
* `binding`: a limit of `--limit` starts per second (500) that binds, over `--seconds`
  (30): the achieved rate, from the rows' start times inside the measured span, over
  the limit. Target: within 2%. Its rows are enough for the span and more.

Each prints one JSON line; a table with the ratios follows. `--repeat R` interleaves the
cases R times and reports medians (the machine is noisy; compare within one run).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from _common import Counter, emit, fresh_dir, jl, machine, rate, settle, wait_completed

KEYED = jl.JobType("bench.keyed", dict)
RATED = jl.JobType("bench.rated", dict)
HIGH = 10_000_000


def _manager(
    path: str, sync: str, case: str, counter: Counter | None, limit: int, key_limit: int = 100
) -> Any:
    jobs = jl.JobManager(
        path, startup_delay=0, synchronous=sync, global_max_concurrency=50, poll_interval=0.05
    )
    hit = counter.hit if counter is not None else None
    rate_limit: jl.RateLimit | None
    if case == "base":
        rate_limit = None
    elif case == "keyed":
        rate_limit = jl.RateLimit(HIGH, 1, key=lambda p: p["k"])
    elif case == "keyed_mid":
        rate_limit = jl.RateLimit(key_limit, 1, key=lambda p: p["k"])
    elif case == "binding":
        rate_limit = jl.RateLimit(limit, 1)
    else:
        rate_limit = jl.RateLimit(HIGH, 1)
    job_type = KEYED if case.startswith("keyed") else RATED

    @jobs.handler(job_type, recovery="retry", concurrency=50, rate_limit=rate_limit)
    async def noop(ctx: jl.JobContext[dict[str, Any]]) -> None:
        if hit is not None:
            hit()

    return jobs, job_type


def _prefill(path: str, case: str, n: int, keys: int, limit: int) -> None:
    producer, job_type = _manager(path, "OFF", case, None, limit)
    try:
        for start in range(0, n, 1000):
            size = min(1000, n - start)
            payloads = [{"k": str((start + i) % keys)} for i in range(size)]
            producer.enqueue_many(job_type, payloads)
    finally:
        producer._store.close()
    settle(path)


async def _drain(
    path: str, sync: str, case: str, n: int, limit: int, key_limit: int = 100
) -> float:
    counter = Counter()
    jobs, _ = _manager(path, sync, case, counter, limit, key_limit)
    t0 = time.perf_counter()
    await jobs.start()
    await wait_completed(jobs, counter, n)
    seconds = time.perf_counter() - t0
    await jobs.stop()
    return seconds


async def _binding(path: str, sync: str, limit: int, seconds: float) -> dict[str, Any]:
    jobs, _ = _manager(path, sync, "binding", None, limit)
    await jobs.start()
    await asyncio.sleep(seconds + 1.5)
    await jobs.stop()
    rows = jobs._store.read(
        lambda c: c.execute(
            "SELECT started_at FROM jobs WHERE started_at IS NOT NULL ORDER BY started_at"
        ).fetchall()
    )
    starts = [int(r[0]) for r in rows]
    # The span: from one second after the first start (the first window's burst is the
    # limit, by design) for `seconds`.
    lo = starts[0] + 1000
    hi = lo + int(seconds * 1000)
    inside = sum(1 for s in starts if lo <= s < hi)
    # The most in any sliding window of one second, over every start.
    worst, j = 0, 0
    for i, s in enumerate(starts):
        while starts[j] <= s - 1000:
            j += 1
        worst = max(worst, i - j + 1)
    return {
        "achieved": round(inside / seconds, 1),
        "vs_limit": round(inside / seconds / limit, 4),
        "max_in_any_window": worst,
        "started": len(starts),
    }


def main() -> None:
    p = __import__("argparse").ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sync", choices=("NORMAL", "FULL"), default="NORMAL")
    p.add_argument("-n", type=int, default=40_000)
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--key-limit", type=int, default=100)
    p.add_argument("--only", default="base,rate_high,keyed,keyed_mid,binding")
    args = p.parse_args()
    cases = [c for c in args.only.split(",") if c]
    unknown = set(cases) - {"base", "rate_high", "keyed", "keyed_mid", "binding"}
    if unknown:
        sys.exit(f"unknown cases: {sorted(unknown)}")
    emit("flow_machine", "jobledger", args.sync, **machine())
    rates: dict[str, list[float]] = {c: [] for c in cases if c != "binding"}
    for _ in range(args.repeat):
        for case in rates:
            with fresh_dir() as d:
                path = f"{d}/flow.db"
                _prefill(path, case, args.n, args.keys, args.limit)
                seconds = asyncio.run(
                    _drain(path, args.sync, case, args.n, args.limit, args.key_limit)
                )
            r = rate(args.n, seconds)
            rates[case].append(r)
            emit(
                f"flow_{case}", "jobledger", args.sync, n=args.n, seconds=round(seconds, 4), rate=r
            )
    binding: dict[str, Any] | None = None
    if "binding" in cases:
        with fresh_dir() as d:
            path = f"{d}/flow.db"
            need = int(args.limit * (args.seconds + 3))
            _prefill(path, "binding", need, 1, args.limit)
            binding = asyncio.run(_binding(path, args.sync, args.limit, args.seconds))
        emit("flow_binding", "jobledger", args.sync, limit=args.limit, **binding)
    med = {c: statistics.median(v) for c, v in rates.items() if v}
    print()
    head = f"| case ({args.sync}, n={args.n}) | jobs/s (median of {args.repeat})"
    print(f"{head} | vs base | vs rate_high |")
    print("|---|---:|---:|---:|")
    for case, r in med.items():
        vs_base = f"{r / med['base']:.2f}" if "base" in med else "-"
        vs_high = f"{r / med['rate_high']:.2f}" if "rate_high" in med else "-"
        print(f"| {case} | {r:,.0f} | {vs_base} | {vs_high} |")
    if binding is not None:
        print(
            f"| binding {args.limit}/s over {args.seconds:g} s | {binding['achieved']:,.1f} "
            f"| {binding['vs_limit']:.4f} of the limit "
            f"| max {binding['max_in_any_window']} in any 1 s |"
        )


if __name__ == "__main__":
    main()
