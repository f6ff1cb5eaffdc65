"""A worker process for the partition test: `python -m tests.postgres.pg_proc URL STATUS ...`.

It starts a `JobManager` on URL (wall clock, `startup_delay=0`) with a `TICK` handler, and
runs until SIGTERM, then stops cleanly and exits 0. Every ~20 ms it rewrites STATUS
atomically with `<worker id> <leader 0|1>`; the file first appears once
`start()` returned. It logs jobledger's INFO records to stderr (the parent reads the
leadership changes from there). Schedules are rows the parent wrote: the child arms what
the database holds while it leads.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
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


async def main(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(created).3f %(name)s %(levelname)s %(message)s",
    )
    jobs = jl.JobManager(
        args.url,
        startup_delay=0,
        poll_interval=0.02,
        heartbeat_interval=args.heartbeat,
        leader_ttl=args.leader_ttl,
    )

    @jobs.handler(TICK, recovery="retry", concurrency=4)
    async def tick(ctx: jl.JobContext[Tick]) -> None:
        return None

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await jobs.start()
    while not stop.is_set():
        write_status(args.status, jobs)
        try:
            await asyncio.wait_for(stop.wait(), STATUS_EVERY)
        except TimeoutError:
            pass
    await jobs.stop()
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="pg_proc")
    p.add_argument("url")
    p.add_argument("status")
    p.add_argument("--leader-ttl", type=float, default=15.0)
    p.add_argument("--heartbeat", type=float, default=0.2)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
