"""What `ctx.transaction()` costs (DESIGN 8.13): a drain of `-n` prefilled jobs whose
handler completes through one transaction with one INSERT, against the same drain of
a plain handler that returns (the batched finalize).

    cd bench && PYTHONPATH=../src ../.venv/bin/python exactly_once.py --repeat 5

One worker process, one queue of concurrency 50 under a global cap of 50, async
handlers, SQLite `NORMAL` (or `--backend postgres`); rows written before the clock
starts; the clock runs from `start()` until `n` jobs are `completed`. The cases
alternate `--repeat` times; the summary is the median of `tx / plain` time per pair
(the target is <= 1.3), and the same for the process's CPU time (`time.process_time()`,
which a core shared with other work does not inflate).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

# `jl` from `_common`, which puts this checkout's src first on sys.path: imported
# directly, jobledger came from wherever the interpreter installed it.
from _common import (
    Counter,
    Stopwatch,
    base_parser,
    emit,
    fresh_dir,
    jl,
    prefill,
    rate,
    wait_completed,
)

NOOP = jl.JobType("bench.noop", dict)


async def _drain(
    path: str, sync: str, n: int, tx: bool, form: str = "async"
) -> tuple[float, float]:
    prefill(path, n)
    jobs = jl.JobManager(path, startup_delay=0, synchronous=sync,  # type: ignore[arg-type]
                         global_max_concurrency=50)  # fmt: skip
    with jobs.write_tx() as t:
        t.execute("CREATE TABLE IF NOT EXISTS ledger (job_id TEXT PRIMARY KEY, n INT)")
    counter = Counter()
    insert = "INSERT INTO ledger (job_id, n) VALUES (?, ?)"

    @jobs.handler(NOOP, recovery="retry", concurrency=50)
    async def handler(ctx: jl.JobContext[dict[str, Any]]) -> None:
        if tx and form == "async":  # the group commit (SQLite)
            async with ctx.transaction() as t:
                t.execute(insert, (ctx.job_id, 1))
        elif tx:  # one commit per block
            with ctx.transaction() as t:
                t.execute(insert, (ctx.job_id, 1))
        counter.hit()

    watch = Stopwatch()
    cpu = time.process_time()  # this process, all its threads: not inflated by a busy machine
    await jobs.start()
    await wait_completed(jobs, counter, n)
    seconds = watch.elapsed()
    cpu = time.process_time() - cpu
    await jobs.stop()
    return seconds, cpu


def main() -> None:
    p = base_parser(__doc__ or "", systems=("jobledger",))
    p.add_argument("-n", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--form",
        choices=("async", "sync"),
        default="async",
        help="`async with ctx.transaction()` (group commit) or `with` (a commit per block)",
    )
    args = p.parse_args()
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    for _ in range(args.repeat):
        took: dict[bool, float] = {}
        cpu: dict[bool, float] = {}
        for tx in (False, True):
            with fresh_dir() as d:
                path = os.path.join(d, "jobs.db")
                took[tx], cpu[tx] = asyncio.run(_drain(path, args.sync, args.n, tx, args.form))
            emit("exactly_once", f"jobledger/tx-{args.form}" if tx else "jobledger/plain",
                 args.sync, n=args.n, seconds=round(took[tx], 4), cpu=round(cpu[tx], 4),
                 rate=rate(args.n, took[tx]))  # fmt: skip
        ratios.append(took[True] / took[False])
        cpu_ratios.append(cpu[True] / cpu[False])
    med = statistics.median(ratios)
    cpu_med = statistics.median(cpu_ratios)
    emit("exactly_once_summary", "jobledger", args.sync, tx_over_plain=round(med, 3),
         ratios=[round(r, 3) for r in ratios], cpu_tx_over_plain=round(cpu_med, 3),
         cpu_ratios=[round(r, 3) for r in cpu_ratios])  # fmt: skip
    print(f"ctx.transaction() drain time / plain drain time: {med:.2f} (target <= 1.3)")
    print(f"ctx.transaction() drain CPU time / plain drain CPU time: {cpu_med:.2f}")


if __name__ == "__main__":
    main()
