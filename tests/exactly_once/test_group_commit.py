"""`async with ctx.transaction()`: on SQLite the blocks that end in one turn of the loop
share one commit (`_storage/sqlite/group.py`), and each keeps every promise of the
`with` form: its rows, follow-ups and completion land together or not at all, a failed
block takes nothing of its neighbours with it, and its `async with` returns only once
committed. On PostgreSQL a block commits on its own. Real files and schemas (`db`)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from contextvars import Context
from typing import Any, TypeVarTuple

import pydantic

import jobledger as jl
from tests.conftest import db_rows, is_postgres, run, sql_for
from tests.engine import fast_retry, make_manager
from tests.integration.test_kept_counts import _assert_exact


class Entry(pydantic.BaseModel):
    n: int


ENTRY = jl.JobType("gc.entry", Entry)
FOLLOW = jl.JobType("gc.follow", Entry)


def _setup(db: str, *, concurrency: int = 50) -> jl.JobManager:
    jobs = make_manager(db, global_max_concurrency=concurrency)
    with jobs.write_tx() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS ledger (n INTEGER PRIMARY KEY, attempt INTEGER)")

    @jobs.handler(FOLLOW, recovery="retry")
    async def follow(ctx: jl.JobContext[Entry]) -> None:
        return None

    return jobs


def _ledger(db: str) -> list[int]:
    return [int(r[0]) for r in db_rows(db, "SELECT n FROM ledger ORDER BY n")]


def _insert(db: str) -> str:
    return sql_for(db, "INSERT INTO ledger (n, attempt) VALUES (?, ?)")


def _all_released_at_once(
    jobs: jl.JobManager, handles: list[jl.JobHandle[Any]], release: asyncio.Event
) -> list[jl.JobSnapshot]:
    """Run the worker until every job of `handles` is running (each handler waits on
    `release`), release them together so their blocks end in one turn of the loop (one
    group), and return their terminal snapshots."""

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            while jobs.count(type=ENTRY, status="running") < len(handles):
                await asyncio.sleep(0.01)
            release.set()
            return list(await asyncio.gather(*(h.finished for h in handles)))

    return run(main())


def _trace_groups(conn: sqlite3.Connection, sizes: list[int]) -> None:
    """Append to `sizes` the blocks of each commit on the writer connection, from its
    statement trace."""
    current = [0]

    def trace(sql: str) -> None:
        if sql.startswith("SAVEPOINT jobledger_block"):
            current[0] += 1
        elif (
            sql.startswith(("COMMIT", "ROLLBACK"))
            and not sql.startswith("ROLLBACK TO")  # a block's own, not the group's
            and current[0]
        ):
            sizes.append(current[0])
            current[0] = 0

    conn.set_trace_callback(trace)


def test_many_blocks_complete_once_each_and_share_commits(db: str) -> None:
    jobs = _setup(db)
    sql = _insert(db)
    after: dict[int, str | None] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=50)
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
            jobs.enqueue_tx(tx, FOLLOW, Entry(n=ctx.payload.n))
            tx.set_output({"n": ctx.payload.n})
        # Code after the block runs after its commit: a reader's connection sees the row
        # completed. (Recorded, not asserted here: the handler's raise would be ignored.)
        snap = jobs.get(ctx.job_id)
        after[ctx.payload.n] = None if snap is None else str(snap.status)

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(300)])
    sizes: list[int] = []

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            if not is_postgres(db):  # the writer connection, traced from here on
                _trace_groups(jobs._store.conn, sizes)  # type: ignore[attr-defined]
            done = await asyncio.gather(*(h.finished for h in handles))
            while jobs.count(type=FOLLOW, status="completed") < 300:
                await asyncio.sleep(0.01)
            return list(done)

    done = run(main())
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert sorted(s.output["n"] for s in done) == list(range(300))
    assert _ledger(db) == list(range(300))
    assert after == dict.fromkeys(range(300), "completed")
    assert jobs.count(type=FOLLOW) == 300
    assert {a.outcome for s in done for a in jobs.attempts(s.id)} == {"completed"}
    if not is_postgres(db):
        assert sum(sizes) == 300
        assert max(sizes) > 1, sizes  # at least one commit held several blocks


def test_a_failing_block_rolls_back_alone(db: str) -> None:
    jobs = _setup(db)
    sql = _insert(db)
    tries: dict[int, list[int]] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=20, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        tries.setdefault(ctx.payload.n, []).append(ctx.attempt)
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
            jobs.enqueue_tx(tx, FOLLOW, Entry(n=ctx.payload.n))
            if ctx.payload.n % 5 == 0 and ctx.attempt == 0:
                raise RuntimeError("declined")

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(20)])

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            return list(await asyncio.gather(*(h.finished for h in handles)))

    done = run(main())
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == list(range(20))  # each row once: the failed tries left none
    assert jobs.count(type=FOLLOW) == 20
    assert {n: t for n, t in tries.items() if len(t) > 1} == {n: [0, 1] for n in range(0, 20, 5)}


def test_awaiting_inside_a_block_spoils_it_and_commits_nothing_of_it(db_path: str) -> None:
    """SQLite's group only: on PostgreSQL a block commits on its own, nothing is shared."""
    db = db_path
    jobs = _setup(db)
    sql = _insert(db)
    seen: list[str] = []

    @jobs.handler(ENTRY, recovery="retry", retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        try:
            async with ctx.transaction() as tx:
                tx.execute(sql, (ctx.payload.n, ctx.attempt))
                if ctx.attempt == 0:
                    await asyncio.sleep(0.01)  # the loop turns: the block is rolled back
                    try:
                        jobs.enqueue_tx(tx, FOLLOW, Entry(n=ctx.payload.n))
                    except jl.JobError as exc:
                        seen.append(f"enqueue_tx: {exc.code}")
                    tx.execute(sql, (ctx.payload.n + 100, ctx.attempt))
        except jl.JobError as exc:
            seen.append(exc.code)
            raise

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ENTRY, Entry(n=1)).finished

    done = run(main())
    assert seen == ["enqueue_tx: JOB_TRANSACTION_SPOILED", "JOB_TRANSACTION_SPOILED"]
    assert jobs.count(type=FOLLOW) == 0  # nothing was written outside the rolled-back block
    assert done.status == jl.JobStatus.COMPLETED
    assert [tuple(r) for r in db_rows(db, "SELECT n, attempt FROM ledger")] == [(1, 1)]
    assert [a.outcome for a in jobs.attempts(done.id)] == ["retry", "completed"]


