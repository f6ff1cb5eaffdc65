"""Turning an `enqueue` call into a validated `NewJob`, before anything is written.

Validation order: job type, payload (against its type, then its JSON size), max_attempts,
timeout, idempotency key, priority, run_at/delay, metadata, queue. Any failure raises a
`JobValidationError` with its stable code; nothing has been written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from jobledger._core.backoff import validate_max_attempts
from jobledger._core.registry import HandlerSpec, JobType, dumps, validate_timeout
from jobledger._runtime.ids import new_id
from jobledger._storage.interface import NewJob
from jobledger.clock import to_ms
from jobledger.errors import JobValidationError

__all__ = ["UNSET", "EnqueueOptions", "JobSpec", "prepare"]

P = TypeVar("P")


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class JobSpec(Generic[P]):
    """One entry of `enqueue_many` with options of its own; unset ones come from the call."""

    payload: P
    idempotency_key: str | None = UNSET
    priority: int = UNSET
    run_at: datetime | None = UNSET
    delay: float | timedelta | None = UNSET
    metadata: Mapping[str, Any] | None = UNSET


@dataclass(slots=True)
class EnqueueOptions:
    queue: str | None = None
    priority: int = 0
    idempotency_key: str | None = None
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    timeout: float | None = UNSET
    max_attempts: int | None = None
    metadata: Mapping[str, Any] | None = None
    parent_id: str | None = None
    schedule_id: str | None = None

    def merged(self, spec: JobSpec[Any]) -> EnqueueOptions:
        o = EnqueueOptions(
            queue=self.queue,
            priority=self.priority,
            idempotency_key=self.idempotency_key,
            run_at=self.run_at,
            delay=self.delay,
            timeout=self.timeout,
            max_attempts=self.max_attempts,
            metadata=self.metadata,
            parent_id=self.parent_id,
            schedule_id=self.schedule_id,
        )
        for name in ("idempotency_key", "priority", "run_at", "delay", "metadata"):
            value = getattr(spec, name)
            if value is not UNSET:
                setattr(o, name, value)
        return o


def prepare(
    job_type: JobType[Any],
    spec: HandlerSpec[Any] | None,
    payload: Any,
    opts: EnqueueOptions,
    *,
    now_ms: int,
    enqueued_by: str,
    max_payload_bytes: int,
) -> NewJob:
    value, text = job_type.encode(payload, max_bytes=max_payload_bytes)
    max_attempts = validate_max_attempts(
        opts.max_attempts
        if opts.max_attempts is not None
        else (spec.retry.max_attempts if spec is not None else 3)
    )
    timeout = (
        (spec.timeout if spec is not None else None)
        if opts.timeout is UNSET
        else validate_timeout(opts.timeout)
    )
    key = opts.idempotency_key
    if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 500):
        raise JobValidationError(
            f"idempotency_key must be a non-empty string of at most 500 characters: {key!r}",
            code="JOB_INVALID_IDEMPOTENCY_KEY",
            params={"idempotency_key": repr(key)[:600]},
        )
    priority = opts.priority
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > 2**62:
        raise JobValidationError(
            f"priority must be an integer, not {priority!r}",
            code="JOB_INVALID_OPTION",
            params={"priority": repr(priority)},
        )
    scheduled_at = _scheduled_at(opts.run_at, opts.delay, now_ms)
    metadata = "{}"
    if opts.metadata is not None:
        if not isinstance(opts.metadata, Mapping):
            raise JobValidationError("metadata must be a mapping", code="JOB_INVALID_OPTION")
        try:
            metadata = dumps(dict(opts.metadata))
        except (TypeError, ValueError) as exc:
            raise JobValidationError(
                f"metadata must be JSON: {exc}", code="JOB_INVALID_OPTION"
            ) from None
    queue = opts.queue
    if queue is None:
        queue = spec.queue_for(value) if spec is not None else job_type.name
    elif not isinstance(queue, str) or not queue or len(queue) > 200:
        raise JobValidationError(
            f"queue must be a non-empty string of at most 200 characters, not {queue!r}",
            code="JOB_INVALID_OPTION",
        )
    return NewJob(
        id=new_id(now_ms),
        type=job_type.name,
        status="delayed" if scheduled_at > now_ms else "pending",
        queue=queue,
        priority=priority,
        payload=text,
        max_attempts=max_attempts,
        timeout_ms=None if timeout is None else max(1, round(timeout * 1000)),
        idempotency_key=key,
        parent_id=opts.parent_id,
        schedule_id=opts.schedule_id,
        metadata=metadata,
        enqueued_by=enqueued_by,
        scheduled_at=scheduled_at,
        created_at=now_ms,
    )


def _scheduled_at(run_at: datetime | None, delay: float | timedelta | None, now_ms: int) -> int:
    if run_at is not None and delay is not None:
        raise JobValidationError("give run_at or delay, not both", code="JOB_INVALID_OPTION")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise JobValidationError(
                f"run_at must be a datetime, not {run_at!r}", code="JOB_INVALID_OPTION"
            )
        return to_ms(run_at)
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise JobValidationError(
                f"delay must be a number of seconds >= 0, not {delay!r}",
                code="JOB_INVALID_OPTION",
            )
        return now_ms + round(seconds * 1000)
    return now_ms
