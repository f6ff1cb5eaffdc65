"""jobledger: a durable job queue and scheduler whose single source of truth is one SQL table."""

from jobledger._types import (
    CancelManyResult,
    DrainVerdict,
    JobErrorInfo,
    JobSnapshot,
    JobStatus,
    MissedEvent,
    ScheduleSnapshot,
    SettledEvent,
)
from jobledger.clock import Clock, SystemClock
from jobledger.errors import (
    DatabaseBusy,
    DatabaseFull,
    HandlerRegistrationError,
    JobCancelled,
    JobError,
    JobNotFound,
    JobValidationError,
    PermanentError,
    ScheduleError,
    SchemaError,
    StorageError,
    WriteTransactionFailed,
)

__all__ = [
    "CancelManyResult",
    "Clock",
    "DatabaseBusy",
    "DatabaseFull",
    "DrainVerdict",
    "HandlerRegistrationError",
    "JobCancelled",
    "JobError",
    "JobErrorInfo",
    "JobNotFound",
    "JobSnapshot",
    "JobStatus",
    "JobValidationError",
    "MissedEvent",
    "PermanentError",
    "ScheduleError",
    "ScheduleSnapshot",
    "SchemaError",
    "SettledEvent",
    "StorageError",
    "SystemClock",
    "WriteTransactionFailed",
]
