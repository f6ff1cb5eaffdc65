"""Write transactions a caller drives: `jobs.write_tx()` (`WriteTx`) and a handler's
`ctx.transaction()` (`JobTransaction`, DESIGN.md §8.13).

Invariants of `ctx.transaction()` (`Attempt.transaction` runs it):

* One commit holds the caller's statements, the rows its `enqueue_tx` calls wrote and
  the job's own transition to `completed` (with `set_output`'s value, default None),
  written by the same statements as any finalize (`Store.finalize_in`; in a group, the
  group's batched finalize at its commit), fenced on the attempt's `(worker_id,
  attempt)`. If this attempt no longer owns the row, or its token
  fired (a cancel, a timeout, a shutdown) before the commit, everything rolls back and
  `JobClaimLost` is raised: a stale worker's effects never land beside the rescuer's.
* An exception inside the block rolls everything back and leaves the handler by the
  ordinary failure path (retry or fail, by the handler's policy).
* One transaction per attempt: a second is `JOB_INVALID_OPTION`, before anything opens.
* After the commit the attempt is done: the engine settles it from what the commit
  answered (the row, read back only when something here wants it; else APPLIED)
  without writing again (`Engine._flush`); what the handler returns is ignored.

`async with ctx.transaction()` keeps every promise above and, on SQLite, shares its
commit with the other blocks that end in the same turn of the event loop
(`_storage/sqlite/group.py`, driven by `GroupCommitter`): each block is a savepoint of
one writer transaction, and its `async with` returns only after that transaction
committed, so code after the block still runs after its effects are durable. The block
checks its fence under the write lock the group holds until its commit, so the answer
stands: by its claim's mark when nothing wrote since the claim, else by a point read
(`group.py`); the commit writes the group's finalizes in one batched statement, as the
engine's finalize does. A commit
that fails fails every block of it (nothing of theirs landed; their handlers take the
failure path). Blocks of one loop run one at a time, first come first served
(`GroupCommitter.take`/`acquire`, asyncio.Lock's rule); awaiting inside
one holds the others back, and if the engine writes meanwhile the block is rolled back
and fails with JOB_TRANSACTION_SPOILED (nothing of it is committed). On PostgreSQL,
whose transactions do not share one writer, a block commits on its own, as `with` does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from jobledger._storage.interface import APPLIED, GroupCommit, Outcome, Store
from jobledger.errors import JobError, StorageError

__all__ = ["COMMITTED", "TURN", "GroupCommitter", "JobTransaction", "WriteTx", "spoiled_error"]

_UNSET: Any = object()

# `JobTransaction._result` of a block whose group committed.
COMMITTED: Any = True


class _Turn:
    """`await TURN` gives the loop one turn, as `asyncio.sleep(0)` does, without its
    frames: a bare yield, so the task's next step is queued behind every callback
    queued before it (a group's commit, `GroupCommitter.end`)."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


TURN = _Turn()


class WriteTx:
    """An open write transaction on the job database (`with jobs.write_tx() as tx:`)."""

    __slots__ = ("_after_commit", "_open", "_store", "conn")

    def __init__(self, conn: Any, store: Store | None = None) -> None:
        self.conn = conn
        self._after_commit: list[Callable[[], None]] = []
        # Which manager's transaction this is, and whether it is still open: a row
        # written through another manager's tx lands in the other database, and one
        # written after the commit is committed on its own (autocommit).
        self._store = store
        self._open = True

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self.conn.executemany(sql, rows)

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after_commit.append(fn)


class JobTransaction(WriteTx):
    """`ctx.transaction()`'s transaction: a `WriteTx` whose commit also completes the job.

    Use `jobs.enqueue_tx(tx, ...)` for follow-up jobs and `tx.set_output(value)` for the
    job's output (validated as a returned value would be, at the commit)."""

    __slots__ = ("_attempt", "_result", "_waiter", "output", "spoiled")

    def __init__(self, conn: Any, store: Store, attempt: Any = None) -> None:
        # `WriteTx.__init__`'s fields set here, not through it: one call fewer a block.
        self.conn = conn
        self._after_commit: list[Callable[[], None]] = []
        self._store = store
        self._open = True
        self.output: Any = None
        self.spoiled = False
        # In a group (`GroupCommitter`): the attempt it completes; once its commit is
        # over, `_result` is COMMITTED or the error that failed it (None until then);
        # `_waiter`, a future made only if the block's task got its turn before that.
        self._attempt = attempt
        self._result: Any = None
        self._waiter: asyncio.Future[None] | None = None

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        if self.spoiled:
            raise spoiled_error()
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        if self.spoiled:
            raise spoiled_error()
        return self.conn.executemany(sql, rows)

    def set_output(self, value: Any) -> None:
        """The job's output, stored by the commit (default None)."""
        self.output = value


def spoiled_error() -> JobError:
    return JobError(
        "this ctx.transaction() block was rolled back: its handler awaited inside it "
        "while the worker wrote to the database; nothing of it was committed (keep "
        "awaits out of the block)",
        code="JOB_TRANSACTION_SPOILED",
    )


class GroupCommitter:
    """The async blocks of one event loop and the store's `GroupTx` they share.

    `take()` or `acquire()` gives the next block its turn (one at a time), `begin()`
    its savepoint of the group; `end()` releases it, and a kept block is written by the
    commit that runs at the end of this turn of the loop (`call_soon`), or earlier when
    anything else writes; that commit sets the block's `_result` (`_flushed`)."""

    __slots__ = ("_held", "_loop", "_scheduled", "_waiting", "current", "group")

    def __init__(
        self, group: GroupCommit, loop: asyncio.AbstractEventLoop, now_ms: Callable[[], int]
    ) -> None:
        self.group = group
        self._loop = loop
        # One block at a time, in the order they asked (asyncio.Lock's rule): `_held`
        # while a block has the turn; the futures of those waiting for it, first first.
        self._held = False
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._scheduled = False
        self.current: JobTransaction | None = None
        group.on_flushed = self._flushed
        group.spoil = self._spoil
        group.now_ms = now_ms

    async def acquire(self) -> None:
        """Wait for the block's turn (`take` said to)."""
        waiter = self._loop.create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if not waiter.cancelled():  # the turn was handed over first: pass it on
                self._release()
            raise

    def take(self) -> bool:
        """Whether the turn is the caller's now, without waiting (the common case: no
        block holds it); else the caller awaits `acquire()`."""
        if self._held or self._waiting:
            return False
        self._held = True
        return True

    def _release(self) -> None:
        """The turn passes to the first block still waiting, or is free."""
        waiting = self._waiting
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():  # a cancelled one gave up its place
                waiter.set_result(None)  # `_held` stays: the turn is that block's
                return
        self._held = False

    def begin(self) -> Any:
        try:
            return self.group.begin_block()
        except BaseException:
            self._release()
            raise

    def end(
        self, keep: bool, tx: JobTransaction | None = None, outcome: Outcome | None = None
    ) -> bool:
        """Close the current block; whether it was kept (asked to, and not spoiled). A
        kept block's `outcome` (its fence checked, `GroupCommit.fence_holds`) is written
        by the commit, which sets `tx._result` and `tx._attempt.committed` (`_flushed`)."""
        current, self.current = self.current, None
        if current is not None and current.spoiled:
            keep = False
        try:
            kept = self.group.end_block(keep, outcome, tx)
        finally:
            if self._waiting:
                self._release()
            else:
                self._held = False
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._tick)
        return kept

    async def committed(self, tx: JobTransaction) -> None:
        """Return once the kept block's commit is over; raise what failed it. `end`
        queued the commit before the block's task gives the loop its turn (`TURN`), so
        on a loop that runs callbacks in order it is over when that task resumes, and
        the caller needs this only when `tx._result` is not COMMITTED."""
        if tx._result is None:  # a loop that did not run the commit first: wait for it
            waiter = tx._waiter = self._loop.create_future()
            await waiter
        if tx._result is not COMMITTED:
            raise tx._result

    def _tick(self) -> None:
        # Every turn of the loop ends committed: a block still open here awaited inside
        # itself, and is rolled back and spoiled by the flush.
        self._scheduled = False
        self.group.flush()

    def _spoil(self) -> None:
        if self.current is not None:
            self.current.spoiled = True
            self.current._open = False

    def _flushed(self, error: BaseException | None, waiters: list[Any], rows: list[Any]) -> None:
        if error is None:
            for tx, row in zip(waiters, rows, strict=True):
                if row is not APPLIED:  # read back for a waiter: the settling hands it on
                    attempt = tx._attempt
                    attempt.committed = (attempt.committed[0], row)
                tx._result = COMMITTED
                if tx._waiter is not None:
                    _wake(tx._waiter)
            return
        failure = error
        if not isinstance(error, JobError):
            failure = StorageError(f"ctx.transaction (group commit): {error!r}")
        for tx in waiters:
            tx._attempt.committed = None
            tx._result = failure
            if tx._waiter is not None:
                _wake(tx._waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # its task may have been cancelled meanwhile
        waiter.set_result(None)
