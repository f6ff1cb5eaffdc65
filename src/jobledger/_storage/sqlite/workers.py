"""Worker rows and the application of a recovery plan (SQLite).

Who is dead and what becomes of a dead worker's rows is policy, decided above the
dialects (`jobledger._core.recovery`); here are the statements. `recover_worker` reads
the worker's live rows, asks the plan, applies it and deletes the worker row, all in
one write transaction (SQLite serialises writers, so nobody claims or cancels one of
those rows in between).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence

from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow
from jobledger._storage.records import RecoveryPlan, RecoveryStats, WorkerRow
from jobledger._storage.rows import lost_error
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.keys import key_of
from jobledger._storage.sqlite.store import SqliteStore, write_attempts

__all__ = ["heartbeat", "list_workers", "recover_worker", "register_worker", "stop_worker"]


def register_worker(
    store: SqliteStore,
    worker_id: str,
    hostname: str,
    pid: int,
    handlers: Sequence[str],
    now_ms: int,
) -> None:
    text = json.dumps(list(handlers))
    store.write(
        lambda c: c.execute(q.REGISTER_WORKER, (worker_id, hostname, pid, text, now_ms, now_ms)),
        "register_worker",
    )


def heartbeat(store: SqliteStore, worker_id: str, now_ms: int) -> bool:
    return bool(
        store.write(lambda c: c.execute(q.HEARTBEAT, (now_ms, worker_id)).rowcount, "heartbeat")
    )


def stop_worker(store: SqliteStore, worker_id: str, now_ms: int) -> None:
    store.write(lambda c: c.execute(q.STOP_WORKER, (now_ms, now_ms, worker_id)), "stop_worker")


def list_workers(store: SqliteStore) -> list[WorkerRow]:
    rows = store.read(lambda c: c.execute(q.LIST_WORKERS).fetchall())
    return [
        WorkerRow(r[0], r[1], r[2], tuple(json.loads(r[3] or "[]")), r[4], r[5], r[6]) for r in rows
    ]


def recover_worker(
    store: SqliteStore,
    worker_id: str,
    plan: Callable[[Sequence[JobRow]], RecoveryPlan],
    cancel_error: Callable[[str], str],
    now_ms: int,
) -> RecoveryStats:
    def work(conn: sqlite3.Connection) -> RecoveryStats:
        stats = RecoveryStats()
        rows = conn.execute(q.LIVE_ROWS_OF_WORKER, (worker_id, worker_id)).fetchall()
        decided = plan(rows)
        # The attempts that were running on the dead worker end here, as "lost".
        ran = {
            r[L.C_ID]: r for r in rows if r[L.C_STATUS] == "running" and r[L.C_WORKER] == worker_id
        }
        lost_error_text = lost_error(worker_id)

        def at(job_id: str) -> tuple[int, str]:
            return key_of(conn, job_id), job_id

        for job_id, why in decided.cancel:
            key = key_of(conn, job_id)
            done = conn.execute(
                q.CANCEL_RECOVERED, (cancel_error(why), now_ms, now_ms, key, job_id)
            ).fetchone()
            if done is not None:
                stats.cancelled.append(done)
                was = ran.get(job_id)
                if was is not None:  # the row says cancelled; its attempt was lost
                    record = (key, was[L.C_ATTEMPT], worker_id, was[L.C_STARTED_AT], now_ms,
                              "lost", lost_error_text, None)  # fmt: skip
                    conn.execute(q.INSERT_ENDED_ATTEMPT, record)
        for job_id in decided.reset:
            key = key_of(conn, job_id)
            was = ran.get(job_id)
            if conn.execute(q.RESET_RUNNING, (now_ms, key, job_id, worker_id)).rowcount and was:
                record = (key, was[L.C_ATTEMPT], worker_id, was[L.C_STARTED_AT], now_ms, "lost",
                          lost_error_text, None)  # fmt: skip
                write_attempts(conn, [record])
            stats.reset += 1
        for job_id in decided.disown:
            conn.execute(q.DISOWN, at(job_id))
            stats.kept += 1
        conn.execute(q.RELEASE_WORKER_LOCKS, (worker_id,))
        conn.execute(q.DELETE_WORKER, (worker_id,))
        return stats

    return store.write(work, "recover_worker")
