"""Worker rows and the application of a recovery plan (PostgreSQL).

The same operations, with the same semantics, as `sqlite/workers.py`; who is dead and
what becomes of a dead worker's rows is policy (`jobledger._core.recovery`). What differs
is concurrency: SQLite serialises every writer, PostgreSQL does not, so `recover_worker`

* takes a transaction-scoped advisory lock on the dead worker's id, so two processes
  recovering the same worker (startup recovery is not leader-only) take turns, and the
  second finds the worker row gone and its rows already moved;
* locks the rows it decides about (`FOR UPDATE`, in id order) before deciding, so no
  other process claims or cancels one of them in between; claims skip locked rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow
from jobledger._storage.postgres.store import Conn, PostgresStore
from jobledger._storage.records import RecoveryPlan, RecoveryStats, WorkerRow
from jobledger._storage.rows import lost_error

__all__ = ["heartbeat", "list_workers", "recover_worker", "register_worker", "stop_worker"]


def register_worker(
    store: PostgresStore,
    worker_id: str,
    hostname: str,
    pid: int,
    handlers: Sequence[str],
    now_ms: int,
) -> None:
    """Insert (or restart) this manager's worker row."""
    text = json.dumps(list(handlers))
    store.write(
        lambda c: c.execute(
            store.q.REGISTER_WORKER, (worker_id, hostname, pid, text, now_ms, now_ms)
        ),
        "register_worker",
    )


def heartbeat(store: PostgresStore, worker_id: str, now_ms: int) -> bool:
    return bool(
        store._stmt(
            lambda c: c.execute(store.q.HEARTBEAT, (now_ms, worker_id)).rowcount, "heartbeat"
        )
    )


def stop_worker(store: PostgresStore, worker_id: str, now_ms: int) -> None:
    store._stmt(lambda c: c.execute(store.q.STOP_WORKER, (now_ms, now_ms, worker_id)), "stop")


def list_workers(store: PostgresStore) -> list[WorkerRow]:
    rows = store.read(lambda c: c.execute(store.q.LIST_WORKERS).fetchall())
    return [
        WorkerRow(
            r[0],
            r[1],
            int(r[2]),
            tuple(json.loads(r[3] or "[]")),
            int(r[4]),
            int(r[5]),
            None if r[6] is None else int(r[6]),
        )
        for r in rows
    ]


def recover_worker(
    store: PostgresStore,
    worker_id: str,
    plan: Callable[[Sequence[JobRow]], RecoveryPlan],
    cancel_error: Callable[[str], str],
    now_ms: int,
) -> RecoveryStats:
    q = store.q

    def work(conn: Conn) -> RecoveryStats:
        stats = RecoveryStats()
        conn.execute(q.ADVISORY_XACT_LOCK, (q.recover_key(worker_id),))
        rows = [
            tuple(r) for r in conn.execute(q.LIVE_ROWS_OF_WORKER, (worker_id, worker_id)).fetchall()
        ]
        decided = plan(rows)
        cancelled: list[Any] = [
            conn.execute(q.CANCEL_RECOVERED, (cancel_error(why), now_ms, now_ms, job_id))
            for job_id, why in decided.cancel
        ]
        for job_id in decided.reset:
            conn.execute(q.RESET_RUNNING, (now_ms, job_id, worker_id))
            stats.reset += 1
        # A running row's attempt ends here, lost: unspent when the row is reset (it goes
        # back to pending), the attempt that ended it when cancelled (its row would say
        # "cancelled"); see _storage/attempts.py. The rows are locked above, so each
        # statement applies.
        reset = set(decided.reset)
        cancel = {job_id for job_id, _ in decided.cancel}
        for r in rows:
            if r[L.C_STATUS] != "running" or r[L.C_WORKER] != worker_id:
                continue
            job_id, attempt = r[L.C_ID], r[L.C_ATTEMPT]
            values = (attempt, worker_id, r[L.C_STARTED_AT], now_ms, "lost", lost_error(worker_id))
            if job_id in reset:
                conn.execute(q.INSERT_UNSPENT_ATTEMPT, (job_id, job_id, *values, None))
            elif job_id in cancel:
                conn.execute(q.INSERT_ENDED_ATTEMPT, (job_id, attempt, *values, None))
        for job_id in decided.disown:
            conn.execute(q.DISOWN, (job_id,))
            stats.kept += 1
        conn.execute(q.RELEASE_WORKER_LOCKS, (worker_id,))
        conn.execute(q.DELETE_WORKER, (worker_id,))
        if rows:
            conn.execute(q.NOTE_CHANGE)
        for cur in cancelled:
            done = cur.fetchone()
            if done is not None:
                stats.cancelled.append(tuple(done))
        return stats

    return store._tx(work, "recover_worker", piped=True)
