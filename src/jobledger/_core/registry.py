"""Job types, handler registrations and the payload and output codecs.

A `JobType[P, R]` binds a name to a payload type and, optionally, a result type;
`enqueue(RESIZE, payload)` type-checks against `P` at compile time, and the payload is
validated against `P` at run time with a pydantic `TypeAdapter` (models, dataclasses,
TypedDicts and builtins all work). A declared result type `R` is what the handler must
return (checked by mypy at `@jobs.handler`, validated at run time) and what
`handle.result()` / `decode_output` give back; undeclared, `R` is `Any` and the output
is the handler's value as JSON, as before. Payloads, outputs and metadata are stored as
JSON, never pickled.

`HandlerSpec` is the frozen, validated form of a registration, whichever way it was
made: the `@jobs.handler(...)` decorator, or a `JobHandler` subclass passed to
`register_handler`.
"""

from __future__ import annotations

import inspect
import json
import pickle
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, cast

from pydantic import PydanticUndefinedAnnotation, PydanticUserError, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python
from typing_extensions import TypeVar

from jobledger._core import jsonvalues
from jobledger._core.backoff import DEFAULT_RETRY, RetryPolicy
from jobledger._core.limits import (
    MAX_METADATA_BYTES,
    MAX_TIMEOUT_SECONDS,
    bad_name_char,
    has_surrogate,
    is_finite_number,
)
from jobledger._core.rate import RateLimit
from jobledger._types import (
    Executor,
    JobSnapshot,
    JobStatus,
    MissedEvent,
    RecoveryStrategy,
    SettledEvent,
)
from jobledger.errors import HandlerRegistrationError, JobError, JobValidationError

if TYPE_CHECKING:
    from jobledger._runtime.context import JobContext

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "HandlerSpec",
    "JobHandler",
    "JobType",
    "QueueOption",
    "dumps",
    "encode_metadata",
    "encode_result",
    "validate_timeout",
]

P = TypeVar("P")
# The result type of a `JobType`: `Any` when none is declared (a PEP 696 default), so
# `JobType[Model]`, a bare `JobHandle` and every handler of an undeclared type check as
# they did before result types existed (tests/typing/test_result_types.py).
R = TypeVar("R", default=Any)

MAX_PAYLOAD_BYTES = 1024 * 1024
RECOVERY_STRATEGIES: tuple[RecoveryStrategy, ...] = ("abandon", "retry", "singleton")
EXECUTORS: tuple[Executor, ...] = ("async", "thread", "process")

QueueOption = str | Callable[[Any], str] | None


