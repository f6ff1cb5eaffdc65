"""The worker and leader-lease operations of both stores, delegated to the dialect.

Each store names its dialect's modules (`_worker_statements`: `sqlite/workers.py` or
`postgres/workers.py`; `_lease_statements`: the matching `leader.py`), and `WorkerOps`
turns them into the `Store` protocol's methods. Policy (who is dead, what becomes of a
dead worker's rows, whether a lease holder is alive) stays above the dialects, in
`jobledger._core.recovery`; the callables it produces are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobledger._storage.interface import JobRow
    from jobledger._storage.records import LeaseRow, RecoveryPlan, RecoveryStats, WorkerRow

__all__ = ["WorkerOps"]


class WorkerOps:
    _worker_statements: ModuleType
    _lease_statements: ModuleType

    def register_worker(
        self, worker_id: str, hostname: str, pid: int, handlers: Sequence[str], now_ms: int
    ) -> None:
        self._worker_statements.register_worker(self, worker_id, hostname, pid, handlers, now_ms)

    def heartbeat(self, worker_id: str, now_ms: int) -> bool:
        return bool(self._worker_statements.heartbeat(self, worker_id, now_ms))

    def stop_worker(self, worker_id: str, now_ms: int) -> None:
        self._worker_statements.stop_worker(self, worker_id, now_ms)

    def list_workers(self) -> list[WorkerRow]:
        rows: list[WorkerRow] = self._worker_statements.list_workers(self)
        return rows

    def recover_worker(
        self,
        worker_id: str,
        plan: Callable[[Sequence[JobRow]], RecoveryPlan],
        cancel_error: Callable[[str], str],
        now_ms: int,
    ) -> RecoveryStats:
        stats: RecoveryStats = self._worker_statements.recover_worker(
            self, worker_id, plan, cancel_error, now_ms
        )
        return stats

    def read_lease(self) -> LeaseRow | None:
        lease: LeaseRow | None = self._lease_statements.read_lease(self)
        return lease

    def take_lease(
        self, worker_id: str, *, now_ms: int, ttl_ms: int, alive: Callable[[LeaseRow], bool]
    ) -> int | None:
        term: int | None = self._lease_statements.take_lease(
            self, worker_id, now_ms=now_ms, ttl_ms=ttl_ms, alive=alive
        )
        return term

    def renew_lease(self, worker_id: str, term: int, *, expires_at: int) -> bool:
        return bool(
            self._lease_statements.renew_lease(self, worker_id, term, expires_at=expires_at)
        )

    def resign_lease(self, worker_id: str, term: int) -> None:
        self._lease_statements.resign_lease(self, worker_id, term)
