"""Showing stored strings on a terminal.

Queue, type and schedule names, ids, error messages and progress details come from the
table, and the table may have been written by an older release, another tool or an
attacker. Two rules follow:

* never as rich markup: `[/]` would crash a table and `[link=...]` would make a
  hyperlink, so cells are `rich.text.Text` (no markup parsing) or escaped;
* never as raw control characters: an ESC byte could move the cursor, retitle the
  window or rewrite earlier lines, so C0/C1 controls, DEL and the bidirectional
  overrides (which reorder what is shown) are printed as `\\x1b`-style escapes.

Passwords in URLs go through `redact` (`jobledger._storage.open`) before either.

Times in tables and reports have one form, `when`: ISO-8601 UTC to the second
(`2026-01-01T10:00:00Z`). `--json` keeps the read model's full form (microseconds).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from rich.text import Text

from jobledger._storage.open import redact
from jobledger.clock import from_ms

__all__ = ["RedactingFormatter", "cell", "configure_logging", "dumps", "visible", "when"]

# C0 controls, DEL, C1 controls, and the bidi embeddings/overrides/isolates/marks.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What `json.dumps` leaves raw inside strings (it escapes C0 itself; outside strings there
# is only layout whitespace, which must stay).
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_LAYOUT = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\x1b`, `\\u202e`).

    `keep_newlines` leaves newlines and tabs alone (multi-line log records)."""
    pattern = _CONTROL_BUT_LAYOUT if keep_newlines else _CONTROL
    return pattern.sub(_escape, text)


def cell(value: object, style: str = "") -> Text:
    """A table cell or a printed fragment: plain text, never markup, controls visible."""
    return Text(visible(redact(str(value))), style=style)


def when(value: datetime | int | str | None) -> str:
    """A time as tables show it: `2026-01-01T10:00:00Z` (UTC, to the second), `-` for
    none. Takes a datetime, epoch milliseconds or the read model's ISO text; text that
    is not a time is shown as it is."""
    if value is None:
        return "-"
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return text
    if isinstance(value, int):
        value = from_ms(value)
    if value.tzinfo is None:  # the read model's times are UTC
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps(..., ensure_ascii=False)` that still escapes what `visible` escapes.

    JSON always escapes C0 controls; DEL, C1 and the bidi controls are legal raw in JSON
    strings, and only ever occur inside strings, so `\\uXXXX` for them stays valid JSON."""
    text = json.dumps(value, ensure_ascii=False, **kwargs)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


class RedactingFormatter(logging.Formatter):
    """Log records as a human reads them: passwords masked, control characters visible."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(redact(super().format(record)), keep_newlines=True)


# The name of the handler `configure_logging` installs, so that a later call replaces it.
_HANDLER = "jobledger.cli"


def configure_logging(level: int, fmt: str | logging.Formatter) -> None:
    """`logging.basicConfig(level=, format=)` with a `RedactingFormatter` (or the given
    formatter) on stderr; like basicConfig, nothing when the root logger already has
    other handlers. A handler of an earlier call is replaced: `jobledger --debug worker
    --log-format json` logs at DEBUG in the worker's format, not the group's."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER:
            root.removeHandler(old)
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER)
    handler.setFormatter(fmt if isinstance(fmt, logging.Formatter) else RedactingFormatter(fmt))
    root.addHandler(handler)
    root.setLevel(level)
