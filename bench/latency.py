"""Latency from `enqueue` to handler start on an idle worker in the same process.

One job at a time: enqueue, wait until the handler has started and the job is finished,
idle 2 ms, repeat. Two figures per job:

    call    from the `enqueue` call to the handler's first line (includes the commit)
    return  from `enqueue` returning (the row is committed) to the handler's first line

jobledger: a started manager; `enqueue` is called on the manager's event loop, as an
async web handler in the same process would. A commit wakes the queue directly (no
polling).

huey: its consumer `Worker.loop()` in a second thread, polling every 1 ms (the default
is 0.1 s, growing to 10 s while idle, which would put the median above 50 ms); the
main thread enqueues.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from typing import Any

from _common import NOOP, base_parser, emit, fresh_dir, huey_worker, jl, make_huey

WARMUP = 20
IDLE = 0.002


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("-n", type=int, default=500)
    args = p.parse_args()
    with fresh_dir() as d:
        if args.system == "jobledger":
            call, ret = asyncio.run(_jobledger(os.path.join(d, "jobs.db"), args.sync, args.n))
        else:
            call, ret = _huey(os.path.join(d, "huey.db"), args.sync, args.n)
    emit(
        "latency", args.system, args.sync, n=args.n, **_stats("call", call), **_stats("return", ret)
    )


def _stats(prefix: str, samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        f"{prefix}_p50_ms": round(statistics.median(ms), 3),
        f"{prefix}_p99_ms": round(q[98], 3),
        f"{prefix}_max_ms": round(ms[-1], 3),
    }


async def _jobledger(path: str, sync: str, n: int) -> tuple[list[float], list[float]]:
    jobs = jl.JobManager(path, startup_delay=0, synchronous=sync)  # type: ignore[arg-type]
    started: list[float] = []
    signal: asyncio.Event = asyncio.Event()

    @jobs.handler(NOOP, recovery="retry", concurrency=50)
    async def noop(ctx: jl.JobContext[dict[str, Any]]) -> None:
        started.append(time.perf_counter())
        signal.set()

    call: list[float] = []
    ret: list[float] = []
    async with jobs:
        await jobs.recovery_done
        for i in range(n + WARMUP):
            signal.clear()
            t0 = time.perf_counter()
            handle = jobs.enqueue(NOOP, {})
            t1 = time.perf_counter()
            await signal.wait()
            if i >= WARMUP:
                call.append(started[-1] - t0)
                ret.append(started[-1] - t1)
            await handle.finished
            await asyncio.sleep(IDLE)
    return call, ret


def _huey(path: str, sync: str, n: int) -> tuple[list[float], list[float]]:
    huey = make_huey(path, sync)
    started: list[float] = []
    began = threading.Event()
    finished = threading.Event()

    @huey.task()  # type: ignore[untyped-decorator]
    def noop() -> None:
        started.append(time.perf_counter())
        began.set()

    @huey.post_execute()  # type: ignore[untyped-decorator]
    def after(task: Any, value: Any, exc: Any) -> None:
        finished.set()

    worker = huey_worker(huey, delay=0.001, max_delay=0.001, backoff=1.0)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            worker.loop()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    call: list[float] = []
    ret: list[float] = []
    try:
        for i in range(n + WARMUP):
            began.clear()
            finished.clear()
            t0 = time.perf_counter()
            noop()
            t1 = time.perf_counter()
            if not began.wait(10) or not finished.wait(10):
                raise RuntimeError("huey did not run the task")
            if i >= WARMUP:
                call.append(started[-1] - t0)
                ret.append(started[-1] - t1)
            time.sleep(IDLE)
    finally:
        stop.set()
        thread.join(5)
    huey.storage.close()
    return call, ret


if __name__ == "__main__":
    main()
