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

`--cross-process`: the same question when the worker is another process on the same
file, the usual deployment (a web app enqueues, a worker runs jobs). The worker process
starts and runs its consumer; this process enqueues one job at a time while the worker
is idle. The handler records `time.time()` at its first line and sends it back over a
pipe; `call` is measured from the wall time before the `enqueue` call, `return` from the
wall time after it. Between jobs: wait until the previous job is finished, then idle a
random 5-105 ms (seeded), so enqueues fall at random phases of the worker's polling
(idling a fixed time would lock them to one phase and measure that phase only).

    jobledger  a started manager (default `poll_interval`, 0.05 s, unless
               `--poll-interval`): it notices another process's commit by polling
               `PRAGMA data_version`, so the wait is uniform over one interval.
    huey       `Worker.loop()` with huey_consumer's defaults (first delay 0.1 s,
               backing off by 1.15 up to 10 s while idle; reset by each task).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import random
import statistics
import threading
import time
from typing import Any

from _common import NOOP, base_parser, emit, fresh_dir, huey_worker, jl, make_huey

WARMUP = 20
IDLE = 0.002
XPROC_WARMUP = 5
XPROC_IDLE = (0.005, 0.105)  # random idle between cross-process jobs (s)


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("-n", type=int, default=None, help="jobs (default 500; 200 cross-process)")
    p.add_argument("--cross-process", action="store_true", help="the worker is another process")
    p.add_argument(
        "--poll-interval", type=float, default=None, help="jobledger's poll_interval (s)"
    )
    args = p.parse_args()
    if args.cross_process:
        n = 200 if args.n is None else args.n
        with fresh_dir() as d:
            call, ret, extra = _cross_process(d, args.system, args.sync, n, args.poll_interval)
        emit(
            "latency_xproc",
            args.system,
            args.sync,
            n=n,
            **extra,
            **_stats("call", call),
            **_stats("return", ret),
        )
        return
    args.n = 500 if args.n is None else args.n
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


# -- cross-process ----------------------------------------------------------------------


def _cross_process(
    d: str, system: str, sync: str, n: int, poll: float | None
) -> tuple[list[float], list[float], dict[str, Any]]:
    ctx = mp.get_context("spawn")
    path = os.path.join(d, "jobs.db" if system == "jobledger" else "huey.db")
    started = ctx.Queue()
    ready = ctx.Event()
    stop = ctx.Event()
    if system == "jobledger":
        producer = jl.JobManager(path, startup_delay=0, synchronous=sync)  # type: ignore[arg-type]
        target: Any = _xproc_jobledger_worker
        worker_args: tuple[Any, ...] = (path, sync, poll, started, ready, stop)
        extra: dict[str, Any] = {
            "poll_interval_s": producer.poll_interval if poll is None else poll
        }

        def enqueue() -> Any:
            return producer.enqueue(NOOP, {}).id

        def is_done(job_id: Any) -> bool:
            snap = producer.get(job_id)
            return snap is not None and snap.status == "completed"
    else:
        huey = make_huey(path, sync)
        task = _xproc_huey_task(huey)
        target = _xproc_huey_worker
        worker_args = (path, sync, started, ready, stop)
        extra = {"huey_delay_s": 0.1, "huey_max_delay_s": 10.0, "huey_backoff": 1.15}

        def enqueue() -> Any:
            task()
            return None

        def is_done(job_id: Any) -> bool:
            return True  # the worker reports after the task has run (see _xproc_huey_worker)

    worker = ctx.Process(target=target, args=worker_args, daemon=True)
    worker.start()
    rng = random.Random(7)
    call: list[float] = []
    ret: list[float] = []
    try:
        if not ready.wait(60):
            raise RuntimeError("the worker process did not start")
        for i in range(n + XPROC_WARMUP):
            time.sleep(rng.uniform(*XPROC_IDLE))
            t0 = time.time()
            job_id = enqueue()
            t1 = time.time()
            began = started.get(timeout=30)
            if i >= XPROC_WARMUP:
                call.append(began - t0)
                ret.append(began - t1)
            if system == "huey":
                started.get(timeout=30)  # "executed"
            deadline = time.monotonic() + 30
            while not is_done(job_id):  # the worker is idle again before the next enqueue
                if time.monotonic() > deadline:
                    raise RuntimeError("the job did not finish")
                time.sleep(0.001)
    finally:
        stop.set()
        worker.join(30)
        if worker.is_alive():
            worker.kill()
    return call, ret, extra


def _xproc_jobledger_worker(
    path: str, sync: str, poll: float | None, started: Any, ready: Any, stop: Any
) -> None:
    options: dict[str, Any] = {} if poll is None else {"poll_interval": poll}
    jobs = jl.JobManager(path, startup_delay=0, synchronous=sync, **options)  # type: ignore[arg-type]

    @jobs.handler(NOOP, recovery="retry", concurrency=50)
    async def noop(ctx: jl.JobContext[dict[str, Any]]) -> None:
        started.put(time.time())

    async def run() -> None:
        async with jobs:
            await jobs.recovery_done
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    asyncio.run(run())


def _xproc_huey_task(huey: Any, started: Any = None) -> Any:
    def noop() -> None:
        if started is not None:
            started.put(time.time())

    # huey names a task by its function's module; the same name in both processes.
    noop.__module__ = "jlbench"
    return huey.task(name="noop")(noop)


def _xproc_huey_worker(path: str, sync: str, started: Any, ready: Any, stop: Any) -> None:
    huey = make_huey(path, sync)
    _xproc_huey_task(huey, started)

    @huey.post_execute()  # type: ignore[untyped-decorator]
    def after(task: Any, value: Any, exc: Any) -> None:
        started.put(time.time())

    worker = huey_worker(huey)  # huey_consumer's defaults: 0.1 s, x1.15, up to 10 s
    ready.set()
    while not stop.is_set():
        worker.loop()
    huey.storage.close()


if __name__ == "__main__":
    main()
