"""Layer 0: the one write primitive, and the coordinator that may retry it.

`run_write_transaction(conn, work, label)` is the one write primitive (docs/design/storage.md):

    BEGIN IMMEDIATE  ->  work() exactly once  ->  COMMIT

On any exception it asks the connection whether a transaction is still open
(`in_transaction`, a live call to `sqlite3_get_autocommit`). It rolls back only when one
is open or the answer is unknown, because SQLite may already have rolled back by itself
(SQLITE_INTERRUPT, some FULL/IOERR/BUSY cases) and an unguarded ROLLBACK would then raise
"cannot rollback - no transaction is active" over the real error. A failing rollback is
recorded, never raised. The original exception is re-raised with its identity, carrying
`TxDiagnostics` in its `jobledger_tx` attribute (and a note).

It refuses to start inside an open transaction: cleaning up after a failed BEGIN would
otherwise roll back the caller's outer transaction.

`run_with_write_retry(op, ...)` is the layer above. It replays a *whole* transaction,
and only when all of these hold: the caller declared it idempotent, it failed in the
work or commit phase with an `SQLITE_BUSY*` code, and the connection confirmed no
transaction is left open. Never a single statement. BUSY at BEGIN is not retried here: it
reaches the caller as `DatabaseBusy` (DB_BUSY) so the caller can defer. An error that
leaves the transaction active or unknown becomes `WriteTransactionFailed`.

`run_write_statement(conn, sql, params, label)` is the same primitive for a transaction
that is one statement: the statement runs in SQLite's autocommit, which takes the write
lock, writes and commits inside that one call (what BEGIN IMMEDIATE, the statement and
COMMIT do, without the two extra statements: about a tenth of a single enqueue's work).
It is committed when the call returns, or rolled back by SQLite if it fails. Its phase is
"statement", which is never replayed: a BUSY there was a wait for the write lock, like
BUSY at BEGIN.

`with_write_tx(conn, work, ...)` combines both and maps SQLite errors onto the public
`StorageError` tree. Connections must be opened with `isolation_level=None`, so Python
never begins or commits anything on its own.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from jobledger.errors import DatabaseBusy, DatabaseFull, StorageError, WriteTransactionFailed

if TYPE_CHECKING:
    from jobledger._storage.sqlite.connections import WriteGate

__all__ = [
    "NestedTransactionError",
    "Phase",
    "TxDiagnostics",
    "diagnostics_of",
    "is_busy_error",
    "run_with_write_retry",
    "run_write_statement",
    "run_write_transaction",
    "storage_error",
    "with_write_tx",
    "write_transaction",
]

T = TypeVar("T")
Phase = Literal["begin", "work", "commit", "statement"]

SQLITE_BUSY = 5
SQLITE_FULL = 13
# A gate wait shorter than this leaves SQLite's busy timeout as it is (not worth two
# PRAGMAs); a longer one shortens it for the BEGIN that follows.
_GATE_SLACK = 0.005
_DIAG_ATTR = "jobledger_tx"


class NestedTransactionError(RuntimeError):
    """run_write_transaction was called on a connection already inside a transaction."""


@dataclass(slots=True)
class TxDiagnostics:
    """What happened to one failed write transaction."""

    phase: Phase
    code: int | None
    code_name: str | None
    label: str
    rollback_succeeded: bool | None  # None: no rollback was attempted
    rollback_error: str | None
    transaction_active: bool | None  # after cleanup; None: could not be read
    attempts: int = 1

    def describe(self) -> str:
        return (
            f"write tx {self.label!r} failed in {self.phase} "
            f"({self.code_name or 'no sqlite code'}); rollback={self.rollback_succeeded}"
            f"{'' if self.rollback_error is None else f' ({self.rollback_error})'}; "
            f"transaction_active={self.transaction_active}; attempts={self.attempts}"
        )


def diagnostics_of(exc: BaseException) -> TxDiagnostics | None:
    diag = getattr(exc, _DIAG_ATTR, None)
    return diag if isinstance(diag, TxDiagnostics) else None


def _error_code(exc: BaseException) -> tuple[int | None, str | None]:
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(code, int):
        return code, name if isinstance(name, str) else None
    if isinstance(exc, sqlite3.OperationalError) and str(exc) in (
        "database is locked",
        "database is busy",
    ):
        return SQLITE_BUSY, "SQLITE_BUSY"
    return None, None


def is_busy_error(exc: BaseException) -> bool:
    """True for every SQLITE_BUSY* code (BUSY, BUSY_SNAPSHOT, BUSY_RECOVERY, BUSY_TIMEOUT)."""
    code, _ = _error_code(exc)
    return code is not None and code & 0xFF == SQLITE_BUSY


def _transaction_state(conn: sqlite3.Connection) -> bool | None:
    try:
        return conn.in_transaction
    except Exception:
        return None


class write_transaction:
    """`with write_transaction(conn, label):` — the primitive as a context manager.

    BEGIN IMMEDIATE on enter, COMMIT on a clean exit; any exception (in the body or in
    COMMIT) goes through the guarded cleanup and is re-raised with diagnostics.

    A connection that carries a write gate (`connections.WriteGate`, the writer's) holds
    it from before BEGIN to after COMMIT or ROLLBACK. Waiting for the gate counts
    against the busy timeout: what is left of it is what BEGIN may still wait in SQLite,
    so a writer still gets DB_BUSY after about `busy_timeout`, never twice that. A gate
    that could not be taken in time is skipped: BEGIN then meets SQLite's lock as before.
    """

    __slots__ = ("_conn", "_gate", "_label", "_phase")

    def __init__(self, conn: sqlite3.Connection, label: str = "write") -> None:
        self._conn = conn
        self._label = label
        self._phase: Phase = "begin"
        self._gate: WriteGate | None = None

    def __enter__(self) -> sqlite3.Connection:
        conn = self._conn
        if _transaction_state(conn):
            raise NestedTransactionError(
                f"write tx {self._label!r}: the connection is already inside a transaction"
            )
        gate: WriteGate | None = getattr(conn, "write_gate", None)
        try:
            if gate is None:
                conn.execute("BEGIN IMMEDIATE")
            else:
                self._begin_gated(conn, gate)
        except BaseException as exc:
            try:
                self._cleanup(exc)
            finally:
                self._release_gate()
            raise
        self._phase = "work"
        return conn

    def statement(self, sql: str, params: Sequence[object]) -> sqlite3.Cursor:
        """The whole transaction as one statement in autocommit (`run_write_statement`)."""
        conn = self._conn
        if _transaction_state(conn):
            raise NestedTransactionError(
                f"write tx {self._label!r}: the connection is already inside a transaction"
            )
        self._phase = "statement"
        gate: WriteGate | None = getattr(conn, "write_gate", None)
        try:
            if gate is None:
                cursor = conn.execute(sql, params)
            else:
                cursor = self._gated(conn, gate, sql, params)
        except BaseException as exc:
            self._cleanup(exc)
            raise
        finally:
            self._release_gate()
        checkpoint = getattr(conn, "checkpoint_if_due", None)
        if checkpoint is not None:
            checkpoint()
        return cursor

    def _begin_gated(self, conn: sqlite3.Connection, gate: WriteGate) -> None:
        self._gated(conn, gate, "BEGIN IMMEDIATE", ())

    def _gated(
        self, conn: sqlite3.Connection, gate: WriteGate, sql: str, params: Sequence[object]
    ) -> sqlite3.Cursor:
        """Take the gate, then run `sql`, which takes SQLite's write lock."""
        try:
            left = gate.acquire()
        except OSError:
            left = gate.timeout  # an unusable gate costs the fast wake-up, nothing else
        if gate.held:
            self._gate = gate
        if left >= gate.timeout - _GATE_SLACK:
            return conn.execute(sql, params)
        conn.execute(f"PRAGMA busy_timeout = {int(left * 1000)}")
        try:
            return conn.execute(sql, params)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(gate.timeout * 1000)}")

    def _release_gate(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            try:
                gate.release()
            except OSError:
                pass  # the descriptor is gone, and its lock with it

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            if exc is not None:
                self._cleanup(exc)
                return  # the with-statement re-raises the original exception
            self._phase = "commit"
            try:
                self._conn.execute("COMMIT")
            except BaseException as commit_exc:
                self._cleanup(commit_exc)
                raise
        finally:
            self._release_gate()
        checkpoint = getattr(self._conn, "checkpoint_if_due", None)
        if checkpoint is not None:  # a gated writer: its checkpoint runs after the gate
            checkpoint()

    def _cleanup(self, exc: BaseException) -> None:
        conn = self._conn
        state = _transaction_state(conn)
        rollback_succeeded: bool | None = None
        rollback_error: str | None = None
        if state is not False:
            try:
                conn.execute("ROLLBACK")
                rollback_succeeded = True
            except BaseException as rollback_exc:  # never mask the primary error
                rollback_succeeded = False
                rollback_error = str(rollback_exc) or type(rollback_exc).__name__
        code, code_name = _error_code(exc)
        diag = TxDiagnostics(
            phase=self._phase,
            code=code,
            code_name=code_name,
            label=self._label,
            rollback_succeeded=rollback_succeeded,
            rollback_error=rollback_error,
            transaction_active=_transaction_state(conn),
        )
        try:
            setattr(exc, _DIAG_ATTR, diag)
            exc.add_note(diag.describe())
        except Exception:
            pass


def run_write_transaction(
    conn: sqlite3.Connection, work: Callable[[], T], label: str = "write"
) -> T:
    """Run `work` once inside BEGIN IMMEDIATE ... COMMIT on `conn`."""
    with write_transaction(conn, label):
        return work()


def run_write_statement(
    conn: sqlite3.Connection, sql: str, params: Sequence[object], label: str = "write"
) -> sqlite3.Cursor:
    """Run one statement as its own committed transaction (see the module docstring).

    Only for a statement without RETURNING: the cursor of a finished statement is
    returned for its `rowcount`.
    """
    return write_transaction(conn, label).statement(sql, params)


def run_with_write_retry(
    op: Callable[[], T],
    *,
    idempotent: bool,
    max_attempts: int = 3,
    budget: float = 1.0,
    retry_delay: float = 0.005,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `op` (one whole write transaction), replaying it on retryable BUSY failures."""
    started = monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return op()
        except Exception as exc:
            diag = diagnostics_of(exc)
            if diag is not None:
                diag.attempts = attempt
            retryable = (
                idempotent
                and diag is not None
                and diag.phase in ("work", "commit")
                and diag.code is not None
                and diag.code & 0xFF == SQLITE_BUSY
                and diag.transaction_active is False
            )
            if not retryable or attempt >= max_attempts:
                raise
            remaining = budget - (monotonic() - started)
            if remaining <= 0:
                raise
            sleep(min(retry_delay * attempt, remaining))


def with_write_tx(
    conn: sqlite3.Connection,
    work: Callable[[], T],
    label: str,
    *,
    idempotent: bool = True,
    max_attempts: int = 3,
    budget: float = 1.0,
) -> T:
    """The write path every jobledger write takes, with errors mapped to `StorageError`s.

    `work` must only touch the database (publish effects after this returns). Exceptions
    that are not sqlite3 errors (validation, `JobError`s raised inside `work`) pass
    through unchanged after the rollback.
    """
    try:
        return run_with_write_retry(
            lambda: run_write_transaction(conn, work, label),
            idempotent=idempotent,
            max_attempts=max_attempts,
            budget=budget,
        )
    except sqlite3.Error as exc:
        raise storage_error(exc, label) from exc


def storage_error(exc: sqlite3.Error, label: str) -> StorageError:
    diag = diagnostics_of(exc)
    params: dict[str, object] = {"label": label, "sqlite_error": str(exc)}
    if diag is not None:
        params.update(
            phase=diag.phase,
            code_name=diag.code_name,
            rollback_succeeded=diag.rollback_succeeded,
            transaction_active=diag.transaction_active,
            attempts=diag.attempts,
        )
    if diag is not None and diag.transaction_active is not False:
        return WriteTransactionFailed(
            f"{label}: the transaction could not be closed cleanly ({exc})", params=params
        )
    if is_busy_error(exc):
        return DatabaseBusy(f"{label}: the database is busy; try again later", params=params)
    code, _ = _error_code(exc)
    if code is not None and code & 0xFF == SQLITE_FULL:
        return DatabaseFull(f"{label}: the database or disk is full", params=params)
    return WriteTransactionFailed(f"{label}: {exc}", params=params)
