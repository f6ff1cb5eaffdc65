"""Re-running jobs (`jobs.retry`, `jobs.retry_many`): the checks made before the write.

A re-run is a new row; the old one stays as it ended (terminal rows are never reopened,
`_core/states.py`). What the new row copies is `_storage/interface.retry_row`'s to say;
the write itself is one store operation (`Store.retry_job`, `Store.retry_matching`), so a
row can only be re-run while it is terminal at the moment of the write.

Validation order: the job id, then (for `retry`) whether the job exists and is terminal,
then the payload against its type. Any failure raises a `JobError` with its stable code;
nothing has been written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobledger._core.limits import findable
from jobledger._core.registry import HandlerSpec, JobType
from jobledger._core.search import Search
from jobledger._storage import layout as L
from jobledger._storage.interface import TERMINAL, JobRow, RetryFilter
from jobledger.errors import JobError, JobNotFound, JobValidationError

__all__ = ["MAX_RETRY_MANY", "check_retry_id", "not_retryable", "retry_filter", "retry_payload"]

MAX_RETRY_MANY = 1000


def check_retry_id(job_id: object) -> str:
    """`job_id` as a str; JOB_NOT_FOUND for a string no stored row can have."""
    if not findable(job_id, "job_id"):
        raise not_found(str(job_id))
    assert isinstance(job_id, str)  # findable() raised for anything else
    return job_id


def not_found(job_id: str) -> JobNotFound:
    return JobNotFound(f"no job with id {job_id!r}", params={"job_id": job_id})


def not_retryable(job_id: str, status: str) -> JobError:
    return JobError(
        f"job {job_id!r} is {status}; only a completed, failed or cancelled job can be retried",
        code="JOB_NOT_RETRYABLE",
        params={"job_id": job_id, "status": status},
    )


def retry_payload(
    old: JobRow, spec: HandlerSpec[Any] | None, payload: Any, *, max_bytes: int
) -> str:
    """The stored JSON of a payload given to `retry` for the terminal row `old`: validated
    as `enqueue` would (against the handler's type when this manager has one, else as any
    JSON value), size included."""
    job_type = spec.job_type if spec is not None else JobType(old[L.C_TYPE], object)
    return job_type.encode(payload, max_bytes=max_bytes)[1]


def retry_filter(
    status: object,
    queue: str | None,
    type_name: str | None,
    limit: object,
    search: Search | None = None,
) -> RetryFilter:
    """`retry_many`'s filter, or JOB_INVALID_OPTION: terminal statuses only (one or a
    sequence), `limit` an integer in [1, MAX_RETRY_MANY]."""
    raw: tuple[object, ...] = (
        tuple(status) if isinstance(status, Sequence) and not isinstance(status, str) else (status,)
    )
    statuses = tuple(str(s) for s in raw if isinstance(s, str))
    if not raw or len(statuses) != len(raw) or any(s not in TERMINAL for s in statuses):
        raise JobValidationError(
            f"status must be a terminal status ({', '.join(TERMINAL)}) or a list of them, "
            f"not {status!r}",
            code="JOB_INVALID_OPTION",
            params={"status": repr(status)[:200]},
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RETRY_MANY:
        raise JobValidationError(
            f"limit must be an integer in [1, {MAX_RETRY_MANY}], not {limit!r}",
            code="JOB_INVALID_OPTION",
            params={"limit": repr(limit)[:200]},
        )
    return RetryFilter(tuple(dict.fromkeys(statuses)), queue, type_name, search)
