"""The storage contract: named operations, typed values, no SQL.

The engine talks to storage only through `Store` (River's shape: "claim", "finalize if
running", "promote due", not SQL strings). Every state change is a compare-and-set:
claims move `pending -> running` only for unclaimed rows; finalize/retry/progress and
metadata writes apply only while the row still carries the caller's claim
`(worker_id, attempt)` — the fencing token — so a worker presumed dead cannot overwrite a
job that was rescued and re-claimed by someone else.

Times are epoch milliseconds from the injected clock; storage never reads the time.
A second backend (PostgreSQL) implements the same protocol and passes the same suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "APPLIED",
    "ClaimResult",
    "ClaimedJob",
    "JobFilter",
    "JobRow",
    "NewJob",
    "Outcome",
    "OutcomeKind",
]

# A full `jobs` row in the column order of `queries.JOB_COLUMNS`.
JobRow = tuple[Any, ...]
# `finalize`'s answer for an outcome written with `want_row=False`: applied, row not read.
APPLIED: JobRow = ()


@dataclass(slots=True)
class NewJob:
    id: str
    type: str
    status: Literal["pending", "delayed"]
    queue: str
    priority: int
    payload: str
    max_attempts: int
    timeout_ms: int | None
    idempotency_key: str | None
    parent_id: str | None
    schedule_id: str | None
    metadata: str
    enqueued_by: str
    scheduled_at: int
    created_at: int


@dataclass(slots=True)
class ClaimedJob:
    id: str
    type: str
    queue: str
    priority: int
    payload: str
    attempt: int
    max_attempts: int
    timeout_ms: int | None
    metadata: str
    parent_id: str | None
    schedule_id: str | None
    scheduled_at: int
    started_at: int


@dataclass(slots=True)
class ClaimResult:
    jobs: list[ClaimedJob]
    global_blocked: bool


OutcomeKind = Literal["completed", "failed", "cancelled", "retry"]


@dataclass(slots=True)
class Outcome:
    """How one claimed attempt ended, to be written as a fenced compare-and-set."""

    job_id: str
    worker_id: str
    attempt: int
    kind: OutcomeKind
    output: str | None = None
    error: str | None = None
    retry_at: int | None = None  # for kind == "retry"
    progress: float | None = None  # last reported progress, persisted with the outcome
    progress_detail: str | None = None
    release_locks: bool = False
    # False: nobody needs the terminal row, so `finalize` answers APPLIED (or None when
    # the fence did not match) instead of reading the row back.
    want_row: bool = True


@dataclass(frozen=True, slots=True)
class JobFilter:
    status: tuple[str, ...] = ()
    queue: str | None = None
    type: str | None = None
    schedule_id: str | None = None
    parent_id: str | None = None


class Store(Protocol):
    """What the engine needs from a backend (SQLite today)."""

    def enqueue(self, jobs: Sequence[NewJob]) -> list[JobRow]: ...
    def claim(
        self,
        queue: str,
        *,
        queue_cap: int,
        global_cap: int,
        limit: int,
        now_ms: int,
        worker_id: str,
    ) -> ClaimResult: ...
    def finalize(self, outcomes: Sequence[Outcome], now_ms: int) -> list[JobRow | None]: ...
    def promote_due(self, now_ms: int) -> list[str]: ...
    def get(self, job_id: str) -> JobRow | None: ...
    def list(self, flt: JobFilter, *, limit: int, offset: int) -> list[JobRow]: ...
    def count(self, flt: JobFilter) -> int: ...
