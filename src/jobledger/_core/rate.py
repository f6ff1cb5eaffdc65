"""Rate limits: the public `RateLimit`, its parsing, and the sliding window's arithmetic.

A rate limit is at most `limit` job starts in any window of `per` seconds (DESIGN.md
§8.7): a sliding window, not a token bucket, so a burst never doubles at a window's
edge. It is counted in the claim transaction from a log of starts per bucket (one
bucket per queue), which each backend keeps in its `rate_log` table
(`_storage/rate.py`): a start is allowed at time t when fewer than `limit` starts of its
bucket lie in (t - per, t].
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobledger.errors import JobValidationError

__all__ = ["MAX_PERIOD_S", "RateLimit", "parse_rate", "stored_rate"]

MAX_PERIOD_S = 366 * 24 * 3600.0  # a year and a day: beyond it a limit is a typo
MAX_LIMIT = 1_000_000_000

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|s|min|m|h|d)\s*$")


def _invalid(message: str) -> JobValidationError:
    return JobValidationError(message, code="JOB_INVALID_OPTION")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `limit` job starts in any `per` seconds, across every process.

    `RateLimit(10, 1)` is ten a second; `RateLimit.parse("10/s")` the same. Jobs over the
    limit stay `pending` and start as soon as the window allows; none fails.

    `key(payload) -> str`: one window per key within the queue (a tenant, an API
    account), computed where the job is enqueued, by the handler registered there.
    """

    limit: int
    per: float
    key: Callable[[Any], str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        limit, per = self.limit, self.per
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise _invalid(
                f"a rate limit's limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}"
            )
        if (
            isinstance(per, bool)
            or not isinstance(per, int | float)
            or not math.isfinite(per)
            or not 0.001 <= per <= MAX_PERIOD_S
        ):
            raise _invalid(
                "a rate limit's period must be a number of seconds from 0.001 to "
                f"{MAX_PERIOD_S:g}, not {per!r}"
            )
        object.__setattr__(self, "per", float(per))
        if self.key is not None and not callable(self.key):
            raise _invalid(
                f"a rate limit's key must be a function of the payload, not {self.key!r}"
            )

    @property
    def per_ms(self) -> int:
        return max(1, round(self.per * 1000))

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """`"10/s"`, `"100/m"`, `"5/10s"`, `"1000/h"`, `"2/d"`, `"50/500ms"`."""
        return parse_rate(text)

    def __str__(self) -> str:
        per = self.per
        for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
            if per >= size and (per / size).is_integer():
                n = int(per / size)
                return f"{self.limit}/{'' if n == 1 else n}{unit}"
        return f"{self.limit}/{round(per * 1000)}ms"

    def to_json(self) -> dict[str, object]:
        return {"limit": self.limit, "per": self.per, "text": str(self)}


def stored_rate(limit: int | None, per_ms: int | None) -> RateLimit | None:
    """The limit a `queue_settings` row holds (None: none set)."""
    return None if limit is None or per_ms is None else RateLimit(limit, per_ms / 1000)


def parse_rate(text: object) -> RateLimit:
    if not isinstance(text, str):
        raise _invalid(f"a rate must be a string such as '10/s', not {text!r}")
    m = _RATE.match(text)
    if m is None:
        raise _invalid(
            f"cannot read the rate {text!r}: write <starts>/<period>, such as 10/s, 100/m, "
            "5/10s, 1000/h or 50/500ms"
        )
    count, size, unit = m.groups()
    per = (float(size) if size is not None else 1.0) * _UNITS[unit]
    if per <= 0:
        raise _invalid(f"a rate's period must be positive, not {text!r}")
    return RateLimit(int(count), per)
