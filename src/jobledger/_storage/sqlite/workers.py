"""Worker rows, liveness, and the recovery of a dead worker's rows (SQLite).

A worker (a started `JobManager`) is *dead* when it stopped (stopped_at set), when its
heartbeat is older than `worker_timeout`, or — at once — when it ran on this host and its
process id no longer exists (a `kill -9` is seen immediately). Only rows owned by a dead,
registered worker are ever reset: running rows it claimed, and pending/delayed rows it
enqueued. Rows enqueued by producer-only processes (never started, so never registered)
are ordinary work and never abandoned.

`recover_worker` applies the recovery strategies to one dead worker's rows in one
transaction, then deletes the worker row, so its remaining rows become ordinary work
and the same rows are never recovered twice.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow, Store
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.keys import key_of
from jobledger._storage.sqlite.store import SqliteStore
from jobledger._types import RecoveryStrategy

__all__ = ["RecoveryStats", "WorkerRow", "dead_workers", "pid_alive", "recover_worker"]


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    hostname: str
    pid: int
    handlers: tuple[str, ...]
    started_at: int
    heartbeat_at: int
    stopped_at: int | None


@dataclass(slots=True)
class RecoveryStats:
    cancelled: list[JobRow] = field(default_factory=list)
    reset: int = 0
    kept: int = 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def list_workers(store: SqliteStore) -> list[WorkerRow]:
    rows = store.read(lambda c: c.execute(q.LIST_WORKERS).fetchall())
    return [
        WorkerRow(r[0], r[1], r[2], tuple(json.loads(r[3] or "[]")), r[4], r[5], r[6]) for r in rows
    ]


def is_dead(w: WorkerRow, *, now_ms: int, timeout_ms: int, hostname: str) -> bool:
    if w.stopped_at is not None:
        return True
    if now_ms - w.heartbeat_at > timeout_ms:
        return True
    return w.hostname == hostname and not pid_alive(w.pid)


def dead_workers(
    store: Store, *, now_ms: int, timeout_ms: int, hostname: str, exclude: str
) -> tuple[list[WorkerRow], list[WorkerRow]]:
    """(dead, alive) registered workers, never counting `exclude` (ourselves) as dead.

    Backend-neutral: it reads through `store.workers.list_workers`, so the PostgreSQL
    backend uses this same function."""
    dead: list[WorkerRow] = []
    alive: list[WorkerRow] = []
    workers: list[WorkerRow] = store.workers.list_workers(store)
    for w in workers:
        if w.id != exclude and is_dead(w, now_ms=now_ms, timeout_ms=timeout_ms, hostname=hostname):
            dead.append(w)
        else:
            alive.append(w)
    return dead, alive


def recover_worker(
    store: SqliteStore,
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

    def work(conn: sqlite3.Connection) -> RecoveryStats:
        stats = RecoveryStats()
        rows = conn.execute(q.LIVE_ROWS_OF_WORKER, (worker_id, worker_id)).fetchall()
        # Newest first, so a singleton keeps the first row it sees of each type.
        rows.sort(key=lambda r: (r[L.C_CREATED_AT], r[L.C_ID]), reverse=True)
        kept_singletons: set[str] = set()

        def at(row: JobRow) -> tuple[int, str]:
            return key_of(conn, row[L.C_ID]), row[L.C_ID]

        def cancel(row: JobRow, why: str) -> None:
            done = conn.execute(
                q.CANCEL_RECOVERED, (cancel_error(why), now_ms, now_ms, *at(row))
            ).fetchone()
            if done is not None:
                stats.cancelled.append(done)

        for row in rows:
            job_type, status = row[L.C_TYPE], row[L.C_STATUS]
            strategy = strategy_of(job_type)
            if row[L.C_CANCEL]:
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
                    conn.execute(q.RESET_RUNNING, (now_ms, *at(row), worker_id))
                    stats.reset += 1
                else:
                    conn.execute(q.DISOWN, at(row))
                    stats.kept += 1
        conn.execute(q.RELEASE_WORKER_LOCKS, (worker_id,))
        conn.execute(q.DELETE_WORKER, (worker_id,))
        return stats

    return store.write(work, "recover_worker")
