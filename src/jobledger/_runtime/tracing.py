"""OpenTelemetry tracing and metrics (extra `otel`; DESIGN.md §8.10).

Invariants:

* With `opentelemetry-api` missing, or no tracer provider and no meter provider set,
  `instruments()` answers None after one call and two type checks: enqueue and every
  attempt then pay nothing more (`bench/otel.py` measures it).
* Enqueue makes one `send {queue}` PRODUCER span around the write (one per call: an
  `enqueue_many` batch is one span with `messaging.batch.message_count`), and stores
  its context in each row's metadata under `"otel"` (the W3C carrier that
  `propagate.inject` writes). So the context survives retries (a re-run copies the
  metadata), restarts and other processes: it is in the row.
* Each attempt makes one `process {queue}` CONSUMER span, current while the handler
  runs (its own spans nest under it, in a thread too), *linked* to the send span, not
  its child: an attempt may run hours later, and many times.
* The spans' attributes follow the messaging conventions: `messaging.system`
  ("jobledger"), `messaging.destination.name` (the queue), `messaging.message.id` (the
  job id), `messaging.operation.type`; and ours: `jobledger.type`, `jobledger.attempt`
  (1 for the first attempt, as in the attempts history). A failed attempt sets
  `error.type` (the exception's class, else the error code) and the status ERROR.
* Metrics, when a meter provider is set: `messaging.client.sent.messages` (a counter,
  per enqueued job) and `messaging.process.duration` (a histogram, seconds per attempt,
  with `error.type` on failure).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, Tracer

__all__ = ["METADATA_KEY", "Instruments", "Process", "instruments", "traced_send"]

METADATA_KEY = "otel"
_SYSTEM = "jobledger"
_SCOPE = "jobledger"
_modules = sys.modules


@dataclass(frozen=True, slots=True)
class Instruments:
    """What the set providers give: a tracer, the two metrics; any may be None."""

    tracer: Tracer | None
    sent: Counter | None
    duration: Histogram | None


class _Api:
    """The OpenTelemetry API's modules, imported on first need (an import costs ~20 ms
    of a process's start, and no provider can be set before someone imports them)."""

    def __init__(self) -> None:
        from opentelemetry import context, metrics, propagate, trace
        from opentelemetry.metrics._internal import _ProxyMeterProvider

        self.context: ModuleType = context
        self.metrics: ModuleType = metrics
        self.propagate: ModuleType = propagate
        self.trace: ModuleType = trace
        self.no_tracer = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self.no_meter = (_ProxyMeterProvider, metrics.NoOpMeterProvider)


_api: _Api | None = None
_cache: tuple[object, object, Instruments | None] | None = None


def instruments() -> Instruments | None:
    """The instruments of the providers set now, or None when neither is.

    Setting a provider imports `opentelemetry.trace` (or `.metrics`): until some code has,
    this is two dict lookups, and the API is not even imported."""
    if "opentelemetry.trace" not in _modules and "opentelemetry.metrics" not in _modules:
        return None
    return _instruments()


def _instruments() -> Instruments | None:
    global _api, _cache
    api = _api
    if api is None:
        try:
            api = _api = _Api()
        except ImportError:  # a partial install; nothing to trace with
            return None
    tp = api.trace.get_tracer_provider()
    mp = api.metrics.get_meter_provider()
    cached = _cache
    if cached is not None and cached[0] is tp and cached[1] is mp:
        return cached[2]
    traced = not isinstance(tp, api.no_tracer)
    metered = not isinstance(mp, api.no_meter)
    made: Instruments | None = None
    if traced or metered:
        meter = mp.get_meter(_SCOPE) if metered else None
        made = Instruments(
            tp.get_tracer(_SCOPE) if traced else None,
            None
            if meter is None
            else meter.create_counter(
                "messaging.client.sent.messages",
                unit="{message}",
                description="Jobs enqueued.",
            ),
            None
            if meter is None
            else meter.create_histogram(
                "messaging.process.duration",
                unit="s",
                description="How long each attempt's handler ran.",
            ),
        )
    _cache = (tp, mp, made)
    return made


def _otel() -> _Api:
    assert _api is not None  # loaded by `instruments()`, which made the Instruments
    return _api


