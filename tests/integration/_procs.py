"""Child-process entry points for the multi-process tests.

They run under the "spawn" start method, so each is a plain top-level function that
reports through its exit code, a multiprocessing Event or a Queue. Every wait has a
timeout, so a broken test fails instead of hanging.
"""

from __future__ import annotations

import sys
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from jobledger._storage.lease import acquire_writer_lease
from jobledger._storage.sqlite.migrate import migrate

WAIT = 30.0
EXIT_BUSY = 5
EXIT_TIMEOUT = 6


def hold_lease(lock_path: str, acquired: Event, release: Event) -> None:
    """Take the lease, say so, and keep it until `release` is set (or the process dies)."""
    lease = acquire_writer_lease(lock_path)
    if lease is None:
        sys.exit(EXIT_BUSY)
    acquired.set()
    if not release.wait(WAIT):
        lease.release()
        sys.exit(EXIT_TIMEOUT)
    lease.release()


def try_lease(lock_path: str) -> None:
    """Exit 0 if the lease could be taken (and give it back), EXIT_BUSY if not."""
    lease = acquire_writer_lease(lock_path)
    if lease is None:
        sys.exit(EXIT_BUSY)
    lease.release()


def migrate_at_barrier(db_path: str, barrier: Barrier, results: Queue[tuple[str, str]]) -> None:
    """Wait until every sibling is ready, then migrate at the same moment."""
    barrier.wait(WAIT)
    try:
        results.put(("ok", str(migrate(db_path))))
    except BaseException as exc:
        results.put(("error", repr(exc)))


def enqueue_from_one_key(
    db_path: str, start_ms: int, n: int, barrier: Barrier, results: Queue[tuple[str, Any]]
) -> None:
    """Enqueue `n` jobs one by one and `n` in one batch, every id in the millisecond
    `start_ms`, this process's sequence starting at that millisecond's first key, as a
    sibling's does: their first keys meet. Reports ("ok", ids) or ("error", repr)."""
    from datetime import UTC, datetime

    import jobledger as jl
    from jobledger._core import ids
    from jobledger.testing import FakeClock

    try:
        clock = FakeClock(datetime.fromtimestamp(start_ms / 1000, tz=UTC))
        jobs = jl.JobManager(db_path, clock=clock)
        kind = jl.JobType("test.keys", dict)
        jobs.enqueue(kind, {"warm": True}, queue="warm")  # open and register first
        barrier.wait(WAIT)
        ids._last_ms = start_ms
        ids._end = start_ms << ids.SEQ_BITS
        made = [jobs.enqueue(kind, {"i": i}).id for i in range(n)]
        made += [h.id for h in jobs.enqueue_many(kind, [{"i": i} for i in range(n)])]
        results.put(("ok", made))
    except BaseException as exc:
        results.put(("error", repr(exc)))
