"""In-process events: job snapshots and progress, from one emit point.

Subscribers are plain callables run synchronously on the engine's loop; an exception in
one is logged and never reaches the engine. Snapshots are built only when somebody
listens, so an unobserved engine pays nothing for them. Other processes see the same
facts through the table (status, progress columns); the HTTP API turns them into
server-sent events.

Events:
    JobEvent(kind="snapshot")  a job was enqueued, scheduled for a retry, or settled
                               (claims publish nothing: the hot path stays free of it;
                               `jobs.get` shows `running`)
    JobEvent(kind="progress")  a running job reported progress
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from jobledger._types import JobSnapshot

__all__ = ["EventBus", "JobEvent"]

log = logging.getLogger("jobledger.events")


@dataclass(frozen=True, slots=True)
class JobEvent:
    kind: Literal["snapshot", "progress"]
    job_id: str
    snapshot: JobSnapshot | None = None
    progress: float | None = None
    detail: str | None = None


Subscriber = Callable[[JobEvent], None]


class EventBus:
    def __init__(self) -> None:
        self._all: list[Subscriber] = []
        self._by_job: dict[str, list[Subscriber]] = {}

    def subscribe(self, fn: Subscriber, *, job_id: str | None = None) -> Callable[[], None]:
        """Call `fn` for every event (or only `job_id`'s); returns the unsubscribe function."""
        target = self._all if job_id is None else self._by_job.setdefault(job_id, [])
        target.append(fn)

        def unsubscribe() -> None:
            try:
                target.remove(fn)
            except ValueError:
                pass
            if job_id is not None and not target:
                self._by_job.pop(job_id, None)

        return unsubscribe

    def wants(self, job_id: str) -> bool:
        return bool(self._all) or job_id in self._by_job

    def publish(self, event: JobEvent) -> None:
        for fn in (*self._all, *self._by_job.get(event.job_id, ())):
            try:
                fn(event)
            except Exception:
                log.exception("an event subscriber raised; the engine carries on")
