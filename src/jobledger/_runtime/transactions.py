"""Write transactions a caller drives: `jobs.write_tx()` (`WriteTx`) and a handler's
`ctx.transaction()` (`JobTransaction`, DESIGN.md §8.13).

Invariants of `ctx.transaction()` (`Attempt.transaction` runs it):

* One commit holds the caller's statements, the rows its `enqueue_tx` calls wrote and
  the job's own transition to `completed` (with `set_output`'s value, default None),
  written by the same statements as any finalize (`Store.finalize_in`), fenced on the
  attempt's `(worker_id, attempt)`. If this attempt no longer owns the row, or its token
  fired (a cancel, a timeout, a shutdown) before the commit, everything rolls back and
  `JobClaimLost` is raised: a stale worker's effects never land beside the rescuer's.
* An exception inside the block rolls everything back and leaves the handler by the
  ordinary failure path (retry or fail, by the handler's policy).
* One transaction per attempt: a second is `JOB_INVALID_OPTION`, before anything opens.
* After the commit the attempt is done: the engine settles it from the committed row
  without writing again (`Engine._flush`); what the handler returns is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jobledger._storage.interface import Store

__all__ = ["JobTransaction", "WriteTx"]

_UNSET: Any = object()


class WriteTx:
    """An open write transaction on the job database (`with jobs.write_tx() as tx:`)."""

    __slots__ = ("_after_commit", "_open", "_store", "conn")

    def __init__(self, conn: Any, store: Store | None = None) -> None:
        self.conn = conn
        self._after_commit: list[Callable[[], None]] = []
        # Which manager's transaction this is, and whether it is still open: a row
        # written through another manager's tx lands in the other database, and one
        # written after the commit is committed on its own (autocommit).
        self._store = store
        self._open = True

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self.conn.executemany(sql, rows)

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after_commit.append(fn)


class JobTransaction(WriteTx):
    """`ctx.transaction()`'s transaction: a `WriteTx` whose commit also completes the job.

    Use `jobs.enqueue_tx(tx, ...)` for follow-up jobs and `tx.set_output(value)` for the
    job's output (validated as a returned value would be, at the commit)."""

    __slots__ = ("output",)

    def __init__(self, conn: Any, store: Store) -> None:
        super().__init__(conn, store)
        self.output: Any = None

    def set_output(self, value: Any) -> None:
        """The job's output, stored by the commit (default None)."""
        self.output = value
