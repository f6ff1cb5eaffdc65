"""The bounds every input is held to before it reaches a row (docs/reference/errors.md).

Each bound is the edge of what the rest of the system can read back: a time past
year 9999 (or before 1970) is a row that `get`, `list` and every HTTP page fail on; an
integer past a signed 64-bit column makes the SQL driver raise `OverflowError` at bind
time; a lone surrogate cannot be encoded to the UTF-8 that both backends store.

| input                          | bound                                            |
|--------------------------------|--------------------------------------------------|
| any stored time (run_at, delay, Once.at) | 1970-01-01 .. 9999-12-31T23:59:59.999 UTC |
| integers stored in SQL (priority, max_attempts, list/count offset) | abs <= 2**62 |
| timeouts (job, handler, cancel)| > 0 and <= MAX_TIMEOUT_SECONDS (10 years)        |
| metadata                       | <= MAX_METADATA_BYTES characters of JSON (64 KiB) |
| names and keys (queue, type, idempotency key) | no control character, no surrogate |
| any other stored string        | no lone surrogate                                |

2**62 rather than 2**63 - 1 leaves headroom for the `attempt + 1` and `priority`
arithmetic the SQL does; no sensible value comes near either.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import TypeGuard

from jobledger.errors import JobValidationError

__all__ = [
    "MAX_INT",
    "MAX_METADATA_BYTES",
    "MAX_MS",
    "MAX_TIMEOUT_SECONDS",
    "MIN_MS",
    "SURROGATE",
    "bad_name_char",
    "findable",
    "has_surrogate",
    "is_finite_number",
    "ms_in_range",
]

MIN_MS = 0
# The last millisecond `clock.from_ms` can turn back into a datetime.
MAX_MS = round(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC).timestamp() * 1000)
MAX_INT = 2**62
MAX_TIMEOUT_SECONDS = 10 * 365 * 24 * 3600.0
MAX_METADATA_BYTES = 64 * 1024

# C0 and C1 controls, DEL, and the surrogate block: one compiled scan per name.
_BAD_NAME = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
SURROGATE = re.compile("[\ud800-\udfff]")


def ms_in_range(ms: int) -> bool:
    return MIN_MS <= ms <= MAX_MS


def bad_name_char(name: str) -> str | None:
    """The first control character or surrogate in `name`, or None."""
    found = _BAD_NAME.search(name)
    return None if found is None else found.group()


def has_surrogate(text: str) -> bool:
    # isascii() is O(1) in CPython (a flag on the string), so ASCII text costs no scan.
    return not text.isascii() and SURROGATE.search(text) is not None


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """An int or a finite float, not a bool. Unlike `math.isfinite`, never raises
    OverflowError (for an int too large for a float)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def findable(value: object, what: str) -> bool:
    """Whether `value` can name a stored row (a job or schedule id, a filter value).

    Not a string: JOB_INVALID_OPTION. A string with a lone surrogate: False, since no
    stored row can have it (the caller answers as for an unknown id).
    """
    if not isinstance(value, str):
        raise JobValidationError(
            f"{what} must be a string, not {type(value).__name__}",
            code="JOB_INVALID_OPTION",
            params={what: repr(value)[:200]},
        )
    return not has_surrogate(value)
