"""The watcher: notices what other processes committed, without scanning the table.

It polls the store's `data_version` (SQLite's `PRAGMA data_version`, PostgreSQL's
counter) every `poll_interval` and, on a change, resolves the handles waiting here on
jobs that ended elsewhere. While it follows (a started manager, not stopping) a change
also means: new queues, cancel requests for the attempts running here, a kick of every
queue, a look at delayed rows and schedules changed by other processes.

Two ways it runs: as a service of a started manager (`on_ready` .. `on_destroy`), and,
in a manager that was never started, only while handles wait (`watch_waiters`). Either
way one loop, which ends when nothing is left for it to do. A failed read or apply is
logged and the loop carries on; a change whose apply failed counts as unseen, so the
next pass applies it again (every step of `_apply` may run twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobledger._runtime.queues import QueueBook
from jobledger._runtime.services import Service
from jobledger._storage.interface import Store
from jobledger.clock import Clock

if TYPE_CHECKING:
    from jobledger._runtime.engine import Engine

__all__ = ["Watcher"]

log = logging.getLogger("jobledger.watcher")


class Watcher(Service):
    name = "watcher"
    depends_on = ("promoter",)

    def __init__(
        self,
        store: Store,
        engine: Engine,
        clock: Clock,
        queues: QueueBook,
        *,
        poll_interval: float,
        wake_promoter: Callable[[], None],
        follow_schedules: Callable[[], None],
    ) -> None:
        super().__init__(clock)
        self.store = store
        self.engine = engine
        self.queues = queues
        self.poll_interval = poll_interval
        self.wake_promoter = wake_promoter
        self.follow_schedules = follow_schedules
        self.following = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    def watch_waiters(self) -> None:
        """Make sure a loop runs while handles wait (call on the running loop)."""
        if self._closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="jobledger watcher"
            )

    def stop_following(self) -> None:
        """From now on only waiting handles are served (the manager is stopping)."""
        self.following = False

    async def on_ready(self) -> None:
        self.following = True
        self.watch_waiters()

    async def on_stop(self) -> None:
        self.following = False

    async def on_destroy(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        store, engine = self.store, self.engine
        last = -1
        failing = False
        while self.following or engine.waiters:
            try:
                version = store.data_version()
            except Exception:
                log.debug("data_version failed", exc_info=True)
                version = last
            if version != last:
                try:
                    self._apply()
                except Exception:
                    # Not marked seen: applied again at the next pass. A change whose
                    # kick was lost (its read met a connection the server had ended)
                    # left jobs pending with nothing left to wake anyone once the
                    # writers went quiet (bench/chaos.py, PostgreSQL terminates).
                    if failing:
                        log.debug("the watcher failed to apply a change again", exc_info=True)
                    else:
                        log.exception("the watcher failed to apply a change; trying again")
                    failing = True
                else:
                    last = version
                    if failing:
                        log.warning("the watcher applies changes again")
                    failing = False
            await asyncio.sleep(self.poll_interval)

    def _apply(self) -> None:
        engine, store = self.engine, self.store
        if engine.waiters:
            # A job running here is resolved by its finalize; one whose row is still to be
            # read (`engine.unread`) by that read, which comes after this look at
            # `data_version`: what it misses changes the version, and the next pass reads.
            inflight, unread = engine.inflight, engine.unread
            ids = [i for i in engine.waiters if i not in inflight and i not in unread]
            engine.resolve_terminal(store.terminal_among(ids))
        if not self.following:
            return
        self.queues.follow()
        if engine.inflight:
            for job_id, reason in store.cancel_requested_among(list(engine.inflight)):
                attempt = engine.inflight.get(job_id)
                if attempt is not None:
                    engine.abort(
                        attempt, "cancel", f"Job cancelled: {reason}" if reason else "Job cancelled"
                    )
        engine.kick_all()
        self.wake_promoter()
        self.follow_schedules()
