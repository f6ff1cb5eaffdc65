"""The row layout every backend shares: column lists and positions, in one place.

A job row (`JobRow`) is a tuple of `JOB_COLUMNS` in this order on every backend; each
dialect's queries select these columns in this order, and everything above the storage
package reads rows by these positions (or, beyond the hot path, through the typed values
built from them). A schedule row is `SCHEDULE_COLUMNS` likewise.
"""

from __future__ import annotations

__all__ = [
    "C_ATTEMPT",
    "C_CANCEL",
    "C_CREATED_AT",
    "C_ENQUEUED_BY",
    "C_ERROR",
    "C_FINISHED_AT",
    "C_ID",
    "C_KEY",
    "C_MAX_ATTEMPTS",
    "C_METADATA",
    "C_OUTPUT",
    "C_PARENT",
    "C_PAYLOAD",
    "C_PRIORITY",
    "C_PROGRESS",
    "C_PROGRESS_DETAIL",
    "C_QUEUE",
    "C_RETRY_OF",
    "C_SCHEDULE",
    "C_SCHEDULED_AT",
    "C_STARTED_AT",
    "C_STATUS",
    "C_STEP",
    "C_TIMEOUT",
    "C_TYPE",
    "C_UPDATED_AT",
    "C_WORKER",
    "C_WORKFLOW",
    "JOB_COLUMNS",
    "JOB_COLUMNS_BEFORE_RETRY_OF",
    "JOB_COLUMNS_BEFORE_WORKFLOWS",
    "SCHEDULE_COLUMNS",
    "older_job_columns",
]

JOB_COLUMNS = (
    "id, type, status, queue, priority, payload, output, error, attempt, max_attempts, "
    "timeout_ms, idempotency_key, parent_id, schedule_id, metadata, progress, "
    "progress_detail, cancel_requested, worker_id, scheduled_at, started_at, finished_at, "
    "created_at, updated_at, enqueued_by, retry_of, workflow_id, step"
)
# Positions in JOB_COLUMNS.
C_ID, C_TYPE, C_STATUS, C_QUEUE, C_PRIORITY, C_PAYLOAD, C_OUTPUT, C_ERROR = range(8)
C_ATTEMPT, C_MAX_ATTEMPTS, C_TIMEOUT, C_KEY, C_PARENT, C_SCHEDULE, C_METADATA = range(8, 15)
C_PROGRESS, C_PROGRESS_DETAIL, C_CANCEL, C_WORKER, C_SCHEDULED_AT = range(15, 20)
C_STARTED_AT, C_FINISHED_AT, C_CREATED_AT, C_UPDATED_AT, C_ENQUEUED_BY = range(20, 25)
# Added by the `retry_of` migrations, last, so no earlier position moves: the job this row
# re-runs (`jobs.retry`), None on every other row.
C_RETRY_OF = 25
# Added by the workflow migrations (SQLite 11, PostgreSQL 8), last likewise: the job's
# workflow and step name, None on every job outside a workflow.
C_WORKFLOW, C_STEP = 26, 27

# JOB_COLUMNS for a database no worker has migrated to `retry_of` (or to workflows) yet
# (observers read such a file or schema as it is): the missing columns read as NULL.
_WORKFLOW_COLUMNS = "workflow_id, step"
_NO_WORKFLOW = "NULL AS workflow_id, NULL AS step"
JOB_COLUMNS_BEFORE_WORKFLOWS = JOB_COLUMNS.removesuffix(_WORKFLOW_COLUMNS) + _NO_WORKFLOW
JOB_COLUMNS_BEFORE_RETRY_OF = (
    JOB_COLUMNS.removesuffix("retry_of, " + _WORKFLOW_COLUMNS) + "NULL AS retry_of, " + _NO_WORKFLOW
)


def older_job_columns(columns: set[str]) -> str | None:
    """What to read instead of JOB_COLUMNS from a `jobs` table with `columns` (None: it
    has them all, or it has no columns: no table, which the first read reports)."""
    if not columns:
        return None
    if "retry_of" not in columns:
        return JOB_COLUMNS_BEFORE_RETRY_OF
    if "workflow_id" not in columns:
        return JOB_COLUMNS_BEFORE_WORKFLOWS
    return None


SCHEDULE_COLUMNS = (
    "id, type, name, trigger, payload, catch_up, enabled, next_run, last_run, fire_count, "
    "metadata, created_at, updated_at, overlap, jitter_ms, skipped_count"
)
