"""A clock whose time moves only when a test says so.

`sleep()` parks the calling task on a heap of deadlines. `advance(seconds)` moves wall
and monotonic time together and wakes every sleeper whose deadline has passed;
`await advance_async(seconds)` does the same one deadline at a time, letting the event
loop run the woken tasks before moving on, so chains of timers (a timer that re-arms
itself) fire at the right fake times.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from datetime import UTC, datetime

__all__ = ["FakeClock"]

_DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


class FakeClock:
    """Implements `jobledger.Clock` with hand-moved time."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or _DEFAULT_START
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        self._wall = start.timestamp()
        self._mono = 1000.0
        self._seq = itertools.count()
        self._sleepers: list[
            tuple[float, int, asyncio.Future[None], asyncio.AbstractEventLoop]
        ] = []
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._wall, tz=UTC)

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut, loop))
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are asleep on this clock right now."""
        with self._lock:
            return sum(1 for _, _, fut, _ in self._sleepers if not fut.done())

    def next_deadline(self) -> float | None:
        """Seconds until the earliest sleeper wakes, or None when nobody sleeps."""
        with self._lock:
            self._drop_done()
            if not self._sleepers:
                return None
            return max(0.0, self._sleepers[0][0] - self._mono)

    def set(self, when: datetime) -> None:
        """Jump to wall time `when` (forward only), waking sleepers on the way."""
        delta = when.timestamp() - self._wall
        if delta < 0:
            raise ValueError("FakeClock only moves forward")
        self.advance(delta)

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` and wake every sleeper now due."""
        if seconds < 0:
            raise ValueError("FakeClock only moves forward")
        with self._lock:
            self._wall += seconds
            self._mono += seconds
            due = self._pop_due()
        for fut, loop in due:
            _wake(fut, loop)

    async def advance_async(self, seconds: float, *, settle: int = 20) -> None:
        """Advance one deadline at a time, letting the loop run woken tasks in between."""
        if seconds < 0:
            raise ValueError("FakeClock only moves forward")
        target = self._mono + seconds
        # Let tasks that were just scheduled reach their first sleep, so a timer armed
        # right before this call is not stepped over.
        for _ in range(settle):
            await asyncio.sleep(0)
        while True:
            with self._lock:
                self._drop_done()
                if not self._sleepers or self._sleepers[0][0] > target:
                    break
                step = max(0.0, self._sleepers[0][0] - self._mono)
            self.advance(step)
            for _ in range(settle):
                await asyncio.sleep(0)
        self.advance(max(0.0, target - self._mono))
        for _ in range(settle):
            await asyncio.sleep(0)

    def _drop_done(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)

    def _pop_due(self) -> list[tuple[asyncio.Future[None], asyncio.AbstractEventLoop]]:
        due: list[tuple[asyncio.Future[None], asyncio.AbstractEventLoop]] = []
        while self._sleepers and self._sleepers[0][0] <= self._mono + 1e-9:
            _, _, fut, loop = heapq.heappop(self._sleepers)
            due.append((fut, loop))
        return due

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now().isoformat()})"


def _wake(fut: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
    def resolve() -> None:
        if not fut.done():
            fut.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        resolve()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(resolve)
