"""Handler timeouts on one timer per engine.

Invariants: every attempt armed here and not disarmed has an entry in the heap, at its
deadline (`clock.monotonic()` when armed, plus its timeout); the timer, when set, is due
at or before the earliest entry; an attempt expires (`Attempt.expire`) only if it is
still armed when its deadline passes, so one disarmed when its handler returned never
sees its timeout fire. Entries of disarmed attempts stay until they reach the head or
until they outnumber the armed ones, when the heap is rebuilt without them: the heap
holds at most about twice the attempts running with a timeout, plus a few. `close`
(the engine's shutdown) cancels the timer.

A timer per job (`loop.call_later`, then its cancel when the handler returns) cost a
drained job about 20,000 instructions: asyncio's `TimerHandle` is Python, each copies
the context, and the loop's heap orders them by a Python `__lt__`. Here arming is a
`heappush` of a tuple and disarming is a flag (docs/benchmarks.md, twenty-third round).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import TYPE_CHECKING

from jobledger._runtime.timers import Cancellable, call_later
from jobledger.clock import Clock

if TYPE_CHECKING:
    from jobledger._runtime.attempt import Attempt

__all__ = ["Deadlines"]

# Below this many entries the heap is never rebuilt (a rebuild would cost more than the
# entries it drops).
_KEEP = 64


class Deadlines:
    __slots__ = ("_armed", "_at", "_heap", "_seq", "_timer", "clock", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self.loop = loop
        self.clock = clock
        self._heap: list[tuple[float, int, Attempt]] = []
        self._seq = itertools.count()  # ties: the earlier armed first, never an Attempt
        self._armed = 0
        self._timer: Cancellable | None = None
        self._at: float | None = None  # when the timer is due

    def arm(self, attempt: Attempt, seconds: float) -> None:
        """Expire `attempt` `seconds` from now unless disarmed first."""
        at = self.clock.monotonic() + seconds
        heapq.heappush(self._heap, (at, next(self._seq), attempt))
        attempt.timing = True
        self._armed += 1
        if self._at is None or at < self._at:
            self._set_timer(at)

    def disarm(self, attempt: Attempt) -> None:
        """The handler returned: its timeout must not fire."""
        if not attempt.timing:
            return  # expired already
        attempt.timing = False
        self._armed -= 1
        heap = self._heap
        # The timer stays for the entry at the head even when that attempt was disarmed:
        # handlers that return without awaiting would otherwise arm and cancel a timer
        # each, as before. It fires once, finds nothing to expire, and re-arms.
        if len(heap) > _KEEP and len(heap) > 2 * self._armed:
            self._heap = heap = [e for e in heap if e[2].timing]
            heapq.heapify(heap)
            if not heap:
                self._cancel_timer()

    def close(self) -> None:
        self._cancel_timer()
        self._heap.clear()

    def _fire(self) -> None:
        self._timer = self._at = None
        now = self.clock.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            attempt = heapq.heappop(heap)[2]
            if attempt.timing:
                attempt.timing = False
                self._armed -= 1
                attempt.expire()
        if heap:
            self._set_timer(heap[0][0])

    def _set_timer(self, at: float) -> None:
        self._cancel_timer()
        self._at = at
        self._timer = call_later(
            self.loop, self.clock, max(0.0, at - self.clock.monotonic()), self._fire
        )

    def _cancel_timer(self) -> None:
        timer, self._timer, self._at = self._timer, None, None
        if timer is not None:
            timer.cancel()
