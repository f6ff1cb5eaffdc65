"""One lifecycle primitive for every background duty.

A `Service` has these hooks — `on_init`, `on_ready` (awaited, in dependency order),
`on_all_ready` (fired once every service is ready, not awaited), `on_stop` and
`on_destroy` (reverse order) — and `register_interval` for periodic chores (exceptions
logged, the loop carries on, disposed at stop). `Runtime.stop` bounds every service's
stop at its `stop_timeout` (`SERVICE_STOP_TIMEOUT` seconds of real time unless the service
waits on purpose); a service that overruns is left to finish in the background and the
runtime moves on (an unclean pass).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jobledger.clock import Clock

__all__ = ["SERVICE_STOP_TIMEOUT", "Runtime", "Service"]

log = logging.getLogger("jobledger.lifecycle")

SERVICE_STOP_TIMEOUT = 5.0


class Service:
    name: str = "service"
    depends_on: tuple[str, ...] = ()

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._intervals: list[asyncio.Task[None]] = []

    def stop_timeout(self) -> float:
        """How long `Runtime.stop` waits for `on_stop` (a service that waits on purpose
        answers more)."""
        return SERVICE_STOP_TIMEOUT

    async def on_init(self) -> None:
        return None

    async def on_ready(self) -> None:
        return None

    async def on_all_ready(self) -> None:
        return None

    async def on_stop(self) -> None:
        return None

    async def on_destroy(self) -> None:
        return None

    def register_interval(
        self, fn: Callable[[], Awaitable[Any] | Any], seconds: float, *, first: float | None = None
    ) -> asyncio.Task[None]:
        async def loop() -> None:
            await self.clock.sleep(seconds if first is None else first)
            while True:
                try:
                    result = fn()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("interval of %s failed; it carries on", self.name)
                await self.clock.sleep(seconds)

        task = asyncio.get_running_loop().create_task(loop(), name=f"jobledger {self.name}")
        self._intervals.append(task)
        return task

    def dispose_intervals(self) -> None:
        for task in self._intervals:
            task.cancel()
        self._intervals.clear()


class Runtime:
    """Starts services in dependency order and stops them in reverse."""

    def __init__(self, services: list[Service]) -> None:
        self.services = _ordered(services)
        self._all_ready: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for s in self.services:
            await s.on_init()
        for s in self.services:
            await s.on_ready()

        async def ready(s: Service) -> None:
            # The hook's coroutine is made only once its task runs: a stop() that cancels
            # these tasks before their first step leaves no never-awaited coroutine behind.
            await _guard(s.on_all_ready(), s.name)

        async def all_ready() -> None:
            await asyncio.gather(*(ready(s) for s in self.services))

        self._all_ready = asyncio.get_running_loop().create_task(all_ready())

    async def stop(self) -> bool:
        """Stop every service; False if any overran its bound (an unclean pass)."""
        clean = True
        if self._all_ready is not None and not self._all_ready.done():
            self._all_ready.cancel()
        for s in reversed(self.services):
            task = asyncio.ensure_future(_guard(s.on_stop(), s.name))
            bound = s.stop_timeout()
            done, _ = await asyncio.wait({task}, timeout=bound)
            if task not in done:
                clean = False
                log.warning("stopping %s timed out after %gs", s.name, bound)
            s.dispose_intervals()
        for s in reversed(self.services):
            await _guard(s.on_destroy(), s.name)
        return clean


async def _guard(awaitable: Awaitable[Any], name: str) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("a lifecycle hook of %s raised", name)


def _ordered(services: list[Service]) -> list[Service]:
    by_name = {s.name: s for s in services}
    out: list[Service] = []
    seen: set[str] = set()

    def visit(s: Service, path: tuple[str, ...]) -> None:
        if s.name in seen:
            return
        if s.name in path:
            raise ValueError(f"service dependency cycle: {' -> '.join((*path, s.name))}")
        for dep in s.depends_on:
            if dep in by_name:
                visit(by_name[dep], (*path, s.name))
        seen.add(s.name)
        out.append(s)

    for s in services:
        visit(s, ())
    return out
