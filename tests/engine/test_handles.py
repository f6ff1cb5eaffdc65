"""`handle.finished` (src/jobledger/_runtime/handle.py) resolves with the terminal row as
the table holds it, whichever way the job ended: finished in this process (the finalize's
own row, no read of its own), finished before the handle was awaited (one read for every
handle awaited in the same turn of the loop), a mix of both in one `gather`, or by
another manager; it never raises."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading

import jobledger as jl
from jobledger.clock import from_ms
from tests.conftest import db_rows, run
from tests.engine import ITEM, Item, fast_retry, make_manager


def _row_of(db: str, job_id: str) -> tuple[object, ...]:
    """The terminal columns, read on a connection of the test's own."""
    sql = "SELECT status, output, attempt, finished_at FROM jobs WHERE id = ?"
    rows = db_rows(db, sql, (job_id,))
    return tuple(rows[0])


def test_a_job_finished_here_resolves_with_its_terminal_row(db: str) -> None:
    """Output, attempt, worker and times are the row's, also after a retry."""
    jobs = make_manager(db)
    tries: dict[int, int] = {}

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(3))
    async def work(ctx: jl.JobContext[Item]) -> dict[str, int]:
        tries[ctx.payload.n] = tries.get(ctx.payload.n, 0) + 1
        if ctx.payload.n == 2 and tries[2] < 2:
            raise RuntimeError("once")
        return {"n": ctx.payload.n, "attempt": ctx.attempt}

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            handles = [jobs.enqueue(ITEM, Item(n=n)) for n in (1, 2)]
            return list(await asyncio.gather(*(h.finished for h in handles)))

    snaps = run(main())
    assert [(s.status, s.output, s.attempt) for s in snaps] == [
        ("completed", {"n": 1, "attempt": 0}, 0),  # attempts count from 0
        ("completed", {"n": 2, "attempt": 1}, 1),
    ]
    for s in snaps:
        status, output, attempt, finished_at = _row_of(db, s.id)
        assert (status, attempt) == (s.status, s.attempt)
        assert (json.loads(output) if isinstance(output, str) else output) == s.output
        assert isinstance(finished_at, int)
        assert s.finished_at == from_ms(finished_at)
        assert s.worker_id == jobs.worker_id


def test_a_gather_of_finished_and_pending_handles_resolves_every_one(db: str) -> None:
    """Some jobs ended before their handles were awaited (read once, together), the
    others end afterwards here; a failed one resolves too (it never raises)."""
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(1))
    async def work(ctx: jl.JobContext[Item]) -> int:
        if ctx.payload.n < 0:
            raise ValueError("negative")
        return ctx.payload.n

    async def main() -> tuple[list[jl.JobSnapshot], list[jl.JobSnapshot]]:
        async with jobs:
            early = jobs.enqueue_many(ITEM, [Item(n=n) for n in (-1, *range(1, 20))])
            while jobs.count(status=["completed", "failed"]) < len(early):
                await asyncio.sleep(0.01)
            late = jobs.enqueue_many(ITEM, [Item(n=n) for n in range(100, 140)])
            got = await asyncio.gather(*(h.finished for h in (*early, *late)))
            return list(got[: len(early)]), list(got[len(early) :])

    early, late = run(main())
    assert early[0].status == "failed"
    assert early[0].error is not None
    assert early[0].error.code == "JOB_HANDLER_THREW"
    assert [s.output for s in early[1:]] == list(range(1, 20))
    assert [(s.status, s.output) for s in late] == [("completed", n) for n in range(100, 140)]


def test_a_job_finished_by_another_manager_resolves_in_a_started_one(db: str) -> None:
    """The handle's job is claimed elsewhere: the watcher of this started manager (no
    handler for the type, so it never claims it) reads the row when it changes."""
    worker = make_manager(db)
    other = make_manager(db)

    @worker.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> int:
        return ctx.payload.n + 1

    async def main() -> list[jl.JobSnapshot]:
        async with other:
            handles = other.enqueue_many(ITEM, [Item(n=n) for n in range(5)])
            async with worker:
                return list(await asyncio.gather(*(h.finished for h in handles)))

    snaps = run(main())
    assert [(s.status, s.output, s.worker_id) for s in snaps] == [
        ("completed", n + 1, worker.worker_id) for n in range(5)
    ]


def test_a_resolved_snapshot_equals_the_row_read_afterwards(db: str) -> None:
    """Decoded on first use (`row_snapshot`), the snapshot a handle resolves with is the
    row `jobs.get` reads: equal either way round, the same repr, every field alike,
    whether the job finished here, failed, or ended before it was awaited."""
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(1))
    async def work(ctx: jl.JobContext[Item]) -> dict[str, int]:
        if ctx.payload.n < 0:
            raise ValueError("negative")
        return {"n": ctx.payload.n}

    async def main() -> list[tuple[jl.JobSnapshot, jl.JobSnapshot | None]]:
        async with jobs:
            early = jobs.enqueue(ITEM, Item(n=1))
            await early.finished
            handles = [early, *jobs.enqueue_many(ITEM, [Item(n=-1), Item(n=2)])]
            snaps = await asyncio.gather(*(h.finished for h in handles))
            return [(s, jobs.get(s.id)) for s in snaps]

    pairs = run(main())
    assert [s.status for s, _ in pairs] == ["completed", "failed", "completed"]
    for snap, read in pairs:
        assert read is not None
        assert snap == read
        assert read == snap
        assert repr(snap) == repr(read)
        assert dataclasses.asdict(snap) == dataclasses.asdict(read)