def _deferred_foreign_key(jobs: jl.JobManager) -> None:
    """`child.parent_id` checked only at COMMIT: a block that inserts an orphan child
    makes its group's COMMIT itself fail (a real SQLite refusal)."""
    with jobs.write_tx() as tx:
        tx.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        tx.execute(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER "
            "REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
        )


def _assert_the_group_failed_whole(
    db: str,
    jobs: jl.JobManager,
    done: list[jl.JobSnapshot],
    attempts: dict[int, list[int]],
    *,
    moved: int,
) -> None:
    """A block's own SQL moved job `moved`'s row inside the group: the flush's fenced
    finalize caught it, the whole group was rolled back and every job of it retried
    once, each landing once; the kept counts stay exact."""
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == list(range(len(done)))
    assert all(t == [0, 1] for t in attempts.values()), attempts
    first = jobs.attempts(done[moved].id)[0]
    assert first.outcome == "retry"
    assert first.error is not None
    assert "changed inside the group" in first.error.message
    _assert_exact(db)


def test_a_commit_that_fails_fails_every_block_of_it(db_path: str) -> None:
    """A deferred foreign key makes COMMIT itself fail (a real SQLite refusal): the
    blocks that shared it are all rolled back and retried; none is half-written. A group
    commit is SQLite's."""
    db = db_path
    jobs = _setup(db)
    _deferred_foreign_key(jobs)
    sql = _insert(db)
    attempts: dict[int, list[int]] = {}
    release = asyncio.Event()

    @jobs.handler(ENTRY, recovery="retry", concurrency=10, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        attempts.setdefault(ctx.payload.n, []).append(ctx.attempt)
        await release.wait()  # all ten reach their block in the same turn
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
            if ctx.payload.n == 3 and ctx.attempt == 0:
                tx.execute("INSERT INTO child (id, parent_id) VALUES (1, 999)")

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(10)])

    done = _all_released_at_once(jobs, handles, release)
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == list(range(10))
    assert db_rows(db, "SELECT count(*) FROM child") == [(0,)]
    assert all(t == [0, 1] for t in attempts.values()), attempts  # the whole group retried
    first = jobs.attempts(done[3].id)[0]
    assert first.outcome == "retry"
    assert first.error is not None
    assert "DB_WRITE_TX_FAILED" in first.error.message
    assert "FOREIGN KEY constraint failed" in first.error.message


