"""`JobHandle`: what `enqueue` returns.

`handle.finished` resolves with the terminal `JobSnapshot` whichever process finishes
the job (also in a manager that was never started: it then watches the row), and never
raises: failure and cancellation are visible in `status`. A rolled-back `enqueue_tx`'s
handle never resolves. At shutdown, pending futures are abandoned, not failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

from jobledger._storage.interface import JobRow
from jobledger._storage.rows import snapshot_from_row
from jobledger._types import JobSnapshot

__all__ = ["JobHandle", "Waiter"]

# Given a job id, a future for its terminal snapshot (the manager's; see the docstring).
Waiter = Callable[[str], "asyncio.Future[JobSnapshot]"]


class JobHandle:
    __slots__ = ("_row", "_snapshot", "_wait", "id")

    def __init__(self, wait: Waiter, row: JobRow) -> None:
        self._wait = wait
        self._row = row
        self._snapshot: JobSnapshot | None = None
        self.id: str = row[0]

    @property
    def snapshot(self) -> JobSnapshot:
        """The row as it was when this handle was made (use `jobs.get` for now)."""
        if self._snapshot is None:
            self._snapshot = snapshot_from_row(self._row)
        return self._snapshot

    @property
    def finished(self) -> _Finished:
        return _Finished(self)

    def __repr__(self) -> str:
        return f"JobHandle(id={self.id!r})"


class _Finished:
    """Awaitable for a handle's terminal snapshot."""

    __slots__ = ("_handle",)

    def __init__(self, handle: JobHandle) -> None:
        self._handle = handle

    def __await__(self) -> Generator[Any, None, JobSnapshot]:
        return self._wait().__await__()

    async def _wait(self) -> JobSnapshot:
        handle = self._handle
        return await handle._wait(handle.id)