def traced_send(
    inst: Instruments, rows: Sequence[JobRow], write: Callable[[Sequence[JobRow]], Any]
) -> Any:
    """`write(rows)` inside a `send` span, each row's metadata carrying its context."""
    queues = {r[L.C_QUEUE] for r in rows}
    queue = next(iter(queues)) if len(queues) == 1 else None
    attrs: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if queue is not None:
        attrs["messaging.destination.name"] = queue
    if len(rows) == 1:
        attrs["messaging.message.id"] = rows[0][L.C_ID]
        attrs["jobledger.type"] = rows[0][L.C_TYPE]
    else:
        attrs["messaging.batch.message_count"] = len(rows)
    if inst.tracer is None:
        out = write(rows)
    else:
        api = _otel()
        name = "send" if queue is None else f"send {queue}"
        # Not made current: the write makes no spans, and attaching costs a context swap.
        span = inst.tracer.start_span(name, kind=api.trace.SpanKind.PRODUCER, attributes=attrs)
        try:
            carrier: dict[str, str] = {}
            api.propagate.inject(carrier, context=api.trace.set_span_in_context(span))
            encoded = json.dumps(carrier, separators=(",", ":"))
            out = write([_with_carrier(r, carrier, encoded) for r in rows])
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, str(exc)))
            span.set_attribute("error.type", f"{type(exc).__module__}.{type(exc).__qualname__}")
            raise
        finally:
            span.end()
    if inst.sent is not None:
        counted = {k: v for k, v in attrs.items() if k != "messaging.message.id"}
        counted.pop("messaging.batch.message_count", None)
        counted.pop("jobledger.type", None)
        inst.sent.add(len(rows), counted)
    return out


def _with_carrier(row: JobRow, carrier: dict[str, str], encoded: str) -> JobRow:
    """`row` with the carrier in its metadata (a JSON object, as every row's is)."""
    text = row[L.C_METADATA]
    if text == "{}":
        text = f'{{"{METADATA_KEY}":{encoded}}}'
    elif f'"{METADATA_KEY}"' not in text:  # the common case: splice, without a parse
        text = f'{text[:-1]},"{METADATA_KEY}":{encoded}}}'
    else:  # a re-run's copy, or the caller's own key: replaced
        metadata = json.loads(text)
        metadata[METADATA_KEY] = carrier
        text = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)
    return (*row[: L.C_METADATA], text, *row[L.C_METADATA + 1 :])


_last_links: tuple[dict[str, Any], tuple[Any, ...]] | None = None


def _links_of(carrier: dict[str, Any]) -> tuple[Any, ...]:
    """The link to the send span a carrier names. The jobs of one `enqueue_many` share
    one carrier, and come in runs: the last answer is kept (extracting costs ~5 µs)."""
    global _last_links
    last = _last_links
    if last is not None and last[0] == carrier:
        return last[1]
    api = _otel()
    sent = api.trace.get_current_span(api.propagate.extract(carrier)).get_span_context()
    links = (api.trace.Link(sent),) if sent.is_valid else ()
    _last_links = (carrier, links)
    return links


class Process:
    """One attempt's `process` span and duration, from start to `end`."""

    __slots__ = ("_attrs", "_inst", "_started", "_token", "span")

    def __init__(
        self,
        inst: Instruments,
        *,
        queue: str,
        job_id: str,
        type_name: str,
        attempt: int,
        metadata: dict[str, Any],
    ) -> None:
        self._inst = inst
        self._attrs: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.destination.name": queue,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
        }
        self.span: Span | None = None
        self._token: object = None
        if inst.tracer is not None:
            carrier = metadata.get(METADATA_KEY)
            links = _links_of(carrier) if isinstance(carrier, dict) else ()
            api = _otel()
            span = inst.tracer.start_span(
                f"process {queue}",
                context=api.context.Context(),  # a root: the send span is linked, not a parent
                kind=api.trace.SpanKind.CONSUMER,
                links=links,
                attributes={
                    **self._attrs,
                    "messaging.message.id": job_id,
                    "jobledger.type": type_name,
                    "jobledger.attempt": attempt + 1,
                },
            )
            self.span = span
            self._token = api.context.attach(api.trace.set_span_in_context(span))
        self._started = time.perf_counter()

    def detach(self) -> None:
        """Leave the span's context (the handler returned); `end` comes later."""
        if self._token is not None:
            _otel().context.detach(self._token)
            self._token = None

    def end(self, kind: str, error: dict[str, Any] | None, exc: BaseException | None) -> None:
        """`kind`: the outcome's (completed, retry, failed, cancelled, requeue)."""
        self.detach()
        error_type: str | None = None
        if kind in ("retry", "failed", "cancelled"):
            exception = (error or {}).get("params", {}).get("exception")
            if exc is not None:
                error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
            elif isinstance(exception, str):
                error_type = exception
            else:
                error_type = str((error or {}).get("code") or kind)
        span = self.span
        if span is not None:
            if kind != "completed":
                span.set_attribute("jobledger.outcome", kind)
            if error_type is not None:
                span.set_attribute("error.type", error_type)
                if exc is not None:
                    span.record_exception(exc)
                message = (error or {}).get("message")
                trace = _otel().trace
                span.set_status(trace.Status(trace.StatusCode.ERROR, message))
            span.end()
        if self._inst.duration is not None:
            attrs = dict(self._attrs)
            if error_type is not None:
                attrs["error.type"] = error_type
            self._inst.duration.record(time.perf_counter() - self._started, attrs)
