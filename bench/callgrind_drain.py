"""A small fixed drain to count instructions of, before and after a hot-path change.

    PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=cg.out \\
        python bench/callgrind_drain.py 2000 async      # or: thread, handles, tx

`n` no-op jobs are written with `enqueue_many`, then drained by one started manager
with an `async def` handler (concurrency 50) or a plain `def` one (concurrency 16).
`tx` is the async drain whose handler completes through `async with ctx.transaction()`
with one INSERT (`bench/exactly_once.py`'s handler; its count minus `async` is what
the block costs). `handles` is the async drain as a user awaits it (`bench/handles.py`): the handles
`enqueue_many` returned, all awaited with `asyncio.gather` of `h.finished`; its count
minus the `async` one is what awaiting the handles costs. `timeout` is the async drain with
`timeout=30` on the handler (each job arms and cancels its timer). `floor` runs no jobledger at
all: `n` futures gathered as `handles` gathers, resolved 50 a turn of the loop as a
finalize batch resolves them; its per-job count is asyncio's own part of awaiting a
handle, which no queue can take out.
Callgrind's instruction count is stable on a busy machine, where wall time is not.

`steady` (a third argument) keeps claims as large as they are outside callgrind. The
claim-ahead budget (`_runtime/ahead.py`) halves when a job waits more than `LAG_HIGH`
of real time for the loop, which under callgrind's ~50x slowdown happens in every batch:
claims shrink to a few jobs and the count is mostly claim statements. Raising the bound
keeps batches of 50, as in `bench/handles.py`. Per-job counts are the difference of two
sizes (say 4000 and 2000, divided by 2000), which cancels start-up.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

import jobledger as jl  # noqa: E402

HOT = jl.JobType("hot.noop", dict)


async def floor(n: int) -> None:
    loop = asyncio.get_running_loop()

    async def resolve(futures: list[asyncio.Future[int]]) -> None:
        for start in range(0, n, 50):
            for fut in futures[start : start + 50]:
                fut.set_result(start)
            await asyncio.sleep(0)

    futures: list[asyncio.Future[int]] = [loop.create_future() for _ in range(n)]
    task = loop.create_task(resolve(futures))
    await asyncio.gather(*futures)
    await task


async def drain(n: int, kind: str) -> None:
    if kind == "floor":
        await floor(n)
        return
    with tempfile.TemporaryDirectory() as d:
        jobs = jl.JobManager(os.path.join(d, "jobs.db"), startup_delay=0)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        seen = 0

        def hit() -> None:
            nonlocal seen
            seen += 1
            if seen == n:
                loop.call_soon_threadsafe(done.set)

        if kind == "tx":
            with jobs.write_tx() as t:
                t.execute("CREATE TABLE ledger (job_id TEXT PRIMARY KEY, n INT)")

            @jobs.handler(HOT, recovery="retry", concurrency=50)
            async def block(ctx: jl.JobContext[dict[str, Any]]) -> None:
                async with ctx.transaction() as t:
                    t.execute("INSERT INTO ledger (job_id, n) VALUES (?, ?)", (ctx.job_id, 1))
                hit()

        elif kind in ("async", "handles", "timeout"):
            timeout = 30.0 if kind == "timeout" else None

            @jobs.handler(HOT, recovery="retry", concurrency=50, timeout=timeout)
            async def noop(ctx: jl.JobContext[dict[str, Any]]) -> None:
                hit()

        else:

            @jobs.handler(HOT, recovery="retry", concurrency=16)
            def plain(ctx: jl.JobContext[dict[str, Any]]) -> None:
                hit()

        handles = jobs.enqueue_many(HOT, [{}] * n)
        async with jobs:
            if kind == "handles":
                snaps = await asyncio.gather(*(h.finished for h in handles))
                assert all(s.status == "completed" for s in snaps)
            else:
                await done.wait()


if __name__ == "__main__":
    if sys.argv[3:] == ["steady"]:
        import jobledger._runtime.ahead as ahead

        ahead.LAG_HIGH = float("inf")
    asyncio.run(drain(int(sys.argv[1]), sys.argv[2]))
