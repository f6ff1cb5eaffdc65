"""The leader lease row, as named operations (PostgreSQL); policy is `_runtime/leader.py`.

Same operations and semantics as `sqlite/leader.py`; whether a holder is alive is policy
(`_core/recovery.py`), passed in as `alive`. SQLite serialises would-be leaders with a
lock file inside its `take_lease`; here `take_lease` takes a transaction-scoped advisory
lock on the schema's leader key before it re-reads the row, so concurrent takers on any
host queue up and the re-read decides.
"""

from __future__ import annotations

from collections.abc import Callable

from jobledger._storage.postgres.store import Conn, PostgresStore
from jobledger._storage.records import LeaseRow, lease_row

__all__ = ["read_lease", "renew_lease", "resign_lease", "take_lease"]


def read_lease(store: PostgresStore) -> LeaseRow | None:
    """The current lease and its holder's worker row, without any lock."""
    return lease_row(store.read(lambda c: c.execute(store.q.LEADER_WITH_HOLDER).fetchone()))


def take_lease(
    store: PostgresStore,
    worker_id: str,
    *,
    now_ms: int,
    ttl_ms: int,
    alive: Callable[[LeaseRow], bool],
) -> int | None:
    """Become leader if the lease is free; returns the term held, or None if another holds it."""
    q = store.q

    def work(conn: Conn) -> int | None:
        conn.execute(q.ADVISORY_XACT_LOCK, (q.leader_lock_key,))
        lease = lease_row(conn.execute(q.LEADER_WITH_HOLDER).fetchone())
        if lease is not None and lease.worker_id != worker_id and alive(lease):
            return None
        if lease is not None and lease.worker_id == worker_id and lease.expires_at > now_ms:
            term = lease.term
        else:
            term = 1 if lease is None else lease.term + 1
        conn.execute(q.TAKE_LEADER, (worker_id, term, now_ms + ttl_ms))
        return term

    return store._tx(work, "leader_take", piped=True)


def renew_lease(store: PostgresStore, worker_id: str, term: int, *, expires_at: int) -> bool:
    """Extend our lease; False when the term is no longer ours (we lost leadership)."""
    return bool(
        store._stmt(
            lambda c: c.execute(store.q.RENEW_LEADER, (expires_at, worker_id, term)).rowcount,
            "leader_renew",
        )
    )


def resign_lease(store: PostgresStore, worker_id: str, term: int) -> None:
    """Give the lease up now (expire it), so a follower takes over at its next tick."""
    store._stmt(lambda c: c.execute(store.q.RESIGN_LEADER, (worker_id, term)), "leader_resign")
