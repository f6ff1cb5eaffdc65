"""Logs of jobs: `ctx.logger`, the lines kept with each attempt, the worker's records.

`ctx.logger` (DESIGN.md §8.2) is a `JobLogger`, a `logging.LoggerAdapter` on logger
`jobledger.job` whose records carry `job_id`, `type`, `queue` and `attempt` as
attributes. Every line logged through it is also kept in its attempt's `LogBuffer`, so
the engine can store the lines with the attempt's outcome:

* kept: every line at INFO or above, whatever the process's logging configuration
  (an embedded manager with logging left unconfigured still keeps them); DEBUG lines
  only while `jobledger.job` is enabled for DEBUG;
* bounded: the last `MAX_LOG_LINES` lines or `MAX_LOG_BYTES` bytes of messages (UTF-8)
  per attempt, whichever bound is hit first dropping the oldest lines; one longer
  message is cut to `MAX_LOG_BYTES` (ending in `TRUNCATED`);
* storable: a message is UTF-8 text without NUL (lone surrogates and NUL bytes are
  written as escapes), since both databases refuse those in text;
* thread-safe: a plain `def` handler runs on a pool thread and may start threads of its
  own that log through the same `ctx.logger`.

Nothing is paid by an attempt whose handler never touches `ctx.logger`: the adapter and
the buffer are made on first use, and no handler is added to any logger.

The worker's own records (logger `jobledger.worker`): one when a handler starts
(`log_start`) and one once its outcome is written (`log_ends`), with `job_id, type,
queue, attempt` in `extra`, plus `outcome` and `duration_ms` on the end record. Starts
and completed, cancelled and interrupted ends are INFO; failed, retry and lost ends are
WARNING, so a worker run at WARNING still says which jobs failed and why (and pays only
for those). The engine checks `isEnabledFor` before calling either.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import traceback
from collections import deque
from collections.abc import Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from jobledger._types import LogLine

if TYPE_CHECKING:
    from jobledger._runtime.attempt import Attempt
    from jobledger._storage.interface import JobRow, Outcome
    from jobledger.clock import Clock

__all__ = [
    "MAX_LOG_BYTES",
    "MAX_LOG_LINES",
    "TRUNCATED",
    "JobLogger",
    "LogBuffer",
    "job_log",
    "log_ends",
    "log_raised",
    "log_start",
    "worker_log",
]

MAX_LOG_LINES = 200
MAX_LOG_BYTES = 64 * 1024
TRUNCATED = " [truncated]"
# An error message quoted in a worker record (the whole of it is in the row).
_MAX_ERROR_CHARS = 1000

job_log = logging.getLogger("jobledger.job")
worker_log = logging.getLogger("jobledger.worker")


class LogBuffer:
    """The last lines an attempt logged (see the module docstring for the bounds)."""

    __slots__ = ("_clock", "_lines", "_lock", "_size", "dropped")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lines: deque[tuple[LogLine, int]] = deque()
        self._size = 0
        self._lock = threading.Lock()
        self.dropped = 0  # lines pushed out by newer ones

    def add(self, level: int, message: str) -> None:
        text, size = _storable(message)
        line = LogLine(at=self._clock.now(), level=logging.getLevelName(level), message=text)
        lines = self._lines
        with self._lock:
            lines.append((line, size))
            self._size += size
            while len(lines) > MAX_LOG_LINES or self._size > MAX_LOG_BYTES:
                _, old = lines.popleft()
                self._size -= old
                self.dropped += 1

    def extend(self, lines: list[LogLine], dropped: int) -> None:
        """Add lines kept by another buffer (a child process's), within the bounds."""
        with self._lock:
            self.dropped += dropped
            for line in lines:
                size = len(line.message.encode("utf-8"))
                self._lines.append((line, size))
                self._size += size
            while len(self._lines) > MAX_LOG_LINES or self._size > MAX_LOG_BYTES:
                _, old = self._lines.popleft()
                self._size -= old
                self.dropped += 1

    def lines(self) -> list[LogLine]:
        with self._lock:
            return [line for line, _ in self._lines]


def _storable(message: str) -> tuple[str, int]:
    """`message` as UTF-8 text without NUL, at most MAX_LOG_BYTES; and its size."""
    if "\x00" in message:
        message = message.replace("\x00", "\\x00")
    data = message.encode("utf-8", "backslashreplace")  # a lone surrogate: `\udc80`
    if len(data) > MAX_LOG_BYTES:
        # "ignore" drops a character cut in half at the end.
        cut = data[: MAX_LOG_BYTES - len(TRUNCATED)].decode("utf-8", "ignore") + TRUNCATED
        return cut, len(cut.encode("utf-8"))
    if len(data) == len(message):
        return message, len(data)  # ASCII, as nearly every line is: no decode
    return data.decode("utf-8"), len(data)


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """`ctx.logger`: logger `jobledger.job` with the job's fields, kept with its attempt.

    Fields given in a call's own `extra` are kept too; the job's four win a clash."""

    def __init__(self, buffer: LogBuffer, fields: Mapping[str, object]) -> None:
        super().__init__(job_log, fields)
        self._buffer = buffer

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        given = kwargs.get("extra")
        kwargs["extra"] = self.extra if not given else {**given, **(self.extra or {})}
        return msg, kwargs

    def log(
        self,
        level: int,
        msg: object,
        *args: object,
        exc_info: Any = None,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> None:
        emit = self.logger.isEnabledFor(level)
        if emit or level >= logging.INFO:
            self._buffer.add(level, _message(msg, args, exc_info))
        if emit:
            kw: MutableMapping[str, Any] = {
                "exc_info": exc_info,
                "stack_info": stack_info,
                # One frame more than the caller asked for: this method's, so that the
                # record names the handler's file and line, not this module's.
                "stacklevel": stacklevel + 1,
                "extra": extra,
                **kwargs,
            }
            msg, kw = self.process(msg, kw)
            self.logger.log(level, msg, *args, **kw)


def _message(msg: object, args: tuple[object, ...], exc_info: Any) -> str:
    """What `LogRecord.getMessage()` would say, with the traceback of `exc_info`."""
    # A lone non-empty mapping is a mapping for %-format, as in `logging.LogRecord`.
    fmt_args: object = args
    if len(args) == 1 and isinstance(args[0], Mapping) and args[0]:
        fmt_args = args[0]
    text = str(msg)
    if args:
        try:
            text = text % fmt_args
        except Exception:
            # Logging reports this on stderr (`Handler.handleError`); the kept line
            # must not raise into the handler either.
            text = f"{text} (arguments that do not format: {args!r})"
    if exc_info:
        if isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        elif not isinstance(exc_info, tuple):
            exc_info = sys.exc_info()
        if exc_info[0] is not None:
            text += "\n" + "".join(traceback.format_exception(*exc_info)).rstrip("\n")
    return text


# -- the worker's records ---------------------------------------------------------------

# Outcome kinds as the end record names them (a "requeue" is a shutdown's interruption).
_ENDED = {
    "completed": ("completed", logging.INFO),
    "retry": ("retry", logging.WARNING),
    "failed": ("failed", logging.WARNING),
    "cancelled": ("cancelled", logging.INFO),
    "requeue": ("interrupted", logging.INFO),
}
_LOST = ("lost", logging.WARNING)


def _fields(attempt: Attempt) -> dict[str, Any]:
    return {
        "job_id": attempt.job_id,
        "type": attempt.type,
        "queue": attempt.queue,
        "attempt": attempt.attempt,
    }


def log_start(attempt: Attempt) -> None:
    worker_log.info(
        "job %s started (type %s, queue %s, attempt %d)",
        attempt.job_id,
        attempt.type,
        attempt.queue,
        attempt.attempt,
        extra=_fields(attempt),
    )


def log_ends(
    batch: Iterable[tuple[Outcome, Attempt]], rows: Iterable[JobRow | None], now_ms: int
) -> None:
    """One record per outcome of a committed finalize batch (`rows`: what it wrote; None
    where the fence did not match, so the outcome was not written: the claim was lost)."""
    for (outcome, attempt), row in zip(batch, rows, strict=True):
        outcome_name, level = _LOST if row is None else _ENDED.get(outcome.kind, _LOST)
        if not worker_log.isEnabledFor(level):
            continue
        fields = _fields(attempt)
        duration = None if attempt.started_ms is None else max(0, now_ms - attempt.started_ms)
        fields["outcome"] = outcome_name
        fields["duration_ms"] = duration
        why = ""
        if row is None:
            why = (
                ": the row is no longer this attempt's (rescued, or an earlier try of this "
                "write committed after all); the outcome was not written"
                if attempt.kept
                else ": the row is no longer this attempt's; its outcome was not written"
            )
        elif outcome.error is not None:
            code, message = _error(outcome.error)
            fields["error_code"] = code
            fields["error_message"] = message
            if len(message) > _MAX_ERROR_CHARS:
                message = message[:_MAX_ERROR_CHARS] + "..."
            why = f": {code}: {message}"
        took = "" if duration is None else f" after {duration} ms"
        worker_log.log(
            level,
            "job %s %s%s (type %s, queue %s, attempt %d)%s",
            attempt.job_id,
            outcome_name,
            took,
            attempt.type,
            attempt.queue,
            attempt.attempt,
            why,
            extra=fields,
        )


def _error(text: str) -> tuple[str, str]:
    try:
        raw = json.loads(text)
        return str(raw["code"]), str(raw["message"])
    except Exception:
        return "?", text


def log_raised(attempt: Attempt, exc: BaseException) -> None:
    """DEBUG: the traceback of what a handler raised (its end record follows)."""
    worker_log.debug(
        "job %s raised (type %s, queue %s, attempt %d)",
        attempt.job_id,
        attempt.type,
        attempt.queue,
        attempt.attempt,
        exc_info=exc,
        extra=_fields(attempt),
    )