def test_a_sync_write_between_blocks_flushes_the_group_first(db: str) -> None:
    """A `with jobs.write_tx()` on the loop while blocks wait for their commit commits
    them first: what it reads in its transaction is what another connection reads."""
    jobs = _setup(db)
    sql = _insert(db)
    seen: list[Any] = []

    @jobs.handler(ENTRY, recovery="retry", concurrency=5)
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
        if ctx.payload.n == 4:
            with jobs.write_tx() as tx:
                in_tx = tx.execute("SELECT count(*) FROM ledger").fetchone()[0]
                seen.append((in_tx, db_rows(db, "SELECT count(*) FROM ledger")[0][0]))

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(5)])

    async def main() -> None:
        async with jobs:
            await asyncio.gather(*(h.finished for h in handles))

    run(main())
    assert _ledger(db) == list(range(5))
    [(in_tx, committed)] = seen
    assert in_tx >= 1
    assert in_tx == committed


def test_a_lost_claim_in_a_group_rolls_back_alone_and_its_neighbours_commit(
    db_path: str,
) -> None:
    """The fence is read inside the block, under the write lock the group holds until its
    commit, and the group's finalizes are written at that commit: a block whose row was
    taken from it (here by another connection, as a rescuer's re-claim would, so no token
    fires) raises JobClaimLost with nothing of it written, while the blocks it shares the
    commit with land, and the kept counts stay exact. SQLite's group only."""
    db = db_path
    jobs = _setup(db)
    sql = _insert(db)
    release = asyncio.Event()
    lost: list[tuple[int, str]] = []
    after: dict[int, str | None] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=10)
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        await release.wait()  # all ten reach their block in the same turn
        try:
            async with ctx.transaction() as tx:
                tx.execute(sql, (ctx.payload.n, ctx.attempt))
                jobs.enqueue_tx(tx, FOLLOW, Entry(n=ctx.payload.n))
                tx.set_output({"n": ctx.payload.n})
        except jl.JobClaimLost as exc:
            lost.append((ctx.payload.n, exc.code))
            raise
        snap = jobs.get(ctx.job_id)
        after[ctx.payload.n] = None if snap is None else str(snap.status)

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(10)])
    sizes: list[int] = []

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            while jobs.count(type=ENTRY, status="running") < 10:
                await asyncio.sleep(0.01)
            # Job 3 is re-claimed elsewhere: a new attempt by another worker.
            db_rows(
                db,
                "UPDATE jobs SET worker_id = 'elsewhere:1', attempt = attempt + 1 WHERE id = ?",
                (handles[3].id,),
            )
            _trace_groups(jobs._store.conn, sizes)  # type: ignore[attr-defined]
            release.set()
            others = [h for i, h in enumerate(handles) if i != 3]
            done = list(await asyncio.gather(*(h.finished for h in others)))
            while jobs.count(type=FOLLOW, status="completed") < 9:
                await asyncio.sleep(0.01)
            return done

    done = run(main())
    assert lost == [(3, "JOB_CLAIM_LOST")]
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert sorted(s.output["n"] for s in done) == [i for i in range(10) if i != 3]
    assert after == {i: "completed" for i in range(10) if i != 3}
    assert _ledger(db) == [i for i in range(10) if i != 3]  # nothing of job 3's block
    assert jobs.count(type=FOLLOW) == 9
    assert db_rows(db, "SELECT status, worker_id FROM jobs WHERE id = ?", (handles[3].id,)) == [
        ("running", "elsewhere:1")  # the rescuer's row, untouched
    ]
    assert sum(sizes) == 10
    assert max(sizes) > 1, sizes  # job 3's block shared a commit with kept ones
    _assert_exact(db)


