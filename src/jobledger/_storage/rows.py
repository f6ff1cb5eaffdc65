"""Turning stored rows into snapshots (the read model's one mapping): jobs, attempts and
workflows, so `jobs.get_workflow()` and the console agree on every field.

Defensive on purpose: a stored `error` that is not the expected object becomes
`JOB_CORRUPT_ERROR_ROW`, a payload or output that does not parse (not JSON, or nested
past the parser's recursion limit) reads as its text, and metadata that is not an object
as `{}`, instead of breaking every read of the table.

`row_snapshot` is `snapshot_from_row` decoded on first use, for the snapshots a finalize
resolves handles with (bench/handles.py: one per job, most read for their status only).
It is a `JobSnapshot` in every way a caller can observe but `type(s) is JobSnapshot`:
equal to the eager snapshot of the same row (both ways), the same repr and hash, pickled
and copied as a plain `JobSnapshot`; tests/unit/test_rows.py holds it to that.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from jobledger._storage import layout as L
from jobledger._storage.interface import SUCCESSOR_SEP, JobRow, WorkflowHead, user_key
from jobledger._storage.observe import STATUSES, WorkflowRecord
from jobledger._storage.records import AttemptRow
from jobledger._types import (
    AttemptSnapshot,
    JobErrorInfo,
    JobSnapshot,
    JobStatus,
    LogLine,
    WorkflowEdge,
    WorkflowInfo,
    WorkflowSnapshot,
    workflow_status,
)
from jobledger.clock import from_ms

__all__ = [
    "attempt_snapshot",
    "error_from_json",
    "error_to_json",
    "json_or_text",
    "logs_from_json",
    "lost_error",
    "row_snapshot",
    "snapshot_from_row",
    "workflow_info",
    "workflow_snapshot",
]

_OUTCOMES = frozenset({"completed", "retry", "failed", "cancelled", "interrupted", "lost"})


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
            traceback=None if raw.get("traceback") is None else str(raw["traceback"]),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        return JobErrorInfo(
            code="JOB_CORRUPT_ERROR_ROW", message="the stored error is unreadable", retryable=False
        )


# The texts most columns hold (an empty payload or metadata, a handler that returned
# None), decoded without the parser: a snapshot is made for every handle a finalize
# resolves (bench/handles.py), so its cost is per job.
_SCALARS: dict[str, Any] = {"null": None, "true": True, "false": False}


def json_or_text(text: str | None) -> Any:
    if text is None:
        return None
    if text == "{}":
        return {}  # a new dict each time: the snapshot's caller may change it
    if text in _SCALARS:
        return _SCALARS[text]
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        # Not JSON, or nested deeper than the parser recurses (a row another program
        # wrote): its text, rather than an exception on every read that meets it.
        return text


def _time(ms: int, same_ms: int, same: datetime) -> datetime:
    """`from_ms(ms)`, reusing `same` (datetimes are immutable) when `ms` is its value:
    finished_at and updated_at, created_at and scheduled_at are often equal."""
    return same if ms == same_ms else from_ms(ms)


# A snapshot's slots are set directly, in field order: a frozen dataclass's `__init__`
# goes through `object.__setattr__` once per field, half of a snapshot's cost, and one
# is made for every handle a finalize resolves (bench/handles.py).
# tests/unit/test_rows.py checks the order against `dataclasses.fields`.
_SETTERS = tuple(getattr(JobSnapshot, f.name).__set__ for f in dataclasses.fields(JobSnapshot))
_new = object.__new__
_STATUS = {s.value: s for s in JobStatus}


def snapshot_from_row(row: JobRow) -> JobSnapshot:
    snap: JobSnapshot = _new(JobSnapshot)
    for put, value in zip(_SETTERS, _values(row), strict=True):
        put(snap, value)
    return snap


def _values(row: JobRow) -> tuple[Any, ...]:
    """The snapshot's field values, in field order."""
    timeout_ms = row[L.C_TIMEOUT]
    started = row[L.C_STARTED_AT]
    finished = row[L.C_FINISHED_AT]
    created_ms = row[L.C_CREATED_AT]
    created = from_ms(created_ms)
    finished_at = None if finished is None else from_ms(finished)
    key = row[L.C_KEY]
    if key is not None and SUCCESSOR_SEP in key:
        key = user_key(key)
    return (
        row[L.C_ID],  # id
        row[L.C_TYPE],  # type
        _STATUS[row[L.C_STATUS]],  # status
        row[L.C_QUEUE],  # queue
        row[L.C_PRIORITY],  # priority
        json_or_text(row[L.C_PAYLOAD]),  # payload
        json_or_text(row[L.C_OUTPUT]),  # output
        error_from_json(row[L.C_ERROR]),  # error
        row[L.C_ATTEMPT],  # attempt
        row[L.C_MAX_ATTEMPTS],  # max_attempts
        None if timeout_ms is None else timeout_ms / 1000,  # timeout
        key,  # idempotency_key
        row[L.C_PARENT],  # parent_id
        row[L.C_SCHEDULE],  # schedule_id
        meta if isinstance(meta := json_or_text(row[L.C_METADATA]), dict) else {},  # metadata
        row[L.C_PROGRESS],  # progress
        row[L.C_PROGRESS_DETAIL],  # progress_detail
        bool(row[L.C_CANCEL]),  # cancel_requested
        row[L.C_WORKER],  # worker_id
        _time(row[L.C_SCHEDULED_AT], created_ms, created),  # scheduled_at
        None if started is None else from_ms(started),  # started_at
        finished_at,  # finished_at
        created,  # created_at
        (  # updated_at
            from_ms(row[L.C_UPDATED_AT])
            if finished_at is None
            else _time(row[L.C_UPDATED_AT], finished, finished_at)
        ),
        row[L.C_ENQUEUED_BY],  # enqueued_by
        row[L.C_RETRY_OF],  # retry_of
        row[L.C_WORKFLOW],  # workflow_id
        row[L.C_STEP],  # step
    )


