"""CPU-bound jobs (issue 26): jobledger's process executor against huey's process consumer.

    python bench/cpu.py                      # 2,000 jobs of 2 ms CPU, each system once
    python bench/cpu.py --repeat 5           # interleaved rounds, medians and the ratio
    python bench/cpu.py --quick              # 200 jobs: to see that it runs

Both sides: `n` jobs that each compute for `--cpu-ms` ms (`_common.burn`, a busy loop)
are written first (untimed), on a SQLite WAL file at synchronous=NORMAL. The clock runs
from the worker's start (its children spawned inside the clock on both sides) until
every job has run.

* jobledger: ONE worker process, a `JobManager` with the handler registered with
  `executor="process"` (a module-level `def`, `cpu_job` below), concurrency 50, global
  cap 50, `process_pool_size=--workers`; done when the table holds n `completed` rows
  (polled every 5 ms).
* huey: `SqliteHuey` (`_common.make_huey`, same synchronous), its consumer with
  `workers=--workers, worker_type="process"` (forked worker processes, huey's own
  process mode), results off; done when its queue is empty and a graceful
  `consumer.stop()` (which waits for the tasks in hand) has returned.

Every measurement runs in a fresh interpreter (`--one`), the systems alternate within
a round, in a rotated order from one round to the next. Output: one JSON line per
measurement, then a summary line (medians and jobledger/huey).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import (  # noqa: E402
    COUNT_COMPLETED,
    NOOP,
    burn,
    fresh_dir,
    jl,
    machine,
    make_huey,
    prefill,
    rate,
)

SYSTEMS = ("jobledger", "huey")
CPU_MS = float(os.environ.get("JL_BENCH_CPU_MS", "2"))  # read again in the children


def cpu_job(ctx: jl.JobContext[dict[str, Any]]) -> None:
    """The process handler: a child imports it by name from this module."""
    burn(CPU_MS)


def run_jobledger(n: int, workers: int) -> dict[str, Any]:
    async def go(path: str) -> float:
        jobs = jl.JobManager(
            path,
            startup_delay=0,
            synchronous="NORMAL",
            global_max_concurrency=50,
            process_pool_size=workers,
        )
        jobs.handler(NOOP, recovery="retry", concurrency=50, executor="process")(cpu_job)
        started = time.perf_counter()
        await jobs.start()
        while jobs._store.read(lambda c: c.execute(COUNT_COMPLETED).fetchone()[0]) < n:
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        await jobs.stop()
        return elapsed

    with fresh_dir() as d:
        path = os.path.join(d, "jobs.db")
        prefill(path, n)
        seconds = asyncio.run(go(path))
    return {"seconds": round(seconds, 3), "rate": rate(n, seconds)}


def run_huey(n: int, workers: int) -> dict[str, Any]:
    with fresh_dir() as d:
        huey = make_huey(os.path.join(d, "huey.db"), "NORMAL")
        huey.results = False  # nothing is read back; jobledger stores a null output

        @huey.task(name="cpu")  # type: ignore[misc]
        def cpu_task() -> None:
            burn(CPU_MS)

        huey.storage.conn.execute("BEGIN")
        data = [(huey.name, huey.serialize_task(cpu_task.s()), 0) for _ in range(n)]
        huey.storage.conn.executemany(
            "INSERT INTO task (queue, data, priority) VALUES (?, ?, ?)", data
        )
        huey.storage.conn.execute("COMMIT")
        consumer = huey.create_consumer(workers=workers, worker_type="process")
        started = time.perf_counter()
        consumer.start()
        while huey.pending_count() > 0:
            time.sleep(0.005)
        consumer.stop(graceful=True)
        seconds = time.perf_counter() - started
        huey.storage.close()
    return {"seconds": round(seconds, 3), "rate": rate(n, seconds)}


def one(system: str, n: int, workers: int) -> None:
    got = run_jobledger(n, workers) if system == "jobledger" else run_huey(n, workers)
    print(json.dumps({"bench": "cpu", "system": system, "n": n, "workers": workers, **got}))


def spawn(system: str, n: int, workers: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--one", system, "-n", str(n), "--workers", str(workers)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "JL_BENCH_CPU_MS": str(CPU_MS)},
    )
    record: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-n", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2, help="children / huey worker processes")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="200 jobs, once")
    p.add_argument("--one", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = p.parse_args()
    n = 200 if args.quick else args.n
    if args.one:
        one(args.one, n, args.workers)
        return
    records: list[dict[str, Any]] = []
    for rep in range(1 if args.quick else args.repeat):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            got = spawn(system, n, args.workers)
            got["repeat"] = rep
            print(json.dumps(got), flush=True)
            records.append(got)
    med = {s: statistics.median(r["rate"] for r in records if r["system"] == s) for s in SYSTEMS}
    print(
        json.dumps(
            {
                "bench": "cpu_summary",
                "n": n,
                "cpu_ms": CPU_MS,
                "workers": args.workers,
                "median_rate": med,
                "jobledger_vs_huey": round(med["jobledger"] / med["huey"], 3),
                "target": 1.5,
                "machine": machine(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