def test_a_block_that_moves_another_blocks_row_fails_the_whole_group(db_path: str) -> None:
    """The one way a kept block's finalize can still miss its fence at the commit: a
    later block of the same group changes that job's row with its own SQL. The group is
    rolled back whole (nothing of any of its blocks lands) and each job takes its
    failure path; the retries commit. SQLite's group only."""
    db = db_path
    jobs = _setup(db)
    sql = _insert(db)
    release = asyncio.Event()
    attempts: dict[int, list[int]] = {}
    ids: dict[int, str] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=10, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        attempts.setdefault(ctx.payload.n, []).append(ctx.attempt)
        await release.wait()  # all ten reach their block in the same turn
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
            if ctx.payload.n == 9 and ctx.attempt == 0:
                # After job 0's block was kept (blocks run in claim order).
                tx.execute("UPDATE jobs SET worker_id = 'moved' WHERE id = ?", (ids[0],))

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(10)])
    ids.update((i, h.id) for i, h in enumerate(handles))

    done = _all_released_at_once(jobs, handles, release)
    _assert_the_group_failed_whole(db, jobs, done, attempts, moved=0)


def test_a_large_group_with_failing_blocks_keeps_each_blocks_promise(db_path: str) -> None:
    """150 blocks in one commit, every seventh of them failing: each failing one rolls
    back alone (its savepoint), the others and their finalizes (written at the commit,
    in chunks of 50) land once each, and the kept counts stay exact. SQLite's group
    only."""
    db = db_path
    jobs = _setup(db, concurrency=150)
    sql = _insert(db)
    release = asyncio.Event()
    tries: dict[int, list[int]] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=150, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        tries.setdefault(ctx.payload.n, []).append(ctx.attempt)
        await release.wait()  # all of them reach their block in the same turn
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
            jobs.enqueue_tx(tx, FOLLOW, Entry(n=ctx.payload.n))
            if ctx.payload.n % 7 == 0 and ctx.attempt == 0:
                raise RuntimeError("declined")

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(150)])
    sizes: list[int] = []

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            while jobs.count(type=ENTRY, status="running") < 150:
                await asyncio.sleep(0.01)
            _trace_groups(jobs._store.conn, sizes)  # type: ignore[attr-defined]
            release.set()
            return list(await asyncio.gather(*(h.finished for h in handles)))

    done = run(main())
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == list(range(150))  # each row once: the failed tries left none
    assert jobs.count(type=FOLLOW) == 150
    assert {n: t for n, t in tries.items() if len(t) > 1} == {n: [0, 1] for n in range(0, 150, 7)}
    assert max(sizes) > 100, sizes  # most blocks shared one commit
    _assert_exact(db)


_FENCE_READ = "SELECT 1 FROM jobs WHERE rowid"


def _count_fence_reads(conn: sqlite3.Connection, blocks: list[int], reads: list[int]) -> None:
    """Count, on the writer connection, the blocks opened and the fence point reads."""

    def trace(sql: str) -> None:
        if sql.startswith("SAVEPOINT jobledger_block"):
            blocks[0] += 1
        elif sql.startswith(_FENCE_READ):
            reads[0] += 1

    conn.set_trace_callback(trace)


def _warm_up(jobs: jl.JobManager) -> Any:
    """A job whose block commits a group, so the writer's data_version has been read
    (`WriterLock.version`) before the jobs claimed after it: their claims carry a mark.
    Returns the coroutine that runs it to its end."""

    async def go() -> None:
        snap = await jobs.enqueue(WARM, Entry(n=-1)).finished
        assert snap.status == jl.JobStatus.COMPLETED

    return go()


WARM = jl.JobType("gc.warm", Entry)


def _warm_handler(jobs: jl.JobManager) -> None:
    @jobs.handler(WARM, recovery="retry")
    async def warm(ctx: jl.JobContext[Entry]) -> None:
        async with ctx.transaction():
            pass


