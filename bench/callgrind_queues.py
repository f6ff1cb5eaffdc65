"""Instructions per drained job across many queues, to count under callgrind.

    PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=cg.out \\
        python bench/callgrind_queues.py 1000 20000          # queues, jobs
    PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=cg0.out \\
        python bench/callgrind_queues.py 1000 20000 prefill  # the same rows, no drain

`bench/many_queues.py`'s rows (`prefill`: each queue's jobs together, `grouped`) drained
by one started manager under a global cap of 50, each queue at concurrency 5 (one
queue: 50), with a no-op `async def` handler; `prefill` writes the rows and exits. The
per-job count is (drain run - prefill run) / jobs: the same rows and start-up on both
sides, so what is left is the drain. The claim-ahead budget is held at its ceiling as
in `callgrind_drain.py steady` (callgrind's slowdown would otherwise halve it in every
batch). Where the 5 ms jobs of `many_queues.py` measure latency, this measures what a
job costs the loop at 1 queue and at 1,000.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jobledger._runtime.ahead as ahead  # noqa: E402
import many_queues  # noqa: E402
from _common import NOOP, jl  # noqa: E402

T = TypeVar("T")


async def drain(path: str, queues: int, n: int, at_end: Callable[[], T] | None = None) -> T | None:
    """Drain the `n` rows; `at_end` runs once the last job ran, before `stop` (which
    checkpoints the file), and its answer is returned (`queues_sql.py`: the WAL's size)."""
    jobs = jl.JobManager(path, startup_delay=0, global_max_concurrency=many_queues.GLOBAL_CAP)
    done = asyncio.Event()
    seen = 0
    concurrency = many_queues.GLOBAL_CAP if queues == 1 else many_queues.QUEUE_CAP

    @jobs.handler(NOOP, recovery="retry", concurrency=concurrency)
    async def handle(ctx: jl.JobContext[dict[str, Any]]) -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            done.set()

    await jobs.start()
    await done.wait()
    answer = None if at_end is None else at_end()
    await jobs.stop()
    return answer


def main() -> None:
    queues, n = int(sys.argv[1]), int(sys.argv[2])
    ahead.LAG_HIGH = float("inf")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "jobs.db")
        many_queues.prefill(path, n, queues)
        if sys.argv[3:] != ["prefill"]:
            asyncio.run(drain(path, queues, n))


if __name__ == "__main__":
    main()
