"""The worker's log formats: `--log-format text` (the default) and `json`.

Text is one line per record, `TIME LEVEL LOGGER: MESSAGE`; the worker's job records say
their job in the message, and `ctx.logger`'s records (logger `jobledger.job`) get
`(job ID, type T, queue Q, attempt N)` appended, so that the lines of jobs running side
by side can be told apart.

JSON is one object per record: `timestamp` (ISO-8601 UTC, milliseconds), `level`,
`logger` and `message`, then the record's extra attributes (on the worker's job records
and on `ctx.logger`'s: `job_id`, `type`, `queue`, `attempt`; on end records also
`outcome`, `duration_ms` and, for an error, `error_code` and `error_message`), then
`exc_info` (the traceback) when there is one. python-json-logger builds and serializes
the object.

As in text (`_text.RedactingFormatter`), passwords in URLs are masked in every string
field; control characters cannot reach the terminal raw: JSON escapes C0 and, with
`ensure_ascii`, everything past ASCII, and DEL is escaped here.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from jobledger._storage.open import redact
from jobledger.cli._text import RedactingFormatter

__all__ = ["TEXT_FORMAT", "JobTextFormatter", "JsonLogFormatter"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JobTextFormatter(RedactingFormatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # Before the traceback, which `Formatter.format` appends to what this returns.
        text = super().formatMessage(record)
        job_id = getattr(record, "job_id", None)
        if record.name == "jobledger.job" and job_id is not None:
            text += (
                f" (job {job_id}, type {getattr(record, 'type', '?')}, "
                f"queue {getattr(record, 'queue', '?')}, attempt {getattr(record, 'attempt', '?')})"
            )
        return text


class JsonLogFormatter(JsonFormatter):
    def __init__(self) -> None:
        super().__init__(
            ["asctime", "levelname", "name", "message"],
            rename_fields={"asctime": "timestamp", "levelname": "level", "name": "logger"},
            json_ensure_ascii=True,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        for key, value in log_data.items():
            if isinstance(value, str):
                log_data[key] = redact(value)
        return log_data

    def serialize_log_record(self, log_data: dict[str, Any]) -> str:
        # DEL is the one control `ensure_ascii` leaves raw; it only occurs inside strings.
        return super().serialize_log_record(log_data).replace("\x7f", "\\u007f")
