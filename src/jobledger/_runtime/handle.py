"""`JobHandle[R]`: what `enqueue` returns.

`handle.finished` resolves with the terminal `JobSnapshot` whichever process finishes
the job (also in a manager that was never started: it then watches the row), and never
raises: failure and cancellation are visible in `status`. A rolled-back `enqueue_tx`'s
handle never resolves. At shutdown, pending futures are abandoned, not failed.

`await handle.result()` waits the same way and returns the output as `R`, the job
type's result type (`JobType.decode_output`); it raises JOB_NOT_COMPLETED for a job that
failed or was cancelled. A handle made from a type name, or by `retry`, carries the job
type registered in its manager, if any: without one the result is the JSON value.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, cast

from typing_extensions import TypeVar

from jobledger._core.registry import JobType, not_completed
from jobledger._storage.interface import JobRow
from jobledger._storage.rows import snapshot_from_row
from jobledger._types import JobSnapshot, JobStatus

__all__ = ["JobHandle", "Waiter"]

# Any when the job type declares no result type (see R in _core/registry.py).
R = TypeVar("R", default=Any)

# Given a job id and the caller's running loop, a future of that loop for the job's
# terminal snapshot (the manager's; see the docstring).
Waiter = Callable[[str, asyncio.AbstractEventLoop], "asyncio.Future[JobSnapshot]"]


class JobHandle(Generic[R]):
    __slots__ = ("_job_type", "_row", "_snapshot", "_wait", "id")

    def __init__(self, wait: Waiter, row: JobRow, job_type: JobType[Any, R] | None = None) -> None:
        self._wait = wait
        self._row = row
        # The type that decodes the output; None: no JobType known, the output is JSON.
        self._job_type = job_type
        self._snapshot: JobSnapshot | None = None
        self.id: str = row[0]

    @property
    def snapshot(self) -> JobSnapshot:
        """The row as it was when this handle was made (use `jobs.get` for now)."""
        if self._snapshot is None:
            self._snapshot = snapshot_from_row(self._row)
        return self._snapshot

    @property
    def finished(self) -> Awaitable[JobSnapshot]:
        """The terminal snapshot, awaitable. On a running loop it is a new future itself,
        not an awaitable around one, so `asyncio.gather` of many handles adds a callback
        to each instead of wrapping each in a Task (bench/handles.py); without one (say
        `loop.run_until_complete(handle.finished)`) a coroutine that waits once awaited.
        Each access is its own: cancelling one (`asyncio.wait_for`'s timeout) leaves the
        rest."""
        loop = asyncio._get_running_loop()  # None off a loop, where the public one raises
        if loop is None:
            return self._finished_later()
        return self._wait(self.id, loop)

    async def _finished_later(self) -> JobSnapshot:
        return await self._wait(self.id, asyncio.get_running_loop())

    async def result(self) -> R:
        """The job's output as `R`, once the job is terminal; JOB_NOT_COMPLETED (with
        `params` `job_id`, `status` and `error`) when it failed or was cancelled."""
        snap = await self._wait(self.id, asyncio.get_running_loop())
        job_type = self._job_type
        if job_type is not None:
            return job_type.decode_output(snap)
        if snap.status != JobStatus.COMPLETED:
            raise not_completed(snap)
        return cast(R, snap.output)

    def __repr__(self) -> str:
        return f"JobHandle(id={self.id!r})"
