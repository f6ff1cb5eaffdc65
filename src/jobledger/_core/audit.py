"""What an audit entry may hold (DESIGN.md §8.9), checked before a row is written.

Invariants: `actor`, `action` and `target` are non-empty names without control
characters or surrogates, at most `MAX_FIELD` characters (a target that is a filter is
its text form, cut by the caller); `detail` is a JSON object of at most
`MAX_DETAIL_BYTES` characters. Anything else is a `JobValidationError`
(JOB_INVALID_OPTION) and nothing is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from jobledger._core.limits import bad_name_char, has_surrogate
from jobledger._storage.observe import AuditRecord
from jobledger._types import AuditEntry
from jobledger.clock import from_ms
from jobledger.errors import JobValidationError

__all__ = [
    "MAX_DETAIL_BYTES",
    "MAX_FIELD",
    "audit_detail",
    "audit_entry",
    "audit_target",
    "check_audit_field",
]

MAX_FIELD = 500
_BAD = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
MAX_DETAIL_BYTES = 16 * 1024


def _invalid(message: str, field: str) -> JobValidationError:
    return JobValidationError(message, code="JOB_INVALID_OPTION", params={"field": field})


def check_audit_field(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise _invalid(f"{field} must be a non-empty string, not {value!r:.100}", field)
    if len(value) > MAX_FIELD:
        raise _invalid(f"{field} is {len(value)} characters; the limit is {MAX_FIELD}", field)
    if bad_name_char(value) is not None:
        raise _invalid(f"{field} holds a control character: {value!r:.100}", field)
    return value


def audit_target(value: str) -> str:
    """What the console and the CLI record as an action's target: the id, queue or
    filter the action was taken on, with control characters and lone surrogates
    written as escapes and cut to `MAX_FIELD`. An action that took effect is always
    recorded, whatever the stored name it named holds."""
    shown = _BAD.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), value)
    return shown[:MAX_FIELD] or "-"


def audit_detail(detail: Mapping[str, Any] | None) -> str:
    """`detail` as the JSON text stored (keys sorted, so one action reads the same on
    both backends)."""
    if detail is None:
        return "{}"
    if not isinstance(detail, Mapping):
        raise _invalid(f"detail must be a mapping, not {type(detail).__name__}", "detail")
    try:
        text = json.dumps(dict(detail), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _invalid(f"detail must be JSON: {exc}", "detail") from None
    if len(text) > MAX_DETAIL_BYTES:
        raise _invalid(
            f"detail is {len(text)} characters of JSON; the limit is {MAX_DETAIL_BYTES}",
            "detail",
        )
    if has_surrogate(text) or _has_nul(detail):
        # PostgreSQL's jsonb refuses NUL; one rule on both backends.
        raise _invalid("detail holds a NUL or a lone surrogate", "detail")
    return text


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def audit_entry(record: AuditRecord) -> AuditEntry:
    try:
        detail = json.loads(record.detail)
    except ValueError:
        detail = {"text": record.detail}
    if not isinstance(detail, dict):
        detail = {"value": detail}
    return AuditEntry(
        record.id, from_ms(record.at), record.actor, record.action, record.target, detail
    )
