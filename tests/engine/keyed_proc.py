"""A child process for tests/engine/test_unique_debounce.py (run under "spawn")."""

from __future__ import annotations

import asyncio
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

WAIT = 60.0


def debounce_and_unique(
    db: str, worker: int, n: int, barrier: Barrier, results: Queue[tuple[str, Any]]
) -> None:
    """After the barrier, `n` times: debounce key "d" and enqueue key "u" unique for ten
    minutes, each with payload {"w": worker, "i": i}. Reports ("ok", {key: [job ids]})
    or ("error", repr)."""
    import jobledger as jl

    try:
        jobs = jl.JobManager(db)
        kind = jl.JobType("test.keyed", dict)
        barrier.wait(WAIT)
        answered: dict[str, list[str]] = {"d": [], "u": []}
        for i in range(n):
            payload = {"w": worker, "i": i}
            answered["d"].append(jobs.enqueue(kind, payload, idempotency_key="d", debounce=600).id)
            answered["u"].append(
                jobs.enqueue(kind, payload, idempotency_key="u", unique_for=600).id
            )
        asyncio.run(jobs.stop())
        results.put(("ok", answered))
    except BaseException as exc:
        results.put(("error", repr(exc)))
