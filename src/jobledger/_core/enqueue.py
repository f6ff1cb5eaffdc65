"""Turning an `enqueue` call into a validated row (or `NewJob`), before anything is written.

Validation order: job type, payload (against its type, then its JSON size), max_attempts,
timeout, idempotency key, priority, run_at/delay, unique_for/debounce, metadata, queue.
Any failure raises a `JobValidationError` with its stable code; nothing has been written.

`unique_for` and `debounce` cost an enqueue without them two `is None` tests: the row is
prepared as always, and `key_rule` (called only when one is set) says what the store
does with the key (`interface.KeyRule`). A debounced row is the row of an enqueue with
`delay=debounce`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar, cast

from jobledger._core.backoff import validate_max_attempts
from jobledger._core.ids import new_id, new_ids
from jobledger._core.limits import MAX_INT, MAX_MS, bad_name_char, is_finite_number
from jobledger._core.registry import HandlerSpec, JobType, encode_metadata, validate_timeout
from jobledger._storage.interface import JobRow, KeyRule, NewJob, new_row
from jobledger.clock import to_ms
from jobledger.errors import JobError, JobValidationError

__all__ = [
    "UNSET",
    "EnqueueOptions",
    "JobSpec",
    "key_rule",
    "prepare",
    "prepare_row",
    "prepare_rows",
]

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
    unique_for: float | timedelta | None = UNSET
    debounce: float | timedelta | None = UNSET


# The `JobSpec` fields an entry may set for itself, over the call's.
_SPEC_OPTIONS = (
    "idempotency_key",
    "priority",
    "run_at",
    "delay",
    "metadata",
    "unique_for",
    "debounce",
)


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
    unique_for: float | timedelta | None = None
    debounce: float | timedelta | None = None

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
            unique_for=self.unique_for,
            debounce=self.debounce,
        )
        for name in _SPEC_OPTIONS:
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
    r = prepare_row(  # positions as in `interface.fresh_row`
        job_type,
        spec,
        payload,
        opts,
        now_ms=now_ms,
        enqueued_by=enqueued_by,
        max_payload_bytes=max_payload_bytes,
    )
    return NewJob(
        id=r[0],
        type=r[1],
        status=r[2],
        queue=r[3],
        priority=r[4],
        payload=r[5],
        max_attempts=r[9],
        timeout_ms=r[10],
        idempotency_key=r[11],
        parent_id=r[12],
        schedule_id=r[13],
        metadata=r[14],
        enqueued_by=r[24],
        scheduled_at=r[19],
        created_at=r[22],
    )


def prepare_row(
    job_type: JobType[Any],
    spec: HandlerSpec[Any] | None,
    payload: Any,
    opts: EnqueueOptions,
    *,
    now_ms: int,
    enqueued_by: str,
    max_payload_bytes: int,
    job_id: str | None = None,
) -> JobRow:
    """One validated entry as the row it inserts (`interface.fresh_row`'s shape)."""
    value, text = job_type.encode(payload, max_bytes=max_payload_bytes)
    status, queue, priority, max_attempts, timeout_ms, key, metadata, scheduled_at = _options(
        job_type, spec, opts, now_ms
    )
    if queue is None:
        queue = spec.queue_for(value) if spec is not None else job_type.name
    return new_row(
        new_id(now_ms) if job_id is None else job_id,
        job_type.name,
        status,
        queue,
        priority,
        text,
        max_attempts,
        timeout_ms,
        key,
        opts.parent_id,
        opts.schedule_id,
        metadata,
        enqueued_by,
        scheduled_at,
        now_ms,
    )


def prepare_rows(
    job_type: JobType[Any],
    spec: HandlerSpec[Any] | None,
    entries: Sequence[Any],
    opts: EnqueueOptions,
    *,
    now_ms: int,
    enqueued_by: str,
    max_payload_bytes: int,
    rules: dict[int, KeyRule] | None = None,
) -> list[JobRow]:
    """`prepare_row` of every entry (payloads or `JobSpec`s); ids in entry order.

    Any invalid entry raises JOB_BATCH_INVALID listing every invalid entry. The call's
    own options are validated once, not per entry; only when they are invalid does each
    entry go through `prepare_row`, so every entry reports the error it always did
    (its payload's first, as validation order says).

    `rules`, when given, gets the `key_rule` of every entry prepared on its own options
    (a `JobSpec`, or any entry when the call's options are invalid) that has one, by
    index; the others follow the call's.
    """
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise JobValidationError(
            "enqueue_many takes a sequence of payloads",
            code="JOB_BATCH_INVALID",
            params={"entries": []},
        )
    ids = new_ids(now_ms, len(entries))
    try:
        shared: _Options | None = _options(job_type, spec, opts, now_ms)
    except JobError:
        shared = None
    rows: list[JobRow] = []
    errors: list[dict[str, Any]] = []
    if shared is not None:  # the names bound here are only read when `shared` is set
        status, queue, priority, max_attempts, timeout_ms, key, metadata, scheduled_at = shared
        if queue is None and (spec is None or not callable(spec.queue)):
            queue = spec.queue_for(None) if spec is not None else job_type.name
        parent_id = opts.parent_id
        schedule_id = opts.schedule_id
        name = job_type.name
        encode = job_type.encode
        resolver = None if queue is not None or spec is None else spec.queue_for
    for index, entry in enumerate(entries):
        try:
            if shared is None or isinstance(entry, JobSpec):
                entry_opts, payload = (
                    (opts.merged(entry), entry.payload)
                    if isinstance(entry, JobSpec)
                    else (opts, entry)
                )
                rows.append(
                    prepare_row(
                        job_type,
                        spec,
                        payload,
                        entry_opts,
                        now_ms=now_ms,
                        enqueued_by=enqueued_by,
                        max_payload_bytes=max_payload_bytes,
                        job_id=ids[index],
                    )
                )
                if rules is not None and (
                    entry_opts.unique_for is not None or entry_opts.debounce is not None
                ):
                    rules[index] = cast(KeyRule, key_rule(entry_opts))
                continue
            value, text = encode(entry, max_bytes=max_payload_bytes)
            rows.append(
                new_row(
                    ids[index],
                    name,
                    status,
                    # `resolver` is None exactly when the call fixed the queue.
                    cast(str, queue) if resolver is None else resolver(value),
                    priority,
                    text,
                    max_attempts,
                    timeout_ms,
                    key,
                    parent_id,
                    schedule_id,
                    metadata,
                    enqueued_by,
                    scheduled_at,
                    now_ms,
                )
            )
        except JobError as exc:
            errors.append({"index": index, "code": exc.code, "message": exc.message})
    if errors:
        raise JobValidationError(
            f"{len(errors)} of {len(entries)} entries are invalid; nothing was written",
            code="JOB_BATCH_INVALID",
            params={"entries": errors},
        )
    return rows


# status, queue (None: the handler's, per payload), priority, max_attempts, timeout_ms,
# idempotency_key, metadata JSON, scheduled_at
_Options = tuple[str, str | None, int, int, int | None, str | None, str, int]


def _options(
    job_type: JobType[Any], spec: HandlerSpec[Any] | None, opts: EnqueueOptions, now_ms: int
) -> _Options:
    """Validate everything but the payload, in the documented order."""
    max_attempts = opts.max_attempts
    if max_attempts is None:
        # The handler's policy was validated when it was registered.
        max_attempts = spec.retry.max_attempts if spec is not None else 3
    elif type(max_attempts) is not int or not 1 <= max_attempts <= MAX_INT:
        max_attempts = validate_max_attempts(max_attempts)
    timeout = (
        (spec.timeout if spec is not None else None)
        if opts.timeout is UNSET
        else validate_timeout(opts.timeout)
    )
    key = opts.idempotency_key
    if key is not None and (
        not isinstance(key, str) or not key.strip() or len(key) > 500 or bad_name_char(key)
    ):
        raise JobValidationError(
            "idempotency_key must be a non-empty string of at most 500 characters, without "
            f"control characters: {key!r}",
            code="JOB_INVALID_IDEMPOTENCY_KEY",
            params={"idempotency_key": repr(key)[:600]},
        )
    priority = opts.priority
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > MAX_INT:
        raise JobValidationError(
            f"priority must be an integer, not {priority!r}",
            code="JOB_INVALID_OPTION",
            params={"priority": repr(priority)},
        )
    if opts.run_at is None and opts.delay is None:
        scheduled_at = now_ms
    else:
        scheduled_at = _scheduled_at(opts.run_at, opts.delay, now_ms)
    if opts.unique_for is not None or opts.debounce is not None:
        scheduled_at = _keyed(opts, key, scheduled_at, now_ms)
    metadata = "{}" if opts.metadata is None else encode_metadata(opts.metadata)
    queue = opts.queue
    if queue is not None and (
        not isinstance(queue, str) or not queue or len(queue) > 200 or bad_name_char(queue)
    ):
        raise JobValidationError(
            "queue must be a non-empty string of at most 200 characters, without control "
            f"characters, not {queue!r}",
            code="JOB_INVALID_OPTION",
        )
    return (
        "delayed" if scheduled_at > now_ms else "pending",
        queue,
        priority,
        max_attempts,
        None if timeout is None else max(1, round(timeout * 1000)),
        key,
        metadata,
        scheduled_at,
    )


def key_rule(opts: EnqueueOptions) -> KeyRule | None:
    """What the store does with the key of an entry whose options were accepted (None:
    nothing beyond answering a live job)."""
    if opts.unique_for is not None:
        return KeyRule("unique_for", _window_ms(opts.unique_for))
    if opts.debounce is not None:
        return KeyRule("debounce", _window_ms(opts.debounce))
    return None


def _keyed(opts: EnqueueOptions, key: str | None, scheduled_at: int, now_ms: int) -> int:
    """Validate `unique_for` and `debounce`; the row's time (a debounced job's is
    now + debounce)."""
    for name, value in (("unique_for", opts.unique_for), ("debounce", opts.debounce)):
        if value is None:
            continue
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if not is_finite_number(seconds) or seconds <= 0 or seconds * 1000 > MAX_MS - now_ms:
            raise JobValidationError(
                f"{name} must be a number of seconds > 0 that ends before year 10000, "
                f"not {value!r}",
                code="JOB_INVALID_OPTION",
                params={name: repr(value)},
            )
    if opts.unique_for is not None and opts.debounce is not None:
        raise JobValidationError("give unique_for or debounce, not both", code="JOB_INVALID_OPTION")
    name, value = (
        ("unique_for", opts.unique_for)
        if opts.unique_for is not None
        else ("debounce", opts.debounce)
    )
    if key is None:
        # Both options say what to do with the jobs that hold a key.
        raise JobValidationError(
            f"{name} needs an idempotency_key",
            code="JOB_INVALID_OPTION",
            params={name: repr(value)},
        )
    if opts.debounce is None:
        return scheduled_at
    if opts.run_at is not None or opts.delay is not None:
        raise JobValidationError(
            "debounce sets when the job runs: give debounce or run_at/delay, not both",
            code="JOB_INVALID_OPTION",
        )
    return now_ms + _window_ms(opts.debounce)


def _window_ms(value: float | timedelta) -> int:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return max(1, round(seconds * 1000))


def _scheduled_at(run_at: datetime | None, delay: float | timedelta | None, now_ms: int) -> int:
    if run_at is not None and delay is not None:
        raise JobValidationError("give run_at or delay, not both", code="JOB_INVALID_OPTION")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise JobValidationError(
                f"run_at must be a datetime, not {run_at!r}", code="JOB_INVALID_OPTION"
            )
        try:
            at = to_ms(run_at)
        except (OverflowError, ValueError, OSError):  # a tzinfo whose offset is out of range
            at = -1
        # Outside these years a row's times no longer read back as datetimes.
        if not 0 <= at <= MAX_MS:
            raise JobValidationError(
                f"run_at must be between 1970 and the end of year 9999 (UTC), not {run_at!r}",
                code="JOB_INVALID_OPTION",
                params={"run_at": repr(run_at)},
            )
        return at
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if not is_finite_number(seconds) or seconds < 0 or seconds * 1000 > MAX_MS - now_ms:
            raise JobValidationError(
                f"delay must be a number of seconds >= 0 that ends before year 10000, "
                f"not {delay!r}",
                code="JOB_INVALID_OPTION",
                params={"delay": repr(delay)},
            )
        return now_ms + round(seconds * 1000)
    return now_ms
