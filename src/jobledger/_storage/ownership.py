"""The ownership heartbeat (seed 003): *who should* write, as opposed to who *can*.

A long-running writer (the worker daemon) keeps a row `ownership(key, owner, at_ms)`
fresh. While another owner's row is fresh, a would-be writer (CLI, dashboard) backs off
with `owned_by_other` and opens no write connection at all. The writer lease
(`lease.py`) is the mechanism underneath: it keeps writers from overlapping when this
policy information is stale or races.

Invariants:

* Fresh means `now - at < window` (strict), in wall-clock epoch ms because the row is
  compared across processes. A heartbeat more than `FUTURE_TOLERANCE_MS` in the
  future is invalid, not fresh: a clock that jumped back must not let a dead
  owner keep the database forever.
* Publishing never blocks and never raises: it takes the lease non-blocking and writes
  on a busy-timeout-0 connection. A skipped beat returns False and logs a warning; the
  owner simply publishes again on its next tick. A holder of the lease publishes with
  `lease_mode="caller-held"` (otherwise its own lease would skip every beat).
* `acquire_write_ownership` checks twice: once on a read-only connection before the lease
  (an optimisation that keeps a blocked caller from touching the lock at all), and again
  *under* the lease, which is the authoritative check: an owner may have published in
  between (TOCTOU).
* Reads fail closed: a missing `ownership` table means "nobody owns it yet" (the write
  path will create it); every other read error propagates.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from typing import Literal

from jobledger._storage.lease import (
    LeaseMode,
    WriterLease,
    acquire_writer_lease,
    writer_lease,
    writer_lock_path_for,
)
from jobledger._storage.sqlite import connections
from jobledger._storage.tx import run_write_transaction
from jobledger.errors import StorageError

__all__ = [
    "DEFAULT_KEY",
    "FUTURE_TOLERANCE_MS",
    "OwnershipReason",
    "OwnershipResult",
    "acquire_write_ownership",
    "is_fresh",
    "publish_heartbeat",
    "read_owner",
]

log = logging.getLogger(__name__)

DEFAULT_KEY = "writer"
FUTURE_TOLERANCE_MS = 5_000
_CHECK_BUSY_TIMEOUT = 0.25

OwnershipReason = Literal["granted", "owned_by_other", "writer_busy"]


@dataclass(frozen=True, slots=True)
class OwnershipResult:
    """The answer of `acquire_write_ownership`.

    `lease` is the held writer lease when `granted` (the caller must release it), else
    None. `current_owner` is the owner named by the heartbeat row that was consulted last
    (fresh or not), or None when there was none.
    """

    granted: bool
    reason: OwnershipReason
    lease: WriterLease | None
    current_owner: str | None


def is_fresh(at_ms: int, now_ms: int, window_ms: float) -> bool:
    """True when a heartbeat written at `at_ms` still counts at `now_ms`."""
    age = now_ms - at_ms
    if age < -FUTURE_TOLERANCE_MS:
        return False
    return age < window_ms


def read_owner(conn: sqlite3.Connection, *, key: str = DEFAULT_KEY) -> tuple[str, int] | None:
    """The `(owner, at_ms)` heartbeat under `key`, or None when there is none."""
    # Ask sqlite_master rather than matching a "no such table" message: only the absent
    # table means "no owner"; a present-but-broken table must raise.
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ownership'"
    ).fetchall()
    if not exists:
        return None
    # fetchall, not fetchone: a half-read cursor would keep pinning a WAL snapshot.
    rows = conn.execute("SELECT owner, at_ms FROM ownership WHERE key = ?", (key,)).fetchall()
    if not rows:
        return None
    owner, at_ms = rows[0]
    if not isinstance(owner, str) or not isinstance(at_ms, int):
        raise StorageError(
            f"ownership row {key!r} is malformed", params={"owner": owner, "at_ms": at_ms}
        )
    return owner, at_ms


def publish_heartbeat(
    db_path: str,
    owner: str,
    now_ms: int,
    *,
    key: str = DEFAULT_KEY,
    lease_mode: LeaseMode = "acquire",
) -> bool:
    """Record that `owner` is alive at `now_ms`. False (and a warning) when skipped."""
    if not os.path.exists(db_path):
        log.warning("heartbeat %r skipped: %s does not exist", key, db_path)
        return False
    try:
        with writer_lease(writer_lock_path_for(db_path), mode=lease_mode) as lease:
            if lease is None:
                log.warning("heartbeat %r skipped: the writer lease is busy", key)
                return False
            conn = connections.open_heartbeat(db_path)
            try:
                run_write_transaction(
                    conn,
                    lambda: conn.execute(
                        "INSERT OR REPLACE INTO ownership (key, owner, at_ms) VALUES (?, ?, ?)",
                        (key, owner, now_ms),
                    ),
                    "heartbeat",
                )
            finally:
                conn.close()
    except Exception as exc:
        # A heartbeat must never take its publisher down; the next tick tries again.
        log.warning("heartbeat %r skipped: %s", key, exc)
        return False
    return True


def _check(db_path: str, key: str) -> tuple[str, int] | None:
    if not os.path.exists(db_path):
        return None
    conn = connections.open_reader(db_path, busy_timeout=_CHECK_BUSY_TIMEOUT, read_only=True)
    try:
        return read_owner(conn, key=key)
    finally:
        conn.close()


def acquire_write_ownership(
    db_path: str,
    owner: str,
    *,
    now_ms: int,
    fresh_window: float = 60.0,
    lease_wait: float = 0.0,
    key: str = DEFAULT_KEY,
) -> OwnershipResult:
    """Decide whether `owner` may write now, and if so hand it the writer lease.

    `fresh_window` is in seconds. Errors while reading the heartbeat propagate (fail
    closed), with the lease released.
    """
    window_ms = fresh_window * 1000.0

    def fresh_other(seen: tuple[str, int] | None) -> str | None:
        if seen is not None and seen[0] != owner and is_fresh(seen[1], now_ms, window_ms):
            return seen[0]
        return None

    seen = _check(db_path, key)
    other = fresh_other(seen)
    if other is not None:
        return OwnershipResult(False, "owned_by_other", None, other)

    lease = acquire_writer_lease(writer_lock_path_for(db_path), wait=lease_wait)
    if lease is None:
        return OwnershipResult(False, "writer_busy", None, None if seen is None else seen[0])

    try:
        seen = _check(db_path, key)
    except BaseException:
        lease.release()
        raise
    other = fresh_other(seen)
    if other is not None:
        lease.release()
        return OwnershipResult(False, "owned_by_other", None, other)
    return OwnershipResult(True, "granted", lease, None if seen is None else seen[0])
