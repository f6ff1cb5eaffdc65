"""Persistent job schedules (DESIGN §2 schedules, §7 "Schedules"; reference §5).

Shared helpers for the tests in this package. Every test runs on a real database (the
`db` fixture: a SQLite file, or a PostgreSQL schema) and, except the two-process test,
on a `FakeClock`: time moves only through `clock.advance_async`, and `settle()` then
lets the loop run the woken timers, fire callbacks and handlers. Nothing here sleeps on
the wall clock except the bounded polls of `until()`, which wait for rows, never for time
to pass.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pydantic

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import run as bounded_run

__all__ = [
    "START",
    "TICK",
    "Tick",
    "advance",
    "catchup_key",
    "keys_of",
    "make_manager",
    "run",
    "settle",
    "sid_key",
    "until",
]

T = TypeVar("T")

# A Thursday, far from any DST change, on a whole minute: grid points are easy to read.
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Tick(pydantic.BaseModel):
    n: int


TICK = jl.JobType("sched.tick", Tick)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """One event loop per test (no pytest-asyncio), failing after 60 s instead of hanging."""
    return bounded_run(coro, timeout=60.0)


def make_manager(
    path: str | Path,
    clock: FakeClock,
    *,
    handler: jl.JobHandler[Tick, Any] | None = None,
    seen: list[int] | None = None,
    **options: Any,
) -> jl.JobManager:
    """A manager on `path` with a `TICK` handler; `seen` collects the payloads it ran.

    Chores that would only add fake-clock wake-ups (heartbeat, lease renewal, GC, the
    rescue tick, which runs every `20 * poll_interval`) are slowed down: tests step
    hours of fake time deadline by deadline, and these are not what they are about.
    """
    options.setdefault("startup_delay", 0)
    options.setdefault("heartbeat_interval", 600.0)
    options.setdefault("gc_interval", 0)
    options.setdefault("poll_interval", 2.0)
    options.setdefault("leader_ttl", 3600.0)
    jobs = jl.JobManager(path, clock=clock, **options)
    if handler is not None:
        jobs.register_handler(TICK, handler)
    else:
        sink = seen if seen is not None else []

        @jobs.handler(TICK, recovery="retry")
        async def tick(ctx: jl.JobContext[Tick]) -> None:
            sink.append(ctx.payload.n)

    return jobs


async def settle(rounds: int = 50) -> None:
    """Let woken timers, fire callbacks and claims run (no time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def advance(clock: FakeClock, seconds: float) -> None:
    """Move fake time, letting the loop run before and after.

    Before, because a timer armed by a synchronous call is a task that has not slept
    yet: `advance_async` only sees sleepers, and would step right over its deadline.
    """
    await settle()
    await clock.advance_async(seconds)
    await settle()


async def until(check: Callable[[], bool], *, timeout: float = 5.0) -> None:
    """Poll `check` in 5 ms steps until it holds; fail after `timeout` real seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {check}")
        await asyncio.sleep(0.005)


def sid_key(sid: str, at: datetime) -> str:
    """The idempotency key of a natural fire of `sid` at `at` (DESIGN §7)."""
    return f"schedule:{sid}:{round(at.timestamp() * 1000)}"


def catchup_key(sid: str, first_missed: datetime) -> str:
    """The key of a catch-up make-up job (DESIGN §7)."""
    return f"schedule:{sid}:catchup:{round(first_missed.timestamp() * 1000)}"


def keys_of(jobs: jl.JobManager, sid: str) -> Counter[str | None]:
    """How many job rows carry each idempotency key, for one schedule's jobs."""
    return Counter(s.idempotency_key for s in jobs.list(schedule_id=sid, limit=1000))
