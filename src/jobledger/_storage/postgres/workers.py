"""Worker rows, liveness, and the recovery of a dead worker's rows (PostgreSQL).

The same functions, with the same semantics, as `sqlite/workers.py` (see its docstring
for what *dead* means and which rows are recovered); `WorkerRow`, `RecoveryStats`,
`is_dead` and `pid_alive` are shared. What differs is concurrency: SQLite serialises
every writer, PostgreSQL does not, so `recover_worker`

* takes a transaction-scoped advisory lock on the dead worker's id, so two processes
  recovering the same worker (startup recovery is not leader-only) take turns, and the
  second finds the worker row gone and its rows already moved;
* locks the rows it decides about (`FOR UPDATE`, in id order) before deciding, so no
  other process claims or cancels one of them in between; claims skip locked rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jobledger._storage.interface import JobRow
from jobledger._storage.postgres import queries as pq
from jobledger._storage.postgres.store import Conn, PostgresStore
from jobledger._storage.sqlite.workers import (
    RecoveryStats,
    WorkerRow,
    dead_workers,
    is_dead,
    pid_alive,
)
from jobledger._types import RecoveryStrategy

__all__ = [
    "RecoveryStats",
    "WorkerRow",
    "dead_workers",
    "heartbeat",
    "is_dead",
    "list_workers",
    "pid_alive",
    "recover_worker",
    "register_worker",
    "stop_worker",
]


def register_worker(
    store: PostgresStore,
    worker_id: str,
    *,
    hostname: str,
    pid: int,
    handlers: str,
    now_ms: int,
) -> None:
    """Insert (or restart) this manager's worker row; `handlers` is the JSON list."""
    store.write(
        lambda c: c.execute(
            store.q.REGISTER_WORKER, (worker_id, hostname, pid, handlers, now_ms, now_ms)
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
    *,
    strategy_of: Callable[[str], RecoveryStrategy | None],
    cancel_error: Callable[[str], str],
    now_ms: int,
) -> RecoveryStats:
    """Reset one dead worker's rows by their type's strategy (seed 001, step 1).

    `strategy_of(type)` is None for a type no live worker handles: such rows are orphans
    and are cancelled. Cancel-requested rows are cancelled first, whatever the strategy.
    """
    q = store.q

    def work(conn: Conn) -> RecoveryStats:
        stats = RecoveryStats()
        conn.execute(q.ADVISORY_XACT_LOCK, (q.recover_key(worker_id),))
        rows = conn.execute(q.LIVE_ROWS_OF_WORKER, (worker_id, worker_id)).fetchall()
        # Newest first, so a singleton keeps the first row it sees of each type.
        rows.sort(key=lambda r: (r[pq.C_CREATED_AT], r[pq.C_ID]), reverse=True)
        kept_singletons: set[str] = set()
        cancelled: list[Any] = []

        def cancel(row: JobRow, why: str) -> None:
            cancelled.append(
                conn.execute(q.CANCEL_RECOVERED, (cancel_error(why), now_ms, now_ms, row[pq.C_ID]))
            )

        for row in rows:
            job_type, status = row[pq.C_TYPE], row[pq.C_STATUS]
            strategy = strategy_of(job_type)
            if row[pq.C_CANCEL]:
                cancel(row, "Cancelled by startup recovery")
            elif strategy is None:
                cancel(row, "Orphan job: no live worker handles this type")
            elif strategy == "abandon":
                cancel(row, "Abandoned by recovery: its worker died")
            elif strategy == "singleton" and job_type in kept_singletons:
                cancel(row, "Superseded by a newer singleton job")
            else:
                if strategy == "singleton":
                    kept_singletons.add(job_type)
                if status == "running":
                    conn.execute(q.RESET_RUNNING, (now_ms, row[pq.C_ID], worker_id))
                    stats.reset += 1
                else:
                    conn.execute(q.DISOWN, (row[pq.C_ID],))
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