def test_every_waiter_on_one_job_resolves_also_from_another_thread(db: str) -> None:
    """A job's first waiter is kept as the future itself, a second turns it into a list
    (`Engine.wait_for`): two on this loop, one cancelled, and one on another thread's
    loop (resolved through that loop's thread-safe call) all see the same ending."""
    jobs = make_manager(db)
    release = asyncio.Event()
    registered = threading.Event()
    elsewhere: list[jl.JobSnapshot] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> int:
        await release.wait()
        return ctx.payload.n

    def other_thread(handle: jl.JobHandle) -> None:
        async def wait() -> jl.JobSnapshot:
            fut = handle.finished  # a future of this thread's loop
            registered.set()
            return await fut

        elsewhere.append(asyncio.run(wait()))

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            handle = jobs.enqueue(ITEM, Item(n=5))
            while jobs.count(status="running") < 1:
                await asyncio.sleep(0.01)
            first, dropped, second = handle.finished, handle.finished, handle.finished
            assert isinstance(dropped, asyncio.Future)
            dropped.cancel()
            thread = threading.Thread(target=other_thread, args=(handle,))
            thread.start()
            assert await asyncio.to_thread(registered.wait, 30)
            release.set()
            got = list(await asyncio.gather(first, second))
            await asyncio.to_thread(thread.join, 30)
            assert dropped.cancelled()
            return got

    here = run(main())
    assert [(s.status, s.output) for s in (*here, *elsewhere)] == [("completed", 5)] * 3
    assert here[0] == here[1] == elsewhere[0]


def test_snapshots_do_not_share_their_empty_metadata(db: str) -> None:
    """`snapshot_from_row` decodes `{}` without the parser (src/jobledger/_storage/rows.py):
    still one new dict per snapshot, so changing one leaves the others as read."""
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            handles = jobs.enqueue_many(ITEM, [Item(), Item()])
            return list(await asyncio.gather(*(h.finished for h in handles)))

    first, second = run(main())
    assert first.output is None
    assert first.metadata == second.metadata == {}
    assert first.metadata is not second.metadata


def test_finished_on_a_running_loop_is_a_future_and_without_one_waits_when_awaited(
    db: str,
) -> None:
    """On a running loop `finished` is a future itself, so a `gather` of many handles
    wraps none of them in a Task; made before the loop runs (`run_until_complete`), it
    is a coroutine that waits once awaited. Both resolve with the terminal row."""
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> int:
        return ctx.payload.n

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            handles = jobs.enqueue_many(ITEM, [Item(n=n) for n in range(30)])
            waits = [h.finished for h in handles]
            assert all(isinstance(w, asyncio.Future) for w in waits)
            tasks = len(asyncio.all_tasks())
            gathered = asyncio.gather(*waits)
            assert len(asyncio.all_tasks()) == tasks  # no Task per handle
            return list(await gathered)

    assert [s.output for s in run(main())] == list(range(30))

    later = make_manager(db)
    later.handler(ITEM, recovery="retry")(work)
    handle = later.enqueue(ITEM, Item(n=7))
    waiting = handle.finished  # no running loop: waits once awaited
    assert not isinstance(waiting, asyncio.Future)

    async def run_it() -> jl.JobSnapshot:
        async with later:
            return await waiting

    snap = run(run_it())
    assert (snap.status, snap.output) == ("completed", 7)


def test_handles_of_jobs_finalized_together_take_the_row_built_from_their_claims(
    db: str,
) -> None:
    """Outcomes a handle waits on, finalized in one statement, read back only the columns
    their claims lack (`sqlite/queries.py`, FINISHED_PARTS): seen in the writer's
    statements, and the snapshots equal `jobs.get`, with what moved while they ran
    (progress, metadata) included."""
    jobs = make_manager(db)
    gate = asyncio.Event()
    started = 0

    @jobs.handler(ITEM, recovery="retry", concurrency=10)
    async def work(ctx: jl.JobContext[Item]) -> dict[str, int]:
        nonlocal started
        started += 1
        await ctx.report_progress(ctx.payload.n / 3, f"n={ctx.payload.n}")
        await ctx.patch_metadata({"seen": ctx.payload.n})
        if started == 6:
            gate.set()
        await gate.wait()  # all six end together: one finalize batch
        return {"n": ctx.payload.n}

    seen: list[str] = []
    conn = getattr(jobs._store, "conn", None)  # the SQLite writer (PostgreSQL reads whole)
    sqlite = isinstance(conn, sqlite3.Connection)

    async def main() -> list[tuple[jl.JobSnapshot, jl.JobSnapshot | None]]:
        handles = jobs.enqueue_many(ITEM, [Item(n=n) for n in range(6)])
        async with jobs:
            if isinstance(conn, sqlite3.Connection):
                conn.set_trace_callback(seen.append)
            snaps = await asyncio.gather(*(h.finished for h in handles))
            if isinstance(conn, sqlite3.Connection):
                conn.set_trace_callback(None)
            return [(s, jobs.get(s.id)) for s in snaps]

    pairs = run(main())
    if sqlite:
        assert any("RETURNING jobs.id, jobs.idempotency_key" in sql for sql in seen)
        assert not any(sql.startswith("WITH o (key") and "jobs.payload" in sql for sql in seen)
    for n, (snap, read) in enumerate(pairs):
        assert read is not None
        assert snap == read
        assert dataclasses.asdict(snap) == dataclasses.asdict(read)
        assert (snap.progress, snap.metadata) == (n / 3, {"seen": n})