def test_claims_made_since_a_group_prove_their_fences_without_reading(db_path: str) -> None:
    """With no other connection writing and no write of this one but claims and
    finalizes, a job claimed after a group read the writer's data_version proves its
    fence by its claim's mark: its block reads no row (`group.py`). Every block still
    completes once. SQLite's group only."""
    db = db_path
    jobs = _setup(db)
    _warm_handler(jobs)
    sql = _insert(db)

    @jobs.handler(ENTRY, recovery="retry", concurrency=50)
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))

    blocks, reads = [0], [0]

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            await _warm_up(jobs)
            _count_fence_reads(jobs._store.conn, blocks, reads)  # type: ignore[attr-defined]
            handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(200)])
            return list(await asyncio.gather(*(h.finished for h in handles)))

    done = run(main())
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == list(range(200))
    assert blocks[0] == 200
    # A write of another kind (the heartbeat's) may land between a claim and its block,
    # and those blocks read; most claims are made between groups, with nothing between.
    assert reads[0] < blocks[0] // 2, (reads, blocks)
    _assert_exact(db)


def test_a_row_moved_by_this_processs_own_connection_is_still_caught(db_path: str) -> None:
    """The claim's mark proves nothing once this process's writer connection made a
    write that may move rows (here `jobs.write_tx()`, on the same connection, so the
    writer's data_version does not change): the block reads its row, finds it taken,
    raises JobClaimLost and is rolled back alone, while its neighbours commit. SQLite's
    group only."""
    db = db_path
    jobs = _setup(db)
    _warm_handler(jobs)
    sql = _insert(db)
    release = asyncio.Event()
    lost: list[int] = []

    @jobs.handler(ENTRY, recovery="retry", concurrency=10)
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        await release.wait()  # all ten reach their block in the same turn
        try:
            async with ctx.transaction() as tx:
                tx.execute(sql, (ctx.payload.n, ctx.attempt))
        except jl.JobClaimLost:
            lost.append(ctx.payload.n)
            raise

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            await _warm_up(jobs)
            handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(10)])
            while jobs.count(type=ENTRY, status="running") < 10:
                await asyncio.sleep(0.01)
            with jobs.write_tx() as tx:  # the manager's own writer connection
                tx.execute(
                    "UPDATE jobs SET worker_id = 'elsewhere:1', attempt = attempt + 1 WHERE id = ?",
                    (handles[3].id,),
                )
            release.set()
            others = [h for i, h in enumerate(handles) if i != 3]
            done = list(await asyncio.gather(*(h.finished for h in others)))
            rows = db_rows(db, "SELECT status, worker_id FROM jobs WHERE id = ?", (handles[3].id,))
            assert rows == [("running", "elsewhere:1")]  # the other owner's row, untouched
            return done

    done = run(main())
    assert lost == [3]
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == [i for i in range(10) if i != 3]  # nothing of job 3's block
    _assert_exact(db)


def test_a_block_that_moves_its_own_proven_row_fails_the_whole_group(db_path: str) -> None:
    """A block whose fence its claim's mark proved, and whose own SQL then moves its own
    job's row: the read that would have failed it alone is not made, and the group's
    finalize, which still checks every fence, fails the whole group (nothing of it
    lands); the retries commit. SQLite's group only."""
    db = db_path
    jobs = _setup(db)
    _warm_handler(jobs)
    sql = _insert(db)
    release = asyncio.Event()
    attempts: dict[int, list[int]] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=10, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        attempts.setdefault(ctx.payload.n, []).append(ctx.attempt)
        await release.wait()  # all ten reach their block in the same turn
        async with ctx.transaction() as tx:
            tx.execute(sql, (ctx.payload.n, ctx.attempt))
            if ctx.payload.n == 5 and ctx.attempt == 0:
                tx.execute("UPDATE jobs SET worker_id = 'moved' WHERE id = ?", (ctx.job_id,))

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            await _warm_up(jobs)
            handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(10)])
            while jobs.count(type=ENTRY, status="running") < 10:
                await asyncio.sleep(0.01)
            release.set()
            return list(await asyncio.gather(*(h.finished for h in handles)))

    done = run(main())
    _assert_the_group_failed_whole(db, jobs, done, attempts, moved=5)


