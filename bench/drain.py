"""End-to-end drain: `n` pending no-op jobs, one worker process, until all are done.

jobledger: async no-op handler; `--queues 1`: one queue, concurrency 50, global cap 50;
`--queues 10`: jobs spread round-robin over 10 queues of concurrency 10 each under one
global cap of 50 (so the global cap is what binds). The clock runs from `start()` until
the table holds `n` completed rows (committed). The rows are written before the clock
starts (see `_common.prefill`).

huey: one `SqliteHuey` queue, its consumer's `Worker.loop()` driven in this process's
main thread (one worker thread's work, no consumer process around it), from the first
dequeue until the last task has executed. huey has one queue per instance, so it only
runs `--queues 1`; `run_all.py` compares the 10-queue row against it too.

`--payload-bytes N`: each payload holds a string of N characters and each handler
returns one (jobledger writes it to the row's `output`; huey stores a non-None result),
so a row is about 2N bytes when it ends. At N=1500 a row no longer fits the ~1 KB that an
index B-tree (a `WITHOUT ROWID` table) keeps on its page; see `docs/design/storage.md`.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from _common import (
    Counter,
    Stopwatch,
    base_parser,
    bench_payload,
    emit,
    fresh_dir,
    huey_prefill,
    huey_worker,
    make_huey,
    make_manager,
    prefill,
    rate,
    wait_completed,
)


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--queues", type=int, default=1)
    p.add_argument("--payload-bytes", type=int, default=0)
    args = p.parse_args()
    size = args.payload_bytes
    bench = "drain" if args.queues == 1 else f"drain_{args.queues}q"
    if size:
        bench += f"_{size}b"
    with fresh_dir() as d:
        if args.system == "jobledger":
            path = os.path.join(d, "jobs.db")
            seconds = asyncio.run(_jobledger(path, args.sync, args.n, args.queues, size))
        else:
            if args.queues != 1:
                raise SystemExit("huey runs one queue per instance")
            seconds = _huey(os.path.join(d, "huey.db"), args.sync, args.n, size)
    emit(bench, args.system, args.sync, n=args.n, queues=args.queues,
         seconds=round(seconds, 4), rate=rate(args.n, seconds))  # fmt: skip


async def _jobledger(path: str, sync: str, n: int, queues: int, size: int) -> float:
    prefill(path, n, queues=queues, payload_bytes=size)
    counter = Counter()
    jobs = make_manager(
        path,
        sync,
        concurrency=50 if queues == 1 else 10,
        global_cap=50,
        counter=counter,
        output_bytes=size,
    )
    watch = Stopwatch()
    await jobs.start()
    await wait_completed(jobs, counter, n)
    seconds = watch.elapsed()
    await jobs.stop()
    return seconds


def _huey(path: str, sync: str, n: int, size: int) -> float:
    huey = make_huey(path, sync)
    ran = 0
    output = "y" * size if size else None

    @huey.task()  # type: ignore[untyped-decorator]
    def noop(payload: dict[str, Any] | None = None) -> str | None:
        nonlocal ran
        ran += 1
        return output  # huey stores a non-None result: its counterpart of our output

    huey_prefill(huey, noop, n, *([bench_payload(size)] if size else []))
    worker = huey_worker(huey)
    watch = Stopwatch()
    while ran < n:
        worker.loop()
    seconds = watch.elapsed()
    huey.storage.close()
    return seconds


if __name__ == "__main__":
    main()
