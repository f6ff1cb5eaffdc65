"""SQLite connections, one kind per role.

| role      | busy timeout        | used for                                            |
|-----------|---------------------|-----------------------------------------------------|
| writer    | short (default 1 s) | every write, through `tx.with_write_tx`             |
| reader    | long (5 s)          | observers: get/list/count, dashboard, CLI           |
| heartbeat | 0                   | liveness rows; must never stall the event loop      |

Every connection is opened with `isolation_level=None`: Python never begins or commits a
transaction by itself, so `BEGIN IMMEDIATE` in `tx.run_write_transaction` is the only way
a write transaction starts. WAL is switched on once, when the schema is created (under the
lease, see `migrate.py`); here it is only checked. Routine checkpoints stay PASSIVE
(SQLite's automatic checkpoint); `checkpoint_truncate` is the explicit maintenance call.

Connections are never shared across `fork()`: each process opens its own.
"""

from __future__ import annotations

import sqlite3
from typing import Literal
from urllib.parse import quote

__all__ = [
    "READER_BUSY_TIMEOUT",
    "Synchronous",
    "checkpoint_passive",
    "checkpoint_truncate",
    "open_heartbeat",
    "open_reader",
    "open_writer",
]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
READER_BUSY_TIMEOUT = 5.0
# The automatic checkpoint runs inside the COMMIT that crosses it, on the caller's
# thread, and waits for two fsyncs even at synchronous=NORMAL. A job write dirties ~7
# pages (the row and its indexes), so SQLite's default of 1000 pages checkpointed every
# ~140 enqueues; 4000 pages (a WAL of up to ~16 MB) makes that four times rarer
# (single enqueue +20-40% on the bench machine, see docs/benchmarks.md).
WAL_AUTOCHECKPOINT_PAGES = 4000


def _connect(
    path: str, *, busy_timeout: float, read_only: bool = False, same_thread: bool = False
) -> sqlite3.Connection:
    if read_only and path != ":memory:":
        # Percent-encode the path: a raw `#` or `?` in it would end the URI's path, drop
        # `mode=ro` and silently open (or create) a different file read-write.
        conn = sqlite3.connect(
            f"file:{quote(path)}?mode=ro",
            uri=True,
            isolation_level=None,
            timeout=busy_timeout,
            check_same_thread=same_thread,
            cached_statements=256,
        )
    else:
        conn = sqlite3.connect(
            path,
            isolation_level=None,
            timeout=busy_timeout,
            check_same_thread=same_thread,
            cached_statements=256,
        )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    return conn


def open_writer(
    path: str, *, busy_timeout: float = 1.0, synchronous: Synchronous = "NORMAL"
) -> sqlite3.Connection:
    """The write connection. Usable from any thread; callers serialise access to it."""
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"synchronous must be NORMAL, FULL, EXTRA or OFF, not {synchronous!r}")
    conn = _connect(path, busy_timeout=busy_timeout)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    return conn


def open_reader(
    path: str, *, busy_timeout: float = READER_BUSY_TIMEOUT, read_only: bool = False
) -> sqlite3.Connection:
    """A reader. `read_only=True` opens the file with `mode=ro`, so it cannot write at all."""
    conn = _connect(path, busy_timeout=busy_timeout, read_only=read_only)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def open_heartbeat(path: str) -> sqlite3.Connection:
    """The heartbeat connection: a zero busy timeout, so a beat is skipped, never waited for."""
    return _connect(path, busy_timeout=0.0)


def checkpoint_passive(conn: sqlite3.Connection) -> tuple[int, int, int]:
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def checkpoint_truncate(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """Maintenance only: waits for readers (up to the busy timeout), then empties the WAL."""
    row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return int(row[0]), int(row[1]), int(row[2])
