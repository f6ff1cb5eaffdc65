"""Time, injected.

Every module that needs the time asks a `Clock`; nothing else in jobledger reads the
wall clock. Two readings exist on purpose:

* `now()` / `time()` are wall-clock (aware UTC / epoch seconds). They are what the
  database stores and compares (`scheduled_at <= now`), so they must agree across
  processes.
* `monotonic()` and `sleep()` measure intervals inside one process (timeouts, backoff
  budgets, timers). A wall clock that jumps never stretches or shrinks them.

`jobledger.testing.FakeClock` implements the same protocol with time that only moves
when a test says so.
"""

from __future__ import annotations

import asyncio
import time as _time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "from_ms", "to_ms"]


@runtime_checkable
class Clock(Protocol):
    """What jobledger needs to know about time."""

    def now(self) -> datetime:
        """The wall-clock time as an aware UTC datetime."""
        ...

    def time(self) -> float:
        """The wall-clock time in epoch seconds (what `now()` says, as a float)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences mean anything."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clock: `time.time`, `time.monotonic` and `asyncio.sleep`."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def time(self) -> float:
        return _time.time()

    def monotonic(self) -> float:
        return _time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


def to_ms(value: datetime) -> int:
    """Epoch milliseconds of an aware datetime (naive values are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return round(value.timestamp() * 1000)


def from_ms(value: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(value / 1000, tz=UTC)