_FIELDS = tuple(f.name for f in dataclasses.fields(JobSnapshot))
# Every field through ordinary attribute access (which decodes a row snapshot first).
_field_values: Callable[[JobSnapshot], tuple[Any, ...]] = operator.attrgetter(*_FIELDS)
# Decoding a row snapshot happens once, under this lock: two threads reading the same
# snapshot (a handle awaited on another loop) must see the same payload dict, which a
# caller may change.
_fill_lock = threading.Lock()


class _RowSnapshot(JobSnapshot):
    """A `JobSnapshot` holding its row, with `id` and `status` set when made and every
    other field decoded from the row the first time one is read: `__getattr__` runs only
    for a slot not set yet. Then the row is dropped."""

    __slots__ = ("_row",)

    def __getattr__(self, name: str) -> Any:
        if name not in _LAZY:
            raise AttributeError(f"'JobSnapshot' object has no attribute '{name}'")
        with _fill_lock:
            try:
                row = _get_row(self)
            except AttributeError:
                row = None  # decoded by another thread meanwhile
            if row is not None:
                for put, value in zip(_SETTERS, _values(row), strict=True):
                    put(self, value)
                _drop_row(self)
        return object.__getattribute__(self, name)

    # The dataclass's `__eq__` compares only snapshots of one class: equal to the eager
    # snapshot of the same row either way round (Python asks the subclass first).
    def __eq__(self, other: object) -> bool:
        if isinstance(other, JobSnapshot):
            return _field_values(self) == _field_values(other)
        return NotImplemented

    __hash__ = JobSnapshot.__hash__

    def __reduce__(self) -> tuple[type[JobSnapshot], tuple[Any, ...]]:
        return JobSnapshot, _field_values(self)


# The dataclass's repr names `type(self).__qualname__`.
_RowSnapshot.__qualname__ = _RowSnapshot.__name__ = JobSnapshot.__qualname__
_LAZY = frozenset(_FIELDS) - {"id", "status"}
_get_row = _RowSnapshot._row.__get__  # type: ignore[attr-defined]
_put_row = _RowSnapshot._row.__set__  # type: ignore[attr-defined]
_drop_row = _RowSnapshot._row.__delete__  # type: ignore[attr-defined]
_put_id = _SETTERS[_FIELDS.index("id")]
_put_status = _SETTERS[_FIELDS.index("status")]


def row_snapshot(row: JobRow) -> JobSnapshot:
    """`snapshot_from_row(row)`, decoded on first use (see the module docstring)."""
    snap = _new(_RowSnapshot)
    _put_row(snap, row)
    _put_id(snap, row[L.C_ID])
    _put_status(snap, _STATUS[row[L.C_STATUS]])
    return snap


def lost_error(worker_id: str) -> str:
    """The error of an attempt whose worker died while it ran (no traceback: the
    library, not the handler, tells it)."""
    return error_to_json(
        JobErrorInfo(
            "JOB_WORKER_LOST",
            f"worker {worker_id} stopped heartbeating while the attempt ran",
            True,
            {"worker_id": worker_id},
        )
    )


def logs_from_json(text: str | None) -> list[LogLine]:
    """Stored `[[at_ms, level, message], ...]`; an unreadable list reads as no lines."""
    if not text:
        return []
    try:
        return [
            LogLine(from_ms(int(at)), str(level), str(msg)) for at, level, msg in json.loads(text)
        ]
    except (ValueError, TypeError, RecursionError):
        return []


def attempt_snapshot(row: AttemptRow) -> AttemptSnapshot:
    outcome = row.outcome if row.outcome in _OUTCOMES else "lost"
    return AttemptSnapshot(
        attempt=row.attempt + 1,
        worker_id=row.worker_id,
        started_at=None if row.started_at is None else from_ms(row.started_at),
        finished_at=from_ms(row.finished_at),
        outcome=outcome,  # type: ignore[arg-type]  # checked against _OUTCOMES
        error=error_from_json(row.error),
        logs=logs_from_json(row.logs),
    )


def workflow_snapshot(
    head: WorkflowHead,
    rows: Sequence[JobRow],
    edges: Sequence[tuple[str, str, str, bool]],
) -> WorkflowSnapshot:
    """The snapshot of `Store.get_workflow`'s row, its `workflow_jobs` and its
    `workflow_edges`."""
    jobs = tuple(snapshot_from_row(r) for r in rows)
    return WorkflowSnapshot(
        head[0],
        head[1],
        workflow_status(j.status for j in jobs),
        jobs,
        from_ms(head[2]),
        tuple(
            WorkflowEdge(up, down, "run" if policy == "run" else "cancel", many)
            for up, down, policy, many in edges
        ),
        head.retry_of,
    )


def workflow_info(record: WorkflowRecord) -> WorkflowInfo:
    counts = dict(zip(STATUSES, record.counts, strict=True))
    present = (_STATUS[s] for s, n in counts.items() if n)
    return WorkflowInfo(
        record.id, record.name, workflow_status(present), from_ms(record.created_at), counts
    )
