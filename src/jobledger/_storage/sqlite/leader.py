"""The leader lease row, as named operations (SQLite). Policy lives in `_runtime/leader.py`
and `_core/recovery.py` (`holder_alive`).

The row `leader(id=1, worker_id, term, expires_at)` names the holder. Every change is a
compare-and-set: `take_lease` takes the cross-process lock file without waiting
(`lease.acquire_writer_lease`; busy means "not now"), re-reads the row inside its write
transaction and writes only if the lease is still free (or already ours); `renew_lease`
and `resign_lease` match on `(worker_id, term)`, so a holder that lost its term can
neither extend nor clear its successor's lease.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from jobledger._storage.lease import acquire_writer_lease, writer_lock_path_for
from jobledger._storage.records import LeaseRow, lease_row
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.store import SqliteStore

__all__ = ["read_lease", "renew_lease", "resign_lease", "take_lease"]


def read_lease(store: SqliteStore) -> LeaseRow | None:
    """The current lease and its holder's worker row, without any lock (a WAL read)."""
    return lease_row(store.read(lambda c: c.execute(q.LEADER_WITH_HOLDER).fetchone()))


def take_lease(
    store: SqliteStore,
    worker_id: str,
    *,
    now_ms: int,
    ttl_ms: int,
    alive: Callable[[LeaseRow], bool],
) -> int | None:
    """Become leader if the lease is free; returns the term held, or None if another holds
    it (or another process is taking it right now).

    Re-reads the row inside the write transaction: that read, not the caller's earlier
    one, decides. Taking over from another holder starts a new term; finding the lease
    already ours (a renew that failed but committed) keeps the term.
    """
    # A private in-memory database has one manager: no other process to race.
    guard: AbstractContextManager[Any] | None = (
        nullcontext() if store.memory else acquire_writer_lease(writer_lock_path_for(store.path))
    )
    if guard is None:
        return None

    def work(conn: sqlite3.Connection) -> int | None:
        lease = lease_row(conn.execute(q.LEADER_WITH_HOLDER).fetchone())
        if lease is not None and lease.worker_id != worker_id and alive(lease):
            return None
        if lease is not None and lease.worker_id == worker_id and lease.expires_at > now_ms:
            term = lease.term
        else:
            term = 1 if lease is None else lease.term + 1
        conn.execute(q.TAKE_LEADER, (worker_id, term, now_ms + ttl_ms))
        return term

    with guard:
        return store.write(work, "leader_take")


def renew_lease(store: SqliteStore, worker_id: str, term: int, *, expires_at: int) -> bool:
    """Extend our lease; False when the term is no longer ours (we lost leadership)."""
    return bool(
        store.write(
            lambda c: c.execute(q.RENEW_LEADER, (expires_at, worker_id, term)).rowcount,
            "leader_renew",
        )
    )


def resign_lease(store: SqliteStore, worker_id: str, term: int) -> None:
    """Give the lease up now (expire it), so a follower takes over at its next tick."""
    store.write(lambda c: c.execute(q.RESIGN_LEADER, (worker_id, term)), "leader_resign")