def test_blocks_wait_their_turn_and_a_cancelled_waiter_gives_its_place_up(
    db_path: str,
) -> None:
    """One block at a time, in the order they asked: while job 0's block holds the turn
    (it awaits inside, so it is spoiled and retried), jobs 1 and 2 wait for it; job 1 is
    cancelled while waiting, writes nothing and ends cancelled, and job 2 gets the turn
    when job 0's block ends. SQLite's group only."""
    db = db_path
    jobs = _setup(db)
    sql = _insert(db)
    inside = asyncio.Event()
    leave = asyncio.Event()
    waiting: list[int] = []

    @jobs.handler(ENTRY, recovery="retry", concurrency=3, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        n = ctx.payload.n
        if n == 0 and ctx.attempt == 0:
            async with ctx.transaction() as tx:
                tx.execute(sql, (n, ctx.attempt))
                inside.set()
                await leave.wait()  # holds the turn across turns of the loop
            return
        if n != 0:
            await inside.wait()
            waiting.append(n)  # the next statement asks for the turn, in this same step
        async with ctx.transaction() as tx:
            tx.execute(sql, (n, ctx.attempt))

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(3)])
            while len(waiting) < 2:
                await asyncio.sleep(0.01)
            await jobs.cancel(handles[1].id)
            leave.set()
            return list(await asyncio.gather(*(h.finished for h in handles)))

    done = run(main())
    assert [s.status for s in done] == [
        jl.JobStatus.COMPLETED,
        jl.JobStatus.CANCELLED,
        jl.JobStatus.COMPLETED,
    ]
    assert [a.outcome for a in jobs.attempts(done[0].id)] == ["retry", "completed"]
    assert _ledger(db) == [0, 2]  # nothing of the cancelled waiter's
    _assert_exact(db)


_Ts = TypeVarTuple("_Ts")


class _LateCommits(asyncio.SelectorEventLoop):
    """A loop that runs a group's commit (`GroupCommitter._tick`) a few milliseconds
    after it was queued, where asyncio runs it before the blocks' tasks resume: a loop
    free to order its callbacks otherwise."""

    def call_soon(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.Handle:
        if getattr(callback, "__name__", "") == "_tick":
            return self.call_later(0.005, callback, *args, context=context)
        return super().call_soon(callback, *args, context=context)


def test_a_block_returns_after_its_commit_on_a_loop_that_runs_the_commit_late(
    db_path: str,
) -> None:
    """A block's task resumes before its group's commit ran: its `async with` still
    returns only once that commit is over (a reader sees the job completed and its row),
    and a commit that fails still fails every block of it. SQLite's group only."""
    db = db_path
    jobs = _setup(db)
    _deferred_foreign_key(jobs)
    sql = _insert(db)
    after: dict[int, list[tuple[str | None, int]]] = {}

    @jobs.handler(ENTRY, recovery="retry", concurrency=20, retry=fast_retry(3))
    async def entry(ctx: jl.JobContext[Entry]) -> None:
        n = ctx.payload.n
        async with ctx.transaction() as tx:
            tx.execute(sql, (n, ctx.attempt))
            if n == 7 and ctx.attempt == 0:  # COMMIT refuses it: its group fails whole
                tx.execute("INSERT INTO child (id, parent_id) VALUES (1, 999)")
        snap = jobs.get(ctx.job_id)
        rows = db_rows(db, f"SELECT count(*) FROM ledger WHERE n = {n}")
        after.setdefault(n, []).append((None if snap is None else str(snap.status), rows[0][0]))

    handles = jobs.enqueue_many(ENTRY, [Entry(n=i) for i in range(40)])

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            return list(await asyncio.gather(*(h.finished for h in handles)))

    with asyncio.Runner(loop_factory=_LateCommits) as runner:
        done = runner.run(asyncio.wait_for(main(), 30))
    assert {s.status for s in done} == {jl.JobStatus.COMPLETED}
    assert _ledger(db) == list(range(40))
    # Code after each block ran once, after its commit (a failed commit raised instead).
    assert after == {n: [("completed", 1)] for n in range(40)}
    assert [a.outcome for a in jobs.attempts(done[7].id)] == ["retry", "completed"]
    _assert_exact(db)