def dumps(value: Any) -> str:
    """Compact JSON; rejects NaN/Infinity, which are not JSON, and lone surrogates, which
    neither backend can store (ValueError, like `json.dumps` for NaN)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if has_surrogate(text):
        raise ValueError("a string holds a lone surrogate, which is not UTF-8")
    return text


def encode_metadata(value: object) -> str:
    """The stored JSON of a metadata mapping, or JOB_INVALID_OPTION saying why not.

    Capped at MAX_METADATA_BYTES characters: metadata is read with every snapshot and
    rewritten by every `patch_metadata`, so it is for labels, not data. Small by that
    cap, so the walk for keys that collide in JSON (`{1: "a", "1": "b"}`) is cheap.
    """
    if not isinstance(value, Mapping):
        raise JobValidationError("metadata must be a mapping", code="JOB_INVALID_OPTION")
    data = dict(value)
    try:
        text = dumps(data)
    except (TypeError, ValueError, RecursionError) as exc:
        raise JobValidationError(
            f"metadata must be JSON: {exc}", code="JOB_INVALID_OPTION"
        ) from None
    if len(text) > MAX_METADATA_BYTES:
        raise JobValidationError(
            f"metadata is {len(text)} characters of JSON; the limit is {MAX_METADATA_BYTES}",
            code="JOB_INVALID_OPTION",
            params={"size": len(text), "limit": MAX_METADATA_BYTES},
        )
    bad = jsonvalues.problem(data)
    if bad is not None:
        raise JobValidationError(f"metadata must be JSON: {bad}", code="JOB_INVALID_OPTION")
    return text


def encode_result(encode_output: Callable[[object], str] | None, result: object) -> str | JobError:
    """A handler's return value as its stored JSON text, or the JobError that says why it
    cannot be stored (returned, not raised: the engine fails the attempt with it, never
    retried). `encode_output` is the type's declared result encoder, or None for the
    handler's value as JSON. One function for every executor, so a value that fails in a
    thread fails with the same code in a child process."""
    if encode_output is not None:
        try:
            return encode_output(result)
        except JobError as exc:
            return exc
        except Exception as exc:  # a validator or serializer of the user's raised
            return JobError(
                f"the handler's result could not be stored: {exc!r}", code="JOB_OUTPUT_INVALID"
            )
    try:
        return "null" if result is None else dumps(to_jsonable_python(result))
    except Exception as exc:
        return JobError(f"the handler's result is not JSON: {exc}", code="JOB_OUTPUT_INVALID")


def _is_typing_typeddict(tp: object) -> bool:
    """`typing.TypedDict` before 3.12, which pydantic refuses (it needs the
    typing_extensions class, which carries what pydantic reads on older Pythons)."""
    if sys.version_info >= (3, 12) or not isinstance(tp, type):
        return False
    return typing.is_typeddict(tp) and type(tp).__module__ == "typing"


# How `encode` finds keys that collide in JSON (`_key_walk`): never (no dict can have a
# non-str key), when the JSON text has an object below the top, or always.
_NO_KEY_WALK, _NESTED_KEY_WALK, _KEY_WALK = 0, 1, 2
# Top-level kinds whose own keys are str or that have none: only nested dicts can have
# other keys, and a nested dict is a `{` after the first character of the text.
_STR_KEYED_TOPS = frozenset({"model", "dataclass", "typed-dict", "list", "tuple", "set"})


def _key_walk(schema: object) -> int:
    """When values of this core schema must be walked for keys that collide in JSON: a
    dict with non-str keys can only come from an `any`, or a dict keyed by another type."""
    loose = False
    stack = [schema]
    while stack and not loose:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if kind == "any" or (kind == "dict" and not _str_keyed(node)):
                loose = True
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    if not loose:
        return _NO_KEY_WALK
    top = schema.get("type") if isinstance(schema, dict) else None
    if top in _STR_KEYED_TOPS or (top == "dict" and _str_keyed(schema)):
        return _NESTED_KEY_WALK
    return _KEY_WALK


def _unfaithful(value: Any, text: str, walk: int) -> str | None:
    """What makes `text` (pydantic's dump of `value`) not the value's JSON, or None.

    pydantic writes NaN/inf as null and a surrogate in a key as U+FFFD; only then, or
    where a dict with non-str keys may be in the value, is the value walked."""
    if (
        "null" in text
        or "\ufffd" in text
        # Fewer than 6 characters hold no key (`{"":0}` is the shortest that does).
        or (walk and len(text) > 5 and _may_collide(value, text, walk))
    ):
        return jsonvalues.problem(value)
    return None


def _may_collide(value: Any, text: str, walk: int) -> bool:
    """Whether `value` (of a type whose dicts may have non-str keys) needs the key walk."""
    if text.find("{", 1) != -1:
        return True  # an object below the top (or a `{` in a string: walked anyway)
    if walk == _NESTED_KEY_WALK or text[0] != "{":
        return False  # no object at all, or only a top level whose keys are str
    # Only the top-level object, whose keys pydantic did not make str.
    return type(value) is not dict or not all(type(k) is str for k in value)


def _str_keyed(node: Any) -> bool:
    keys = node.get("keys_schema")
    return isinstance(keys, dict) and keys.get("type") == "str"


class JobType(Generic[P, R]):
    """A job type: a name, the type its payloads must have and, optionally, the type
    its handler returns (`result=`)."""

    __slots__ = (
        "_adapter",
        "_key_walk",
        "_result_adapter",
        "_result_key_walk",
        "name",
        "payload_type",
        "result_type",
    )

    def __init__(self, name: str, payload_type: type[P], *, result: type[R] | None = None) -> None:
        if (
            not isinstance(name, str)
            or not name
            or name != name.strip()
            or len(name) > 200
            or bad_name_char(name) is not None
        ):
            raise HandlerRegistrationError(
                "a job type name must be 1-200 characters without surrounding spaces or "
                f"control characters: {name!r}",
                params={"name": repr(name)},
            )
        for what, tp in (("payload", payload_type), ("result", result)):
            if _is_typing_typeddict(tp):
                raise HandlerRegistrationError(
                    f"the {what} type of {name!r} is a typing.TypedDict, which pydantic "
                    "cannot use before Python 3.12: define it with typing_extensions.TypedDict",
                    params={"name": name, f"{what}_type": repr(tp)},
                )
        self.name = name
        self.payload_type = payload_type
        # None: no result type declared; the output is the handler's value as JSON.
        self.result_type: type[R] | None = result
        self._adapter: TypeAdapter[P] | None = None
        self._key_walk = _KEY_WALK
        self._result_adapter: TypeAdapter[R] | None = None
        self._result_key_walk = _KEY_WALK

    @property
    def adapter(self) -> TypeAdapter[P]:
        if self._adapter is None:
            try:
                adapter = TypeAdapter(self.payload_type)
                # Reading the schema completes a deferred build now, not at first use.
                key_walk = _key_walk(adapter.core_schema)
            except (PydanticUserError, PydanticUndefinedAnnotation) as exc:
                # e.g. a typing.TypedDict nested in the payload type (before 3.12)
                raise HandlerRegistrationError(
                    f"pydantic cannot use the payload type of {self.name!r}: {exc}",
                    params={"name": self.name, "payload_type": repr(self.payload_type)},
                ) from None
            self._key_walk = key_walk
            self._adapter = adapter
        return self._adapter

    def _build_adapter(self) -> None:
        """Build the payload's adapter now instead of at its first use.

        The first adapter a process builds also sets up pydantic itself (~20 ms), and a
        type's first job would wait for it while its claimed slots stay taken.
        """
        self.adapter  # noqa: B018 - the property builds and keeps it
        if self.result_type is not None:
            self.result_adapter  # noqa: B018 - likewise

    def encode(self, payload: Any, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> tuple[P, str]:
        """Validate `payload` against the type; return the value and its JSON text."""
        adapter = self._adapter
        if adapter is None:
            adapter = self.adapter
        try:
            # The adapter's own validator and serializer, called with the defaults of
            # `validate_python`/`dump_json`: the same result without their wrappers.
            value = adapter.validator.validate_python(payload)
            text = adapter.serializer.to_json(value).decode()
        except ValidationError as exc:
            raise JobValidationError(
                f"payload for {self.name!r} is invalid: {_short(exc)}",
                code="JOB_PAYLOAD_INVALID",
                params={"type": self.name, "errors": _errors(exc)},
            ) from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise JobValidationError(
                f"payload for {self.name!r} is not JSON-serialisable: {exc}",
                code="JOB_PAYLOAD_INVALID",
                params={"type": self.name},
            ) from None
        bad = _unfaithful(value, text, self._key_walk)
        if bad is not None:
            raise JobValidationError(
                f"payload for {self.name!r} is not JSON: {bad}",
                code="JOB_PAYLOAD_INVALID",
                params={"type": self.name},
            )
        if len(text) > max_bytes:
            raise JobValidationError(
                f"payload for {self.name!r} is {len(text)} characters of JSON; "
                f"the limit is {max_bytes}",
                code="JOB_PAYLOAD_TOO_LARGE",
                params={"type": self.name, "size": len(text), "limit": max_bytes},
            )
        return value, text

    def decode(self, text: str) -> P:
        """The typed payload of stored JSON text.

        By field name and by alias both: `encode` writes field names (pydantic's default
        dump), while a producer without the type (the CLI without `--app`, another
        language) may write a model's aliases. Without `by_name`, a model with aliases
        could not read back what `encode` wrote."""
        return self.adapter.validate_json(text, by_alias=True, by_name=True)

    # -- the result -------------------------------------------------------------------

    @property
    def result_adapter(self) -> TypeAdapter[R] | None:
        """The result type's `TypeAdapter`, or None when no result type is declared."""
        if self._result_adapter is None and self.result_type is not None:
            try:
                adapter = TypeAdapter(self.result_type)
                key_walk = _key_walk(adapter.core_schema)
            except (PydanticUserError, PydanticUndefinedAnnotation) as exc:
                raise HandlerRegistrationError(
                    f"pydantic cannot use the result type of {self.name!r}: {exc}",
                    params={"name": self.name, "result_type": repr(self.result_type)},
                ) from None
            self._result_key_walk = key_walk
            self._result_adapter = adapter
        return self._result_adapter

    def encode_output(self, result: object) -> str:
        """The stored JSON text of a handler's return value, for a declared result type.

        The value is validated against the result type and dumped by its adapter (so a
        model's aliases and serializers apply; `by_alias` and `round_trip` make the text
        read back through `validate_json` in `decode_output`). JOB_OUTPUT_INVALID when it
        does not validate or is not faithful JSON (the checks of `encode`). The engine
        calls this only when `result_type` is set: an undeclared type's output is dumped
        as it always was (`Engine._completed`).
        """
        adapter = self._result_adapter
        if adapter is None:
            adapter = self.result_adapter
        assert adapter is not None, "encode_output of a JobType without a result type"
        what = getattr(self.result_type, "__name__", repr(self.result_type))
        try:
            value = adapter.validator.validate_python(result)
            text = adapter.serializer.to_json(value, by_alias=True, round_trip=True).decode()
        except ValidationError as exc:
            raise JobValidationError(
                f"the handler of {self.name!r} returned {type(result).__name__}, "
                f"not a valid {what}: {_short(exc)}",
                code="JOB_OUTPUT_INVALID",
                params={"type": self.name, "errors": _errors(exc)},
            ) from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise JobValidationError(
                f"the handler's result is not JSON: {exc}",
                code="JOB_OUTPUT_INVALID",
                params={"type": self.name},
            ) from None
        bad = _unfaithful(value, text, self._result_key_walk)
        if bad is not None:
            raise JobValidationError(
                f"the handler's result is not JSON: {bad}",
                code="JOB_OUTPUT_INVALID",
                params={"type": self.name},
            )
        return text

    def decode_output(self, snapshot: JobSnapshot) -> R:
        """The typed result of a completed job's snapshot (from `jobs.get`, `list`, ...).

        With a declared result type, the stored output is validated into it (as JSON,
        the inverse of `encode_output`); without one, it is the JSON value itself.
        JOB_NOT_COMPLETED when the job is not `completed` (`params`: `job_id`, `status`,
        `error`, the stored error as JSON or None); JOB_RESULT_INVALID when the output
        does not validate (a handler of another version wrote it); JOB_INVALID_OPTION
        for a snapshot of another job type.
        """
        if not isinstance(snapshot, JobSnapshot):
            raise JobValidationError(
                f"decode_output takes a JobSnapshot, not {snapshot!r}", code="JOB_INVALID_OPTION"
            )
        if snapshot.type != self.name:
            raise JobValidationError(
                f"the snapshot is of job type {snapshot.type!r}, not {self.name!r}",
                code="JOB_INVALID_OPTION",
                params={"type": self.name, "snapshot_type": snapshot.type},
            )
        if snapshot.status != JobStatus.COMPLETED:
            raise not_completed(snapshot)
        adapter = self.result_adapter
        if adapter is None:
            return cast(R, snapshot.output)
        try:
            return adapter.validate_json(dumps(snapshot.output))
        except ValidationError as exc:
            what = getattr(self.result_type, "__name__", repr(self.result_type))
            raise JobError(
                f"the output of job {snapshot.id} is not a valid {what}: {_short(exc)}",
                code="JOB_RESULT_INVALID",
                params={"job_id": snapshot.id, "type": self.name, "errors": _errors(exc)},
            ) from None

    def __repr__(self) -> str:
        payload = getattr(self.payload_type, "__name__", self.payload_type)
        if self.result_type is None:
            return f"JobType({self.name!r}, {payload})"
        result = getattr(self.result_type, "__name__", self.result_type)
        return f"JobType({self.name!r}, {payload}, result={result})"


def not_completed(snapshot: JobSnapshot) -> JobError:
    """JOB_NOT_COMPLETED for a job that has no result: it failed, was cancelled, or has
    not finished."""
    error = snapshot.error
    message = f"job {snapshot.id} is {snapshot.status.value}, not completed"
    if error is not None:
        message += f": {error.code}: {error.message}"
    return JobError(
        message,
        code="JOB_NOT_COMPLETED",
        params={
            "job_id": snapshot.id,
            "status": snapshot.status.value,
            "error": None if error is None else error.to_json(),
        },
    )


def _short(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else None
    if first is None:
        return str(exc)
    loc = ".".join(str(p) for p in first.get("loc", ())) or "<root>"
    return f"{loc}: {first.get('msg', 'invalid')} ({exc.error_count()} error(s))"


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", "")}
        for e in exc.errors()[:20]
    ]


def validate_timeout(value: object, *, what: str = "timeout") -> float | None:
    if value is None:
        return None
    if not is_finite_number(value) or value <= 0 or value > MAX_TIMEOUT_SECONDS:
        raise JobValidationError(
            f"{what} must be a number of seconds in (0, {MAX_TIMEOUT_SECONDS:g}] or None, "
            f"not {value!r}",
            code="JOB_INVALID_TIMEOUT",
            params={what: repr(value)},
        )
    return float(value)


class JobHandler(Generic[P, R]):
    """The class form of a handler, for handlers with hooks.

    Subclass it, set `recovery` (required) and any of the other class attributes, and
    implement `execute` (async or plain). Optional hooks: `on_settled`, `on_missed`,
    `default_queue`. Register with `jobs.register_handler(JOB_TYPE, MyHandler())`.
    """

    recovery: ClassVar[RecoveryStrategy]
    concurrency: ClassVar[int] = 1
    rate_limit: ClassVar[RateLimit | None] = None
    timeout: ClassVar[float | None] = None
    retry: ClassVar[RetryPolicy] = DEFAULT_RETRY
    cancel_timeout: ClassVar[float] = 30.0

    def execute(self, ctx: JobContext[P]) -> Awaitable[R] | R:
        raise NotImplementedError

    def on_settled(self, event: SettledEvent) -> Awaitable[None] | None:
        return None

    def on_missed(self, event: MissedEvent) -> Awaitable[None] | None:
        return None

    def default_queue(self, payload: P) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class HandlerSpec(Generic[P]):
    """One registration, validated."""

    job_type: JobType[P]
    execute: Callable[[JobContext[P]], Any]
    is_async: bool
    recovery: RecoveryStrategy
    concurrency: int
    timeout: float | None
    retry: RetryPolicy
    queue: QueueOption
    cancel_timeout: float
    on_settled: Callable[[SettledEvent], Any] | None
    on_missed: Callable[[MissedEvent], Any] | None
    # `job_type.encode_output` when the type declares a result type, else None: the
    # engine's test for which way to dump a return value (`Engine._completed`).
    encode_output: Callable[[object], str] | None = None
    # At most this many starts per window, across processes (DESIGN.md §8.7); an
    # operator's limit for the queue (`jobs.set_queue_limits`) replaces it.
    rate_limit: RateLimit | None = None
    executor: Executor = "async"
    # `executor == "process"`, kept as a flag: the engine tests it on every start.
    is_process: bool = False
    # A child process is replaced after this many jobs (process executor only).
    max_jobs_per_child: int | None = None

    @property
    def name(self) -> str:
        return self.job_type.name

    def queue_for(self, payload_value: Any) -> str:
        q = self.queue
        if q is None:
            return self.job_type.name
        if isinstance(q, str):
            return q
        name = q(payload_value)
        if not isinstance(name, str) or not name or len(name) > 200 or bad_name_char(name):
            raise JobValidationError(
                f"the queue resolver of {self.name!r} returned {name!r}, not a queue name",
                code="JOB_INVALID_OPTION",
                params={"type": self.name},
            )
        return name

    @staticmethod
    def build(
        job_type: JobType[P],
        execute: Callable[..., Any],
        *,
        recovery: object,
        concurrency: object = 1,
        timeout: object = None,
        retry: object = None,
        queue: QueueOption = None,
        cancel_timeout: object = 30.0,
        on_settled: Callable[[SettledEvent], Any] | None = None,
        on_missed: Callable[[MissedEvent], Any] | None = None,
        rate_limit: object = None,
        executor: object = None,
        max_jobs_per_child: object = None,
    ) -> HandlerSpec[P]:
        if not isinstance(job_type, JobType):
            raise HandlerRegistrationError(
                f"handlers are registered for a JobType, not {job_type!r}"
            )
        if recovery not in RECOVERY_STRATEGIES:
            raise HandlerRegistrationError(
                f"recovery must be one of {', '.join(RECOVERY_STRATEGIES)}; got {recovery!r}",
                params={"type": job_type.name, "recovery": repr(recovery)},
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise HandlerRegistrationError(
                f"concurrency must be an integer >= 1, not {concurrency!r}",
                params={"type": job_type.name},
            )
        retry_policy = DEFAULT_RETRY if retry is None else retry
        if not isinstance(retry_policy, RetryPolicy):
            raise HandlerRegistrationError(
                f"retry must be a RetryPolicy, not {retry!r}", params={"type": job_type.name}
            )
        if not callable(execute):
            raise HandlerRegistrationError(f"the handler for {job_type.name!r} is not callable")
        grace = validate_timeout(cancel_timeout, what="cancel_timeout")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise HandlerRegistrationError(
                f"rate_limit must be a jl.RateLimit, not {rate_limit!r}",
                params={"type": job_type.name},
            )
        is_async = inspect.iscoroutinefunction(execute)
        kind = _executor(job_type, execute, is_async, executor, max_jobs_per_child)
        return HandlerSpec(
            job_type=job_type,
            execute=execute,
            is_async=is_async,
            recovery=recovery,
            concurrency=concurrency,
            timeout=validate_timeout(timeout),
            retry=retry_policy,
            queue=queue,
            cancel_timeout=30.0 if grace is None else grace,
            on_settled=on_settled,
            on_missed=on_missed,
            encode_output=None if job_type.result_type is None else job_type.encode_output,
            rate_limit=rate_limit,
            executor=kind,
            is_process=kind == "process",
            max_jobs_per_child=max_jobs_per_child,  # type: ignore[arg-type]  # checked
        )

    @property
    def target(self) -> tuple[str, str]:
        """Where a child process finds the handler: (module, qualified name)."""
        fn = self.execute
        return fn.__module__, fn.__qualname__

    @staticmethod
    def from_class(job_type: JobType[P], handler: object) -> HandlerSpec[P]:
        # `object`: `register_handler` passes what it was given (typed there as
        # `HandlerOf[P, R]` for mypy's messages), checked here.
        if not isinstance(handler, JobHandler):
            raise HandlerRegistrationError(
                f"register_handler takes a JobHandler instance, not {handler!r}"
            )
        cls = type(handler)
        if not hasattr(cls, "recovery"):
            raise HandlerRegistrationError(
                f"{cls.__name__} must set the class attribute `recovery`",
                params={"type": job_type.name},
            )

        def overridden(name: str) -> bool:
            return getattr(cls, name) is not getattr(JobHandler, name)

        queue: QueueOption = None
        if overridden("default_queue"):

            def resolve(payload: Any) -> str:
                return handler.default_queue(payload) or job_type.name

            queue = resolve
        return HandlerSpec.build(
            job_type,
            handler.execute,
            recovery=cls.recovery,
            concurrency=cls.concurrency,
            timeout=cls.timeout,
            retry=cls.retry,
            queue=queue,
            cancel_timeout=cls.cancel_timeout,
            on_settled=handler.on_settled if overridden("on_settled") else None,
            on_missed=handler.on_missed if overridden("on_missed") else None,
            rate_limit=cls.rate_limit,
        )


def _executor(
    job_type: JobType[Any],
    fn: Callable[..., Any],
    is_async: bool,
    executor: object,
    max_jobs_per_child: object,
) -> Executor:
    """The executor a registration asks for (or its function's default), checked: the
    combinations that cannot work are JOB_HANDLER_EXECUTOR at registration, not a
    failure of every job later."""
    name = job_type.name
    if executor is None:
        kind: Executor = "async" if is_async else "thread"
    elif executor in EXECUTORS:
        kind = executor
    else:
        raise HandlerRegistrationError(
            f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}",
            params={"type": name, "executor": repr(executor)},
        )

    def refuse(reason: str) -> HandlerRegistrationError:
        return HandlerRegistrationError(
            f"the handler of {name!r} cannot run with executor={kind!r}: {reason}",
            code="JOB_HANDLER_EXECUTOR",
            params={"type": name, "executor": kind, "reason": reason},
        )

    if max_jobs_per_child is not None:
        if kind != "process":
            raise refuse("max_jobs_per_child applies to executor='process' only")
        if (
            isinstance(max_jobs_per_child, bool)
            or not isinstance(max_jobs_per_child, int)
            or max_jobs_per_child < 1
        ):
            raise HandlerRegistrationError(
                f"max_jobs_per_child must be an integer >= 1 or None, not {max_jobs_per_child!r}",
                params={"type": name},
            )
    if kind == "async" and not is_async:
        raise refuse("it is a plain def; executor='async' takes an async def")
    if kind != "async" and is_async:
        raise refuse("it is an async def, which runs on the manager's loop (executor='async')")
    if kind == "process":
        problem = _not_importable(fn) or _types_not_importable(job_type)
        if problem is not None:
            raise refuse(problem)
    return kind


def _not_importable(fn: Callable[..., Any]) -> str | None:
    """Why a spawned child could not import `fn` by its module and qualified name."""
    if not inspect.isfunction(fn):
        return (
            f"{fn!r} is not a plain function; a child process imports its handler by "
            "module and name, so it must be a module-level def"
        )
    qualname = fn.__qualname__
    if "<" in qualname:  # <lambda>, or <locals> of a function it was defined in
        return (
            f"{qualname} is a lambda or is defined inside a function; a child process "
            "imports its handler by module and name, so it must be a module-level def"
        )
    module = sys.modules.get(fn.__module__)
    if fn.__module__ == "__main__" and getattr(module, "__file__", None) is None:
        return (
            "it is defined in an interactive session or a `-c` program, which a child "
            "process cannot import; define it in a module"
        )
    return None


def _types_not_importable(job_type: JobType[Any]) -> str | None:
    """Why the child could not rebuild the job type: it gets the payload and result
    types by reference (pickle's by-name form, never their values)."""
    for what, tp in (("payload", job_type.payload_type), ("result", job_type.result_type)):
        if tp is None:
            continue
        try:
            pickle.dumps(tp)
        except Exception as exc:
            return (
                f"its {what} type {tp!r} cannot be imported by name in a child process "
                f"({exc}); define it at module level"
            )
    return None
