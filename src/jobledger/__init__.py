"""jobledger: a durable job queue and scheduler whose single source of truth is one SQL table."""

from jobledger._core.backoff import RetryPolicy
from jobledger._core.enqueue import JobSpec
from jobledger._core.rate import RateLimit
from jobledger._core.registry import JobHandler, JobType
from jobledger._core.workflow import Step as WorkflowStep
from jobledger._runtime.context import CancelToken, JobContext
from jobledger._runtime.events import JobEvent
from jobledger._runtime.handle import JobHandle
from jobledger._runtime.lifecycle import Hold
from jobledger._runtime.manager import JobManager, WriteTx
from jobledger._runtime.transactions import JobTransaction
from jobledger._runtime.workflow import Workflow, WorkflowHandle
from jobledger._scheduling.scheduler import SchedulerService
from jobledger._scheduling.triggers import (
    AfterStartup,
    AllMissed,
    CatchUpPolicy,
    Cron,
    Interval,
    Once,
    SkipMissed,
    Trigger,
)
from jobledger._types import (
    AttemptSnapshot,
    AuditEntry,
    CancelManyResult,
    DrainVerdict,
    Explanation,
    JobErrorInfo,
    JobSnapshot,
    JobStatus,
    LogLine,
    MissedEvent,
    QueueInfo,
    QueueLimits,
    Reason,
    ScheduleSnapshot,
    SettledEvent,
    WorkflowEdge,
    WorkflowInfo,
    WorkflowSnapshot,
)
from jobledger.clock import Clock, SystemClock
from jobledger.errors import (
    DatabaseBusy,
    DatabaseFull,
    HandlerRegistrationError,
    JobCancelled,
    JobClaimLost,
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
    "AfterStartup",
    "AllMissed",
    "AttemptSnapshot",
    "AuditEntry",
    "CancelManyResult",
    "CancelToken",
    "CatchUpPolicy",
    "Clock",
    "Cron",
    "DatabaseBusy",
    "DatabaseFull",
    "DrainVerdict",
    "Explanation",
    "HandlerRegistrationError",
    "Hold",
    "Interval",
    "JobCancelled",
    "JobClaimLost",
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
    "JobTransaction",
    "JobType",
    "JobValidationError",
    "LogLine",
    "MissedEvent",
    "Once",
    "PermanentError",
    "QueueInfo",
    "QueueLimits",
    "RateLimit",
    "Reason",
    "RetryPolicy",
    "ScheduleError",
    "ScheduleSnapshot",
    "SchedulerService",
    "SchemaError",
    "SettledEvent",
    "SkipMissed",
    "StorageError",
    "SystemClock",
    "Trigger",
    "Workflow",
    "WorkflowEdge",
    "WorkflowHandle",
    "WorkflowInfo",
    "WorkflowSnapshot",
    "WorkflowStep",
    "WriteTransactionFailed",
    "WriteTx",
]
