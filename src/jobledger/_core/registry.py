"""Job types, handler registrations and the payload codec.

A `JobType[P]` binds a name to a payload type; `enqueue(RESIZE, payload)` type-checks
against `P` at compile time, and the payload is validated against `P` at run time with a
pydantic `TypeAdapter` (models, dataclasses, TypedDicts and builtins all work). Payloads,
outputs and metadata are stored as JSON, never pickled.

`HandlerSpec` is the frozen, validated form of a registration, whichever way it was
made: the `@jobs.handler(...)` decorator, or a `JobHandler` subclass passed to
`register_handler`.
"""

from __future__ import annotations

import inspect
import json
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import PydanticUndefinedAnnotation, PydanticUserError, TypeAdapter, ValidationError

from jobledger._core import jsonvalues
from jobledger._core.backoff import DEFAULT_RETRY, RetryPolicy
from jobledger._core.limits import (
    MAX_METADATA_BYTES,
    MAX_TIMEOUT_SECONDS,
    bad_name_char,
    has_surrogate,
    is_finite_number,
)
from jobledger._types import MissedEvent, RecoveryStrategy, SettledEvent
from jobledger.errors import HandlerRegistrationError, JobValidationError

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
    "validate_timeout",
]

P = TypeVar("P")
R = TypeVar("R")

MAX_PAYLOAD_BYTES = 1024 * 1024
RECOVERY_STRATEGIES: tuple[RecoveryStrategy, ...] = ("abandon", "retry", "singleton")

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


class JobType(Generic[P]):
    """A job type: a name and the type its payloads must have."""

    __slots__ = ("_adapter", "_key_walk", "name", "payload_type")

    def __init__(self, name: str, payload_type: type[P]) -> None:
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
        if _is_typing_typeddict(payload_type):
            raise HandlerRegistrationError(
                f"the payload type of {name!r} is a typing.TypedDict, which pydantic cannot "
                "use before Python 3.12: define it with typing_extensions.TypedDict",
                params={"name": name, "payload_type": repr(payload_type)},
            )
        self.name = name
        self.payload_type = payload_type
        self._adapter: TypeAdapter[P] | None = None
        self._key_walk = _KEY_WALK

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
        # pydantic writes NaN/inf as null and a surrogate in a key as U+FFFD; only then,
        # or where a dict with non-str keys may be in the value, is the value walked.
        walk = self._key_walk
        if (
            "null" in text
            or "\ufffd" in text
            # Fewer than 6 characters hold no key (`{"":0}` is the shortest that does).
            or (walk and len(text) > 5 and _may_collide(value, text, walk))
        ):
            bad = jsonvalues.problem(value)
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
        """The typed payload of stored JSON text."""
        return self.adapter.validate_json(text)

    def __repr__(self) -> str:
        return (
            f"JobType({self.name!r}, {getattr(self.payload_type, '__name__', self.payload_type)})"
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
        return HandlerSpec(
            job_type=job_type,
            execute=execute,
            is_async=inspect.iscoroutinefunction(execute),
            recovery=recovery,
            concurrency=concurrency,
            timeout=validate_timeout(timeout),
            retry=retry_policy,
            queue=queue,
            cancel_timeout=30.0 if grace is None else grace,
            on_settled=on_settled,
            on_missed=on_missed,
        )

    @staticmethod
    def from_class(job_type: JobType[P], handler: JobHandler[P, Any]) -> HandlerSpec[P]:
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
        )
