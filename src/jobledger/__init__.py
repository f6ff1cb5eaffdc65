"""jobledger: a durable job queue and scheduler whose single source of truth is one SQL table."""

from jobledger._core.backoff import RetryPolicy
from jobledger._core.registry import JobHandler, JobType
from jobledger._runtime.context import CancelToken, JobContext
from jobledger._runtime.enqueue import JobSpec
from jobledger._runtime.events import JobEvent
from jobledger._runtime.handle import JobHandle
from jobledger._runtime.lifecycle import Hold
from jobledger._runtime.manager import JobManager, WriteTx
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
    "CancelToken",
    "Clock",
    "DatabaseBusy",
    "DatabaseFull",
    "DrainVerdict",
    "HandlerRegistrationError",
    "Hold",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobErrorInfo",
    "JobEvent",
    "JobHandle",
    "JobHandler",
    "JobManager",
    "JobNotFound",
    "JobSnapshot",
    "JobSpec",
    "JobStatus",
    "JobType",
    "JobValidationError",
    "MissedEvent",
    "PermanentError",
    "RetryPolicy",
    "ScheduleError",
    "ScheduleSnapshot",
    "SchemaError",
    "SettledEvent",
    "StorageError",
    "SystemClock",
    "WriteTransactionFailed",
    "WriteTx",
]
