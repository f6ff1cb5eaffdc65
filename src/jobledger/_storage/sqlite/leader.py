"""The leader lease row, as named operations (SQLite). Policy lives in `_runtime/leader.py`.

The row `leader(id=1, worker_id, term, expires_at)` names the holder. A holder is *alive*
while its lease has not expired, its worker row exists and is not stopped, and — when it
ran on this host — its process still exists (so a `kill -9` frees the lease at once).

Every change is a compare-and-set: `take_lease` re-reads the row inside its write
transaction and writes only if the lease is still free (or already ours); `renew_lease`
and `resign_lease` match on `(worker_id, term)`, so a holder that lost its term can
neither extend nor clear its successor's lease.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.store import SqliteStore
from jobledger._storage.sqlite.workers import pid_alive

__all__ = ["LeaseRow", "holder_alive", "read_lease", "renew_lease", "resign_lease", "take_lease"]


@dataclass(frozen=True, slots=True)
class LeaseRow:
    worker_id: str
    term: int
    expires_at: int
    registered: bool  # the holder still has a worker row
    hostname: str | None
    pid: int | None
    stopped_at: int | None


def _lease_of(row: Any) -> LeaseRow | None:
    if row is None:
        return None
    worker_id, term, expires_at, registered, hostname, pid, stopped_at = row
    return LeaseRow(
        str(worker_id),
        int(term),
        int(expires_at),
        bool(registered),
        None if hostname is None else str(hostname),
        None if pid is None else int(pid),
        None if stopped_at is None else int(stopped_at),
    )


def holder_alive(lease: LeaseRow, *, now_ms: int, hostname: str) -> bool:
    if lease.expires_at <= now_ms or not lease.registered or lease.stopped_at is not None:
        return False
    return not (lease.hostname == hostname and lease.pid is not None and not pid_alive(lease.pid))


def read_lease(store: SqliteStore) -> LeaseRow | None:
    """The current lease and its holder's worker row, without any lock (a WAL read)."""
    return _lease_of(store.read(lambda c: c.execute(q.LEADER_WITH_HOLDER).fetchone()))


def take_lease(
    store: SqliteStore, worker_id: str, *, now_ms: int, ttl_ms: int, hostname: str
) -> int | None:
    """Become leader if the lease is free; returns the term held, or None if another holds it.

    Re-reads the row inside the write transaction: that read, not the caller's earlier
    one, decides. Taking over from another holder starts a new term; finding the lease
    already ours (a renew that failed but committed) keeps the term.
    """

    def work(conn: sqlite3.Connection) -> int | None:
        lease = _lease_of(conn.execute(q.LEADER_WITH_HOLDER).fetchone())
        if (
            lease is not None
            and lease.worker_id != worker_id
            and holder_alive(lease, now_ms=now_ms, hostname=hostname)
        ):
            return None
        if lease is not None and lease.worker_id == worker_id and lease.expires_at > now_ms:
            term = lease.term
        else:
            term = 1 if lease is None else lease.term + 1
        conn.execute(q.TAKE_LEADER, (worker_id, term, now_ms + ttl_ms))
        return term

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
