"""The promoter: moves due `delayed` rows (of any process) to `pending`, on time.

One loop, built from what it uses: the store, the engine (its clock-based `now_ms`, its
pause flag), the clock it sleeps on, and a `kick(queue)` callback for the queues that
got work. It sleeps until the earliest `scheduled_at` among delayed rows, or until
`wake()` (a delayed row was written here, another process committed, a pause ended).
A failed promotion is retried after `poll_interval`; the loop never dies of an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobledger._runtime.services import Service
from jobledger._storage.interface import Store
from jobledger.clock import Clock

if TYPE_CHECKING:
    from jobledger._runtime.engine import Engine

__all__ = ["Promoter"]

log = logging.getLogger("jobledger.promoter")


class Promoter(Service):
    name = "promoter"

    def __init__(
        self,
        store: Store,
        engine: Engine,
        clock: Clock,
        *,
        poll_interval: float,
        kick: Callable[[str], None],
    ) -> None:
        super().__init__(clock)
        self.store = store
        self.engine = engine
        self.poll_interval = poll_interval
        self.kick = kick
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def wake(self) -> None:
        """Look again now (call on the engine's loop)."""
        if self._wake is not None:
            self._wake.set()

    async def on_ready(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="jobledger promoter")

    async def on_stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        assert self._wake is not None
        wake, engine, store = self._wake, self.engine, self.store
        failing = False
        while not self._stopping:
            try:
                nxt = store.next_delayed_at()
            except Exception:
                # An uncaught error here ended the loop for good: no delayed row was
                # promoted by this process again (bench/chaos.py, PostgreSQL terminates).
                if failing:
                    log.debug("reading the next delayed row failed again", exc_info=True)
                else:
                    log.warning("reading the next delayed row failed; retrying", exc_info=True)
                failing = True
                await asyncio.sleep(self.poll_interval)
                continue
            failing = False
            now = engine.now_ms()
            if nxt is not None and nxt <= now and not engine.paused:
                try:
                    names = store.promote_due(now)
                except Exception:
                    log.warning("promotion failed; retrying", exc_info=True)
                    names = []
                    await asyncio.sleep(self.poll_interval)
                for name in names:
                    self.kick(name)
                continue
            wake.clear()
            delay = None if nxt is None or engine.paused else (nxt - now) / 1000
            await _wait_event_or_sleep(self.clock, wake, delay)


async def _wait_event_or_sleep(clock: Clock, event: asyncio.Event, delay: float | None) -> None:
    if delay is None:
        await event.wait()
        return
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(max(0.0, delay)))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
