"""A worker process for the schedule tests:
`python -m tests.schedules.sched_proc DB STATUS [SECONDS]`.

It starts a `JobManager` on DB (wall clock, `startup_delay=0`) with a `TICK` handler
(which sleeps SECONDS, default 0, so a run can outlast a schedule's period) and runs
until SIGTERM, then stops cleanly and exits 0. Every ~20 ms it rewrites STATUS
atomically (write + rename) with `<worker id> <leader 0|1>`; the file first appears once
`start()` returned. The schedules themselves are rows the parent wrote: the child only
arms what the database holds (if it leads).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import jobledger as jl
from tests.schedules import TICK, Tick

STATUS_EVERY = 0.02


def write_status(path: str, jobs: jl.JobManager) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{jobs.worker_id} {int(jobs.is_leader)}\n")
    os.replace(tmp, path)


async def main(db: str, status: str, busy: float) -> int:
    jobs = jl.JobManager(
        db,
        startup_delay=0,
        poll_interval=0.02,
        heartbeat_interval=0.2,
        leader_ttl=600.0,  # a SIGKILLed leader on this host is replaced at once anyway
    )

    @jobs.handler(TICK, recovery="retry", concurrency=4)
    async def tick(ctx: jl.JobContext[Tick]) -> None:
        if busy:
            await asyncio.sleep(busy)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await jobs.start()
    while not stop.is_set():
        write_status(status, jobs)
        try:
            await asyncio.wait_for(stop.wait(), STATUS_EVERY)
        except TimeoutError:
            pass
    await jobs.stop()
    return 0


if __name__ == "__main__":
    busy = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], busy)))
