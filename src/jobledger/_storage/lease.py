"""The cross-process writer lease: a mutual-exclusion lock any jobledger process can take.

The lease is *mechanism*, not policy: it guarantees that two lease holders never overlap.
Who takes it, and when, is the caller's policy (the leader election in
`_runtime/leader.py`, through `Store.take_lease`).

How it works. Beside the database sits a lock file (`writer_lock_path_for(db) ==
db + ".lock"`) that is its own, normally empty, SQLite database. Holding the lease means
holding an open `BEGIN IMMEDIATE` (SQLite's RESERVED lock) on a dedicated connection to
that file. Nothing is ever written to it.

Invariants:

* The lock file stays in the default rollback-journal mode, never WAL: a RESERVED lock
  on a rollback-journal file is an OS-level advisory lock that excludes every other
  connection, in this process or any other, on every platform SQLite supports.
* Acquisition never blocks inside SQLite (busy timeout 0). It is either one
  non-blocking try (`wait=0`) or a bounded poll every `retry_delay` seconds. Contention
  is reported as `None`, never as an exception; any non-BUSY error propagates.
* A lease belongs to a *connection*, not to a process: a second acquire in the process
  that already holds the lease fails like any other. Code that runs on behalf of a
  holder uses `writer_lease(..., mode="caller-held")`, which neither acquires nor
  releases.
* `release()` is idempotent and may run on any thread (`check_same_thread=False`).
* No TTL. A crash (even SIGKILL) frees the lease at once, because the OS drops the
  process's locks; a *hang* does not, and blocks every writer until the holder dies.
  Keep lease-holding sections short and never wait on anything unbounded inside them.
* POSIX-lock hazard: closing *any* file descriptor to a file drops every POSIX lock the
  process holds on it. A process holding the lease must therefore never `open()`/
  `close()` the lock file or the database with plain file I/O (copying, hashing,
  reading headers, `shutil.copy` backups): that silently frees the lease for everyone.
  SQLite's own connections are safe (it shares one descriptor per file and defers
  closes); use `sqlite3.Connection.backup` for backups.
* Never carry a lease across `fork()`: acquire it in the process that uses it.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Literal

from jobledger._storage.tx import is_busy_error

__all__ = [
    "LeaseMode",
    "WriterLease",
    "acquire_writer_lease",
    "writer_lease",
    "writer_lock_path_for",
]

LeaseMode = Literal["acquire", "caller-held"]


def writer_lock_path_for(db_path: str) -> str:
    """The lock file that guards writes to `db_path`."""
    return db_path + ".lock"


class WriterLease:
    """A held writer lease. Release it exactly once (extra calls are no-ops)."""

    def __init__(self, conn: sqlite3.Connection | None, lock_path: str) -> None:
        self._conn = conn
        self.lock_path = lock_path
        self._released = False

    @property
    def held(self) -> bool:
        return not self._released

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute("ROLLBACK")
        except Exception:
            pass  # closing the connection drops whatever lock is left
        finally:
            conn.close()

    def __enter__(self) -> WriterLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.lock_path!r}, held={self.held})"


class _CallerHeldLease(WriterLease):
    """Stands for a lease some caller up the stack holds: always held, never released here."""

    def __init__(self, lock_path: str) -> None:
        super().__init__(None, lock_path)

    @property
    def held(self) -> bool:
        return True

    def release(self) -> None:
        return None


def _try_acquire(lock_path: str) -> WriterLease | None:
    conn = sqlite3.connect(lock_path, timeout=0.0, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("BEGIN IMMEDIATE")
    except BaseException as exc:
        conn.close()
        if isinstance(exc, Exception) and is_busy_error(exc):
            return None
        raise
    return WriterLease(conn, lock_path)


def acquire_writer_lease(
    lock_path: str,
    *,
    wait: float = 0.0,
    retry_delay: float = 0.025,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WriterLease | None:
    """Take the lease: one try (`wait=0`) or poll for up to `wait` seconds.

    Returns None when another connection holds it. Errors other than SQLITE_BUSY*
    (an unopenable path, a corrupt lock file) propagate.
    """
    if wait < 0 or retry_delay < 0:
        raise ValueError("wait and retry_delay must be >= 0")
    parent = os.path.dirname(lock_path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    # The attempt cap bounds the loop even if `sleep` does not advance `monotonic`.
    max_attempts = math.ceil(wait / max(retry_delay, 0.001)) + 1 if wait > 0 else 1
    deadline = monotonic() + wait
    attempt = 0
    while True:
        attempt += 1
        lease = _try_acquire(lock_path)
        if lease is not None:
            return lease
        remaining = deadline - monotonic()
        if attempt >= max_attempts or remaining <= 0:
            return None
        sleep(min(retry_delay, remaining))


@contextmanager
def writer_lease(
    lock_path: str, *, mode: LeaseMode = "acquire", wait: float = 0.0
) -> Iterator[WriterLease | None]:
    """Hold the lease for a block.

    `mode="acquire"` takes the lease (yielding None on contention; the block must then
    not write) and releases it on exit. `mode="caller-held"` trusts that a caller
    already holds it: it yields a stand-in that counts as held, and releases nothing.
    """
    if mode == "caller-held":
        yield _CallerHeldLease(lock_path)
        return
    if mode != "acquire":
        raise ValueError(f"unknown writer lease mode {mode!r}")
    lease = acquire_writer_lease(lock_path, wait=wait)
    try:
        yield lease
    finally:
        if lease is not None:
            lease.release()
