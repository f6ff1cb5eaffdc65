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
* One block at a time: its statements, its fenced finalize and its outcome are one
  savepoint, released into the group (kept) or rolled back to (a failed block, a lost
  claim) at the block's end. A flush that finds a block still open (its handler awaited
  inside it and something else wrote meanwhile) rolls that block back and marks it
  spoiled (`spoil`): its handler learns it at its next statement or at the block's end;
  nothing of it is committed.
* A failed COMMIT rolls the whole group back (nothing of it lands) and hands the error
  to every block that was waiting for it (`on_flushed`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from jobledger._storage import tx

__all__ = ["GroupTx", "WriterLock"]

_SAVEPOINT = "jobledger_block"


class WriterLock:
    """The writer connection's RLock; entering it from the thread that holds an open
    group first commits the group (see the module's invariants)."""

    __slots__ = ("_lock", "group")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.group: GroupTx | None = None

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
        "_conn_of",
        "_lock",
        "_tx",
        "active",
        "busy",
        "in_block",
        "on_flushed",
        "owner",
        "spoil",
    )

    def __init__(self, lock: WriterLock, conn_of: Callable[[], sqlite3.Connection]) -> None:
        self._lock = lock
        self._conn_of = conn_of
        self._tx: tx.write_transaction | None = None
        self.active = False
        self.busy = False  # the group's own statements: entering the lock must not flush
        self.in_block = False
        self.owner: int | None = None
        # Set by the runtime: called after every commit (None) or failed commit (the
        # error), and when an open block is rolled back by a flush.
        self.on_flushed: Callable[[BaseException | None], None] | None = None
        self.spoil: Callable[[], None] | None = None

    def begin_block(self) -> sqlite3.Connection:
        """Open the group if it is not (BEGIN IMMEDIATE, the lock held), then a
        savepoint for one block; returns the connection its statements go to."""
        if self.in_block:
            raise RuntimeError("a transaction block is already open in this group")
        self.busy = True
        try:
            if not self.active:
                with self._lock:  # flushes nothing: busy is set
                    conn = self._conn_of()
                    self._lock.acquire()  # the group's own count, held until the flush
                    try:
                        wtx = tx.write_transaction(conn, "ctx.transaction")
                        wtx.__enter__()
                    except BaseException:
                        self._lock.release()
                        raise
                self._tx = wtx
                self.active = True
                self.owner = threading.get_ident()
            conn = self._conn_of()
            conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            self.in_block = True
            return conn
        finally:
            self.busy = False

    def end_block(self, keep: bool) -> None:
        """Release the block's savepoint into the group, or roll it back."""
        if not self.in_block:
            return  # a flush rolled it back already (it was spoiled)
        conn = self._conn_of()
        self.busy = True
        try:
            if not keep:
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
            conn.execute(f"RELEASE {_SAVEPOINT}")
        finally:
            self.in_block = False
            self.busy = False

    def flush(self) -> None:
        """Commit the group (a block still open is rolled back first and spoiled)."""
        if not self.active:
            return
        self.busy = True
        error: BaseException | None = None
        try:
            if self.in_block:
                self.end_block(keep=False)
                if self.spoil is not None:
                    self.spoil()
            wtx, self._tx = self._tx, None
            assert wtx is not None
            try:
                wtx.__exit__(None, None, None)
            except sqlite3.Error as exc:  # the commit failed: the group was rolled back
                error = tx.storage_error(exc, "ctx.transaction (group commit)")
            except BaseException as exc:
                error = exc
        finally:
            self.active = False
            self.owner = None
            self.busy = False
            self._lock.release()
        callback = self.on_flushed
        if callback is not None:
            callback(error)

    def __repr__(self) -> str:
        state: Any = "open" if self.active else "idle"
        return f"GroupTx({state}, in_block={self.in_block})"
