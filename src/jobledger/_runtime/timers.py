"""Timers on the injected clock.

With the real clock a timer is a plain `loop.call_later` (cheap: no task per timer).
With any other clock (a `FakeClock` in tests) it is a task sleeping on that clock, so
timeouts, backoff and the quiet window move only when the test moves time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from jobledger.clock import Clock, SystemClock

__all__ = ["Cancellable", "call_later", "wait_with_timeout"]


class Cancellable(Protocol):
    def cancel(self) -> Any: ...


def call_later(
    loop: asyncio.AbstractEventLoop, clock: Clock, delay: float, fn: Callable[[], None]
) -> Cancellable:
    if isinstance(clock, SystemClock):
        return loop.call_later(max(0.0, delay), fn)

    async def fire() -> None:
        await clock.sleep(delay)
        fn()

    return loop.create_task(fire())


async def wait_with_timeout(clock: Clock, awaitable: Awaitable[Any], timeout: float | None) -> bool:
    """Await `awaitable` for at most `timeout` seconds of `clock` time; True if it finished."""
    task = asyncio.ensure_future(awaitable)
    if timeout is None:
        await task
        return True
    if isinstance(clock, SystemClock):
        done, _ = await asyncio.wait({task}, timeout=max(0.0, timeout))
    else:
        sleeper = asyncio.ensure_future(clock.sleep(timeout))
        done, _ = await asyncio.wait({task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        sleeper.cancel()
    if task in done:
        return True
    task.cancel()
    return False
