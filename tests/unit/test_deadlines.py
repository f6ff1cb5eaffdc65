"""Handler timeouts on one timer (`_runtime/deadlines.py`), on a fake clock.

The attempts here are stand-ins with the two things `Deadlines` touches: the `timing`
flag it keeps and `expire`, which records that the timeout fired.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, cast

from jobledger._runtime.deadlines import Deadlines
from jobledger.testing import FakeClock


class _Attempt:
    def __init__(self) -> None:
        self.timing = False
        self.expired = 0

    def expire(self) -> None:
        self.expired += 1


def _on_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def _deadlines(clock: FakeClock) -> Deadlines:
    return Deadlines(asyncio.get_running_loop(), clock)


async def _settle() -> None:
    for _ in range(3):  # the timer task wakes, then runs `_fire`
        await asyncio.sleep(0)


@_on_a_loop
async def test_an_armed_attempt_expires_at_its_deadline_and_not_before() -> None:
    clock = FakeClock()
    deadlines = _deadlines(clock)
    slow, quick = _Attempt(), _Attempt()
    deadlines.arm(cast(Any, slow), 5.0)
    deadlines.arm(cast(Any, quick), 2.0)
    await asyncio.sleep(0)  # the timer's task starts sleeping on the clock
    clock.advance(1.9)
    await _settle()
    assert (slow.expired, quick.expired) == (0, 0)
    clock.advance(0.2)
    await _settle()
    assert (slow.expired, quick.expired) == (0, 1)
    assert not quick.timing
    clock.advance(3.0)
    await _settle()
    assert (slow.expired, quick.expired) == (1, 1)
    deadlines.close()


@_on_a_loop
async def test_a_disarmed_attempt_never_expires_though_the_timer_still_fires() -> None:
    clock = FakeClock()
    deadlines = _deadlines(clock)
    done, running = _Attempt(), _Attempt()
    deadlines.arm(cast(Any, done), 1.0)
    deadlines.arm(cast(Any, running), 3.0)
    deadlines.disarm(cast(Any, done))  # its handler returned
    await asyncio.sleep(0)
    clock.advance(1.5)  # the timer, set for `done`, fires with nothing to expire
    await _settle()
    assert done.expired == 0
    assert running.timing
    await asyncio.sleep(0)
    clock.advance(2.0)  # and re-armed itself for `running`
    await _settle()
    assert (done.expired, running.expired) == (0, 1)
    # Disarming after the timeout fired changes nothing (the handler's finally).
    deadlines.disarm(cast(Any, running))
    assert running.expired == 1
    deadlines.close()


@_on_a_loop
async def test_an_earlier_deadline_moves_the_timer_forward() -> None:
    clock = FakeClock()
    deadlines = _deadlines(clock)
    late, early = _Attempt(), _Attempt()
    deadlines.arm(cast(Any, late), 60.0)
    deadlines.arm(cast(Any, early), 0.5)
    await asyncio.sleep(0)
    clock.advance(0.6)
    await _settle()
    assert (late.expired, early.expired) == (0, 1)
    deadlines.close()


@_on_a_loop
async def test_the_entries_of_ended_attempts_do_not_pile_up() -> None:
    """Thousands of short jobs under a long timeout, 50 at a time: the heap stays within
    about twice what runs, however many ended."""
    clock = FakeClock()
    deadlines = _deadlines(clock)
    running: list[_Attempt] = []
    most = 0
    for _ in range(5_000):
        attempt = _Attempt()
        deadlines.arm(cast(Any, attempt), 300.0)
        running.append(attempt)
        if len(running) == 50:
            deadlines.disarm(cast(Any, running.pop(0)))
        most = max(most, len(deadlines._heap))
    assert most <= 2 * 50 + 1
    for attempt in running:
        deadlines.disarm(cast(Any, attempt))
    clock.advance(301.0)
    await _settle()
    assert all(a.expired == 0 for a in running)
    deadlines.close()


@_on_a_loop
async def test_close_cancels_the_timer() -> None:
    clock = FakeClock()
    deadlines = _deadlines(clock)
    attempt = _Attempt()
    deadlines.arm(cast(Any, attempt), 1.0)
    await asyncio.sleep(0)  # the timer's task starts sleeping on the clock
    assert clock.sleepers == 1
    deadlines.close()
    await asyncio.sleep(0)
    assert clock.sleepers == 0
    clock.advance(2.0)
    await _settle()
    assert attempt.expired == 0
