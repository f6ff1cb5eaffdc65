"""Turning stored job rows into `JobSnapshot`s (the read model's one mapping).

Defensive on purpose: a stored `error` that is not the expected object becomes
`JOB_CORRUPT_ERROR_ROW` instead of breaking every read of the table.
"""

from __future__ import annotations

import json
from typing import Any

from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow
from jobledger._types import JobErrorInfo, JobSnapshot, JobStatus
from jobledger.clock import from_ms

__all__ = ["error_from_json", "error_to_json", "snapshot_from_row"]


def error_to_json(info: JobErrorInfo) -> str:
    return json.dumps(info.to_json(), separators=(",", ":"), ensure_ascii=False, default=str)


def error_from_json(text: str | None) -> JobErrorInfo | None:
    if text is None:
        return None
    try:
        raw = json.loads(text)
        return JobErrorInfo(
            code=str(raw["code"]),
            message=str(raw["message"]),
            retryable=bool(raw["retryable"]),
            params=dict(raw.get("params") or {}),
        )
    except (ValueError, KeyError, TypeError):
        return JobErrorInfo(
            code="JOB_CORRUPT_ERROR_ROW", message="the stored error is unreadable", retryable=False
        )


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def snapshot_from_row(row: JobRow) -> JobSnapshot:
    timeout_ms = row[L.C_TIMEOUT]
    started = row[L.C_STARTED_AT]
    finished = row[L.C_FINISHED_AT]
    return JobSnapshot(
        id=row[L.C_ID],
        type=row[L.C_TYPE],
        status=JobStatus(row[L.C_STATUS]),
        queue=row[L.C_QUEUE],
        priority=row[L.C_PRIORITY],
        payload=_json(row[L.C_PAYLOAD]),
        output=_json(row[L.C_OUTPUT]),
        error=error_from_json(row[L.C_ERROR]),
        attempt=row[L.C_ATTEMPT],
        max_attempts=row[L.C_MAX_ATTEMPTS],
        timeout=None if timeout_ms is None else timeout_ms / 1000,
        idempotency_key=row[L.C_KEY],
        parent_id=row[L.C_PARENT],
        schedule_id=row[L.C_SCHEDULE],
        metadata=_json(row[L.C_METADATA]) or {},
        progress=row[L.C_PROGRESS],
        progress_detail=row[L.C_PROGRESS_DETAIL],
        cancel_requested=bool(row[L.C_CANCEL]),
        worker_id=row[L.C_WORKER],
        scheduled_at=from_ms(row[L.C_SCHEDULED_AT]),
        started_at=None if started is None else from_ms(started),
        finished_at=None if finished is None else from_ms(finished),
        created_at=from_ms(row[L.C_CREATED_AT]),
        updated_at=from_ms(row[L.C_UPDATED_AT]),
        enqueued_by=row[L.C_ENQUEUED_BY],
        retry_of=row[L.C_RETRY_OF],
    )
