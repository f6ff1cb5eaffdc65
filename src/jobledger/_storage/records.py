"""Typed values the storage operations take and return, the same on every backend.

Dialect modules build these from their own rows; nothing above `_storage/` sees a
backend's row tuples except `JobRow` (the hot path's tuple, in `layout.JOB_COLUMNS`
order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from jobledger._storage.interface import JobRow


__all__ = [
    "AttemptRow",
    "EnsuredSchedule",
    "LeaseRow",
    "RecoveryPlan",
    "RecoveryStats",
    "ScheduleRow",
    "WorkerRow",
    "lease_row",
    "schedule_row",
]


class AttemptRow(NamedTuple):
    """One ended attempt (`job_attempts`), in the dialects' `ATTEMPT_COLUMNS` order."""

    attempt: int  # the job's 0-based `attempt` when it ran
    worker_id: str | None
    started_at: int | None
    finished_at: int
    outcome: str
    error: str | None  # JobErrorInfo JSON
    logs: str | None  # JSON [[at_ms, level, message], ...]


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A registered manager (`workers` table)."""

    id: str
    hostname: str
    pid: int
    handlers: tuple[str, ...]  # "type=strategy" entries
    started_at: int
    heartbeat_at: int
    stopped_at: int | None


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """The leader lease joined with its holder's worker row."""

    worker_id: str
    term: int
    expires_at: int
    registered: bool  # the holder still has a worker row
    hostname: str | None
    pid: int | None
    stopped_at: int | None


class ScheduleRow(NamedTuple):
    """A `job_schedules` row, in `layout.SCHEDULE_COLUMNS` order (times in epoch ms)."""

    id: str
    type: str
    name: str  # "" for the type's singleton
    trigger: str  # JSON
    payload: str  # JSON
    catch_up: str  # JSON
    enabled: int
    next_run: int | None
    last_run: int | None
    fire_count: int
    metadata: str  # JSON
    created_at: int
    updated_at: int
    # Added by SQLite 14 / PostgreSQL 10 (issue 24), last so positions above stay.
    overlap: str = "allow"  # "allow" | "skip" | "buffer_one"
    jitter_ms: int = 0
    skipped_count: int = 0  # natural fires `overlap` skipped


class EnsuredSchedule(NamedTuple):
    """What `ensure_schedule` did: the row as stored after it, and whether it inserted
    the row or which columns it set on the one already there (none: it was as asked)."""

    row: ScheduleRow
    inserted: bool
    changed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What to do with a dead worker's live rows, decided above the dialects
    (`jobledger._core.recovery.plan_recovery`): ids to cancel (with the reason), running
    rows to reset to pending, waiting rows to disown."""

    cancel: tuple[tuple[str, str], ...] = ()
    reset: tuple[str, ...] = ()
    disown: tuple[str, ...] = ()


@dataclass(slots=True)
class RecoveryStats:
    cancelled: list[JobRow] = field(default_factory=list)
    reset: int = 0
    kept: int = 0


def lease_row(row: Any) -> LeaseRow | None:
    """A dialect's `LEADER_WITH_HOLDER` tuple as a `LeaseRow` (None: no lease row yet)."""
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


def schedule_row(row: Any) -> ScheduleRow:
    """A dialect's schedule tuple as a `ScheduleRow`."""
    return ScheduleRow(*row)
