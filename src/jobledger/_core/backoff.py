"""Retry policy and backoff: pure functions of the attempt number.

`compute_backoff(policy, retry_number)` takes the number of the retry (1 for the first
retry). exponential: `base * 2**(n-1)`, fixed: `base`, none: 0; always capped at
`max_delay` (a base above the cap is allowed and simply capped). Jitter, when on, picks
uniformly in [delay/2, delay] ("equal jitter"), so a herd spreads out but never waits
longer than the un-jittered delay.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from jobledger._core.limits import MAX_INT, MAX_TIMEOUT_SECONDS, is_finite_number
from jobledger.errors import JobValidationError

__all__ = ["DEFAULT_RETRY", "Backoff", "RetryPolicy", "compute_backoff"]

Backoff = Literal["none", "fixed", "exponential"]


def validate_max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise JobValidationError(
            f"max_attempts must be an integer in [1, 2**62], not {value!r}",
            code="JOB_INVALID_MAX_ATTEMPTS",
            params={"max_attempts": repr(value)},
        )
    return value


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff: Backoff = "exponential"
    base_delay: float = 1.0
    max_delay: float = 60.0
    jitter: bool = False

    def __post_init__(self) -> None:
        validate_max_attempts(self.max_attempts)
        if self.backoff not in ("none", "fixed", "exponential"):
            raise JobValidationError(
                f"backoff must be 'none', 'fixed' or 'exponential', not {self.backoff!r}",
                code="JOB_INVALID_OPTION",
                params={"backoff": self.backoff},
            )
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if not is_finite_number(value) or not 0 <= value <= MAX_TIMEOUT_SECONDS:
                raise JobValidationError(
                    f"{name} must be a number of seconds in [0, {MAX_TIMEOUT_SECONDS:g}], "
                    f"not {value!r}",
                    code="JOB_INVALID_OPTION",
                    params={name: repr(value)},
                )


DEFAULT_RETRY = RetryPolicy()


def compute_backoff(
    policy: RetryPolicy, retry_number: int, rand: random.Random | None = None
) -> float:
    n = max(1, retry_number)
    if policy.backoff == "none":
        delay = 0.0
    elif policy.backoff == "fixed":
        delay = min(policy.base_delay, policy.max_delay)
    else:
        # 2**n overflows float long before it matters; the cap makes large n moot.
        delay = (
            policy.max_delay if n > 64 else min(policy.base_delay * 2 ** (n - 1), policy.max_delay)
        )
    if policy.jitter and delay > 0:
        delay = (rand or random).uniform(delay / 2, delay)
    return delay
