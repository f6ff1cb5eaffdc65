"""Recovery policy, above the dialects: who is dead, and what becomes of their rows.

A worker is *dead* when it stopped (`stopped_at` set), when its heartbeat is older than
`worker_timeout`, or at once when it ran on this host and its process id no longer exists
(a `kill -9` is seen immediately). Only rows owned by a dead, registered worker are
recovered: running rows it claimed, and pending/delayed rows it enqueued.

`plan_recovery` decides per row (pure: rows and strategies in, a `RecoveryPlan` out);
`Store.recover_worker` applies the plan in the same transaction that read the rows, and
deletes the worker row, so the same rows are never recovered twice. The rules, in order:
a cancel-requested row is cancelled; a type no live worker handles (an orphan) is
cancelled; `abandon` cancels; `singleton` keeps only the newest row of its type and
cancels the others; what is kept goes back to pending (running rows) or is disowned
(waiting rows), and is ordinary work from then on.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jobledger._storage import layout as L
from jobledger._storage.records import LeaseRow, RecoveryPlan, WorkerRow
from jobledger._types import RecoveryStrategy

if TYPE_CHECKING:
    from jobledger._storage.interface import JobRow

__all__ = ["dead_workers", "holder_alive", "is_dead", "pid_alive", "plan_recovery"]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def is_dead(w: WorkerRow, *, now_ms: int, timeout_ms: int, hostname: str) -> bool:
    if w.stopped_at is not None:
        return True
    if now_ms - w.heartbeat_at > timeout_ms:
        return True
    return w.hostname == hostname and not pid_alive(w.pid)


def dead_workers(
    workers: Sequence[WorkerRow], *, now_ms: int, timeout_ms: int, hostname: str, exclude: str
) -> tuple[list[WorkerRow], list[WorkerRow]]:
    """(dead, alive) among `workers`, never counting `exclude` (ourselves) as dead."""
    dead: list[WorkerRow] = []
    alive: list[WorkerRow] = []
    for w in workers:
        if w.id != exclude and is_dead(w, now_ms=now_ms, timeout_ms=timeout_ms, hostname=hostname):
            dead.append(w)
        else:
            alive.append(w)
    return dead, alive


def holder_alive(lease: LeaseRow, *, now_ms: int, hostname: str) -> bool:
    """Whether the lease's holder still leads: unexpired, registered, not stopped, and —
    on this host — its process exists."""
    if lease.expires_at <= now_ms or not lease.registered or lease.stopped_at is not None:
        return False
    return not (lease.hostname == hostname and lease.pid is not None and not pid_alive(lease.pid))


def plan_recovery(
    rows: Sequence[JobRow], strategy_of: Callable[[str], RecoveryStrategy | None]
) -> RecoveryPlan:
    """Decide every live row of one dead worker (see the module docstring).

    `strategy_of(type)` is None for a type no live worker handles."""
    cancel: list[tuple[str, str]] = []
    reset: list[str] = []
    disown: list[str] = []
    kept_singletons: set[str] = set()
    # Newest first, so a singleton keeps the first row it sees of each type.
    for row in sorted(rows, key=lambda r: (r[L.C_CREATED_AT], r[L.C_ID]), reverse=True):
        job_id, job_type = row[L.C_ID], row[L.C_TYPE]
        strategy = strategy_of(job_type)
        if row[L.C_CANCEL]:
            cancel.append((job_id, "Cancelled by startup recovery"))
        elif strategy is None:
            cancel.append((job_id, "Orphan job: no live worker handles this type"))
        elif strategy == "abandon":
            cancel.append((job_id, "Abandoned by recovery: its worker died"))
        elif strategy == "singleton" and job_type in kept_singletons:
            cancel.append((job_id, "Superseded by a newer singleton job"))
        else:
            if strategy == "singleton":
                kept_singletons.add(job_type)
            (reset if row[L.C_STATUS] == "running" else disown).append(job_id)
    return RecoveryPlan(tuple(cancel), tuple(reset), tuple(disown))
