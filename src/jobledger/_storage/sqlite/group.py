"""Group commit on SQLite: transaction blocks of one thread sharing one commit.

`async with ctx.transaction()` (DESIGN.md §8.13) on SQLite runs each block inside a
SAVEPOINT of one writer transaction that stays open until the end of the event loop's
turn, so the blocks of many handlers that finish together cost one BEGIN IMMEDIATE and
one COMMIT (the WAL pages of the job rows, their indexes and the caller's rows written
once), not one each. `_runtime/transactions.py` drives it and awaits the commit before
a block's `async with` returns, so leaving the block still means "committed".

Invariants:

* The group belongs to the thread that opened it (the event loop's). While it is open
  it holds one count of the store's writer lock (`WriterLock`): other threads wait for
  the commit, as for any write transaction.
* Any other use of the writer connection from the owning thread (the engine's claims
  and finalizes, a `jobs.write_tx()`, a sync `ctx.transaction()`) enters the lock and
  first commits what the group holds (`flush`). So every write outside the group
  commits on its own, as it always did, and nothing the engine acts on is left
  uncommitted behind a group.
* One block at a time: its statements are one savepoint, released into the group (kept)
  or rolled back to (a failed block, a lost claim) at the block's end. A flush that
  finds a block still open (its handler awaited inside it and something else wrote
  meanwhile) rolls that block back and marks it spoiled (`spoil`): its handler learns it
  at its next statement or at the block's end; nothing of it is committed.
* The fence is checked inside the block, the finalize written at the commit. A block
  is kept only once `fence_holds` found its job's row still this attempt's (FINISH's
  fence) under the write lock the group holds from its BEGIN IMMEDIATE to its COMMIT:
  no other connection can write meanwhile, and every other write of this connection
  flushes the group first, so the row cannot change before the commit. `flush` then
  writes the kept blocks' finalizes as the plain path does (`finalize_work`: up to 50
  in one statement) and commits. A finalize that still misses its fence there (only a
  block's own SQL on `jobs` can do that) fails the whole group: rolled back, nothing of
  it lands, as for a failed COMMIT.
* `fence_holds` proves the fence without reading the row when nothing can have moved
  it since the claim (`WriterLock.mark`, taken by the store before the claim's
  transaction): the writer connection's `PRAGMA data_version`, read by the group once
  at its BEGIN IMMEDIATE, is the one the mark saw, so no other connection committed
  since (SQLite changes it on every commit of another connection); and the lock's
  `epoch` is the mark's, so this connection wrote nothing since but the engine's claims
  and finalizes (`SqliteStore.write` moves the epoch for every other write, as do
  `write_statement`, `user_transaction` and a reopened connection, whose
  data_version counts afresh), which never move a row an attempt still runs: a claim
  takes only waiting rows, a finalize only the rows of attempts that ended. Otherwise
  it reads the row (a point read by rowid). Epochs are drawn from one process-wide
  counter, so no two locks or reopenings share one. A block's own SQL that moves its
  own job's row is then caught by the flush's finalize, failing the whole group, not
  by the read, which would fail the block alone.
* A failed COMMIT (or finalize) rolls the whole group back (nothing of it lands) and
  hands the error to every block that was waiting for it (`on_flushed`); a successful
  one hands each waiter its job's row.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from jobledger._storage import tx
from jobledger._storage.interface import JobRow, Outcome
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.keys import key_of
from jobledger.errors import StorageError

__all__ = ["EPOCHS", "GroupTx", "WriterLock"]

_SAVEPOINT = "SAVEPOINT jobledger_block"
_RELEASE = "RELEASE jobledger_block"
_ROLLBACK_TO = "ROLLBACK TO jobledger_block"
_DATA_VERSION = "PRAGMA data_version"

# `finalize_work(conn, outcomes, now_ms)`: the store's finalize statements, one row (or
# None where the fence missed) per outcome.
FinalizeWork = Callable[[sqlite3.Connection, list[Outcome], int], list[JobRow | None]]
# What `on_flushed` gets: the error (None: committed), the kept blocks' waiters and their
# jobs' rows, in the same order (None each when the commit failed).
Flushed = Callable[[BaseException | None, list[Any], list[JobRow | None]], None]


# Every WriterLock's epochs, drawn from one counter: a value names one stretch of one
# connection's life (no other lock, and no reopened connection, ever has it).
EPOCHS = itertools.count()

# What a claim's mark is: (data_version, epoch), see `WriterLock.mark`.
Mark = tuple[int, int]


class WriterLock:
    """The writer connection's RLock; entering it from the thread that holds an open
    group first commits the group (see the module's invariants).

    It also keeps what `fence_holds` proves a fence by: `version`, the writer
    connection's `PRAGMA data_version` last read by a group (None: not read since the
    connection opened), and `epoch`, moved (`disturb`) by every write of this connection
    that may move a running row."""

    __slots__ = ("_lock", "epoch", "group", "version")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.group: GroupTx | None = None
        self.version: int | None = None
        self.epoch = next(EPOCHS)

    def disturb(self) -> None:
        """A write that may move a running row (anything but a claim or a finalize), or
        a new connection: no mark taken before it proves a fence any more."""
        self.epoch = next(EPOCHS)

    def mark(self) -> Mark | None:
        """Taken before a claim's transaction: what `fence_holds` needs to find unchanged
        for the claimed rows (None: nothing to compare with yet)."""
        version = self.version
        return None if version is None else (version, self.epoch)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> WriterLock:
        self._lock.acquire()
        group = self.group
        if (
            group is not None
            and group.active
            and not group.busy
            and group.owner == threading.get_ident()
        ):
            group.flush()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()


class GroupTx:
    """One store's group of transaction blocks (made by `SqliteStore.group_tx`)."""

    __slots__ = (
        "_conn",
        "_conn_of",
        "_cursor",
        "_finalize",
        "_lock",
        "_outcomes",
        "_tx",
        "_version",
        "_waiters",
        "active",
        "busy",
        "in_block",
        "now_ms",
        "on_flushed",
        "owner",
        "spoil",
    )

    def __init__(
        self,
        lock: WriterLock,
        conn_of: Callable[[], sqlite3.Connection],
        finalize_work: FinalizeWork,
    ) -> None:
        self._lock = lock
        self._conn_of = conn_of
        self._finalize = finalize_work
        self._tx: tx.write_transaction | None = None
        # The writer connection while the group is open: it holds the lock, so the store
        # cannot close or reopen it meanwhile.
        self._conn: sqlite3.Connection | None = None
        # The group's own statements (a block's SAVEPOINT and RELEASE) go through one
        # cursor, not a new one each (`Connection.execute` makes one per call).
        self._cursor: sqlite3.Cursor | None = None
        self._version = -1  # the open group's data_version, read at its BEGIN
        # The kept blocks' finalizes and their waiters (the same order), written by the
        # flush.
        self._outcomes: list[Outcome] = []
        self._waiters: list[Any] = []
        self.active = False
        self.busy = False  # the group's own statements: entering the lock must not flush
        self.in_block = False
        self.owner: int | None = None
        # Set by the runtime: called after every commit or failed commit (`Flushed`),
        # and when an open block is rolled back by a flush.
        self.on_flushed: Flushed | None = None
        self.spoil: Callable[[], None] | None = None
        # The time the flush's finalizes write (epoch ms), read once per commit, as the
        # engine's finalize reads it once per batch.
        self.now_ms: Callable[[], int] = _now_ms

    def begin_block(self) -> sqlite3.Connection:
        """Open the group if it is not (BEGIN IMMEDIATE, the lock held), then a
        savepoint for one block; returns the connection its statements go to."""
        if self.in_block:
            raise RuntimeError("a transaction block is already open in this group")
        conn = self._conn
        cursor = self._cursor
        if conn is None or cursor is None:
            conn = self._open()
            cursor = self._cursor = conn.cursor()
        cursor.execute(_SAVEPOINT)
        self.in_block = True
        return conn

    def _open(self) -> sqlite3.Connection:
        """BEGIN IMMEDIATE, with one count of the lock held until the flush."""
        self.busy = True
        try:
            with self._lock:  # flushes nothing: busy is set
                conn = self._conn_of()
                self._lock.acquire()  # the group's own count, held until the flush
                try:
                    wtx = tx.write_transaction(conn, "ctx.transaction")
                    wtx.__enter__()
                    try:
                        version = int(conn.execute(_DATA_VERSION).fetchone()[0])
                    except BaseException as exc:
                        wtx.__exit__(type(exc), exc, exc.__traceback__)
                        raise
                except BaseException:
                    self._lock.release()
                    raise
                self._version = self._lock.version = version
            self._tx = wtx
            self._conn = conn
            self.active = True
            self.owner = threading.get_ident()
            return conn
        finally:
            self.busy = False

    def fence_holds(self, outcome: Outcome, mark: Mark | None = None) -> bool:
        """Whether the open block's job is still this attempt's (FINISH's fence), under
        the group's write lock: what the flush's finalize will find. Proven by `mark`
        (the claim's, `WriterLock.mark`) when nothing wrote since, else read."""
        if not self.in_block:
            return False
        if mark is not None and mark[0] == self._version and mark[1] == self._lock.epoch:
            return True
        conn = self._conn_of()
        claimed = outcome.claimed
        key = (
            key_of(conn, outcome.job_id) if claimed is None or claimed.key is None else claimed.key
        )
        fence = (key, outcome.job_id, outcome.worker_id, outcome.attempt)
        return conn.execute(q.FENCE_HOLDS, fence).fetchone() is not None

    def end_block(self, keep: bool, outcome: Outcome | None = None, waiter: Any = None) -> bool:
        """Release the block's savepoint into the group, or roll it back. A kept block's
        `outcome` (its fence checked by `fence_holds`) is finalized by the flush, which
        hands `waiter` its row. Whether the block was kept."""
        cursor = self._cursor
        if not self.in_block or cursor is None:
            return False  # a flush rolled it back already (it was spoiled)
        try:
            if not keep:
                cursor.execute(_ROLLBACK_TO)
            cursor.execute(_RELEASE)
        finally:
            self.in_block = False
        if keep and outcome is not None:
            self._outcomes.append(outcome)
            self._waiters.append(waiter)
        return keep

    def flush(self) -> None:
        """Write the kept blocks' finalizes and commit the group (a block still open is
        rolled back first and spoiled)."""
        if not self.active:
            return
        self.busy = True
        error: BaseException | None = None
        outcomes, self._outcomes = self._outcomes, []
        waiters, self._waiters = self._waiters, []
        rows: list[JobRow | None] = [None] * len(outcomes)
        try:
            if self.in_block:
                self.end_block(keep=False)
                if self.spoil is not None:
                    self.spoil()
            wtx, self._tx = self._tx, None
            assert wtx is not None
            try:
                if outcomes:
                    rows = self._finalize(self._conn_of(), outcomes, self.now_ms())
                    if None in rows:  # rows are tuples or APPLIED: no other == None
                        raise _fence_moved(outcomes, rows)
            except BaseException as exc:
                rows = [None] * len(outcomes)
                wtx.__exit__(type(exc), exc, exc.__traceback__)  # rolls the group back
                error = exc
                if isinstance(exc, sqlite3.Error):
                    error = tx.storage_error(exc, "ctx.transaction (group commit)")
            else:
                try:
                    wtx.__exit__(None, None, None)
                except sqlite3.Error as exc:  # the commit failed: the group was rolled back
                    rows = [None] * len(outcomes)
                    error = tx.storage_error(exc, "ctx.transaction (group commit)")
                except BaseException as exc:
                    rows = [None] * len(outcomes)
                    error = exc
        finally:
            self.active = False
            self._conn = self._cursor = None
            self.owner = None
            self.busy = False
            self._lock.release()
        callback = self.on_flushed
        if callback is not None:
            callback(error, waiters, rows)

    def __repr__(self) -> str:
        state: Any = "open" if self.active else "idle"
        return f"GroupTx({state}, in_block={self.in_block})"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _fence_moved(outcomes: list[Outcome], rows: list[JobRow | None]) -> StorageError:
    """The error of a group whose finalize missed a fence `fence_holds` had seen hold:
    a block's own statements changed a job row of the group (nothing else can)."""
    missed = [o.job_id for o, r in zip(outcomes, rows, strict=True) if r is None]
    return StorageError(
        "ctx.transaction (group commit): the row of job(s) "
        f"{', '.join(missed)} changed inside the group after its block checked the fence "
        "(a block's own SQL on the jobs table); the whole group was rolled back"
    )
