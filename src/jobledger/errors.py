"""Every error jobledger raises, each with a stable `.code` and `.params`.

Codes are a public contract: they are added, never renamed. A caller matches on
`err.code` (or on the class), never on the message text.

    JobError                         .code, .params, .retryable
    ├── JobValidationError           bad input; nothing was written
    │     JOB_UNKNOWN_TYPE, JOB_PAYLOAD_INVALID, JOB_PAYLOAD_TOO_LARGE,
    │     JOB_INVALID_MAX_ATTEMPTS, JOB_INVALID_TIMEOUT, JOB_CANCEL_REASON_TOO_LONG,
    │     JOB_INVALID_IDEMPOTENCY_KEY, JOB_BATCH_INVALID, JOB_FILTER_REQUIRED,
    │     JOB_INVALID_OPTION, JOB_WORKFLOW_INVALID (params: step, reason)
    ├── JobNotFound                  JOB_NOT_FOUND
    │   (JobError itself)            JOB_NOT_RETRYABLE: `retry` of a job that is not terminal;
    │                                JOB_NOT_COMPLETED: `handle.result()`/`decode_output` of
    │                                a job that failed, was cancelled or has not finished;
    │                                JOB_RESULT_INVALID: its output does not fit the result type
    ├── ScheduleError                JOB_SCHEDULE_TRIGGER_INVALID, JOB_SCHEDULE_NAME_INVALID,
    │                                JOB_SCHEDULE_NAME_CONFLICT, JOB_SCHEDULE_SINGLETON_EXISTS,
    │                                JOB_SCHEDULE_NAME_REQUIRED, JOB_SCHEDULE_NOT_FOUND_BY_NAME,
    │                                JOB_SCHEDULE_NOT_FOUND (`backfill_job_schedule`)
    ├── HandlerRegistrationError     JOB_HANDLER_ALREADY_REGISTERED, JOB_HANDLER_INVALID,
    │                                JOB_HANDLER_EXECUTOR: an executor the handler cannot
    │                                run in (an async def in a thread or a process, a
    │                                lambda or nested function in a process); a plain
    │                                JobError with it comes from ctx.patch_metadata,
    │                                ctx.lock and ctx.upstream in a process handler
    ├── PermanentError               raised *by handlers*: fail now, do not retry
    ├── JobCancelled                 JOB_CANCELLED (raised by ctx.raise_if_cancelled())
    └── StorageError                 the database refused
          ├── DatabaseBusy           DB_BUSY: the write lock was not had in time; try later
          ├── WriteTransactionFailed DB_WRITE_TX_FAILED: a write failed and was rolled back
          ├── DatabaseFull           DB_FULL: the disk or max_page_count is exhausted
          └── SchemaError            DB_SCHEMA: the file's schema is newer than this library,
                                     or it is not a jobledger database this process can
                                     use (garbage, foreign, truncated, read-only); it is
                                     left unchanged

Codes stored in job rows but never raised: `JOB_HANDLER_THREW`, `JOB_HANDLER_TIMEOUT`,
`JOB_FINALIZE_TX_FAILED`, `JOB_ORPHANED`, `JOB_WORKER_LOST`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "DatabaseBusy",
    "DatabaseFull",
    "HandlerRegistrationError",
    "JobCancelled",
    "JobError",
    "JobNotFound",
    "JobValidationError",
    "PermanentError",
    "ScheduleError",
    "SchemaError",
    "StorageError",
    "WriteTransactionFailed",
]


class JobError(Exception):
    """Base of every jobledger error."""

    code: str = "JOB_ERROR"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        params: Mapping[str, Any] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.params: dict[str, Any] = dict(params or {})
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class JobValidationError(JobError):
    """Input was rejected before anything was written."""


class JobNotFound(JobError):
    code = "JOB_NOT_FOUND"


class JobClaimLost(JobError):
    """`ctx.transaction()` could not commit: this attempt no longer owns the job's row (it
    was rescued, cancelled or timed out), so nothing of the block was written."""

    code = "JOB_CLAIM_LOST"


class ScheduleError(JobError):
    """A schedule could not be registered, found or changed."""


class HandlerRegistrationError(JobError):
    code = "JOB_HANDLER_INVALID"


class PermanentError(JobError):
    """Raise from a handler to fail the job without retrying it.

    Stored as `JOB_HANDLER_THREW` with `retryable=False`, or under `code` when given.
    """

    code = "JOB_HANDLER_THREW"


class JobCancelled(JobError):
    """The job's cancel token fired (cancel, timeout or shutdown)."""

    code = "JOB_CANCELLED"


class StorageError(JobError):
    """The database refused an operation."""

    code = "DB_ERROR"


class DatabaseBusy(StorageError):
    code = "DB_BUSY"
    retryable = True


class WriteTransactionFailed(StorageError):
    code = "DB_WRITE_TX_FAILED"


class DatabaseFull(StorageError):
    code = "DB_FULL"


class SchemaError(StorageError):
    """The database file is newer than this library, or not one it can use; unchanged."""

    code = "DB_SCHEMA"
