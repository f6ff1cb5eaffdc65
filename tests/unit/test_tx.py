"""The write primitive and its retry coordinator (seed 003, reference sections 2.1-2.3).

The failures here are real SQLite behaviour wherever SQLite can produce them on demand:
an auto-rollback by interrupt, BUSY at COMMIT against a reader in rollback-journal mode,
BUSY_SNAPSHOT in WAL, BUSY at BEGIN. Only a failing ROLLBACK is injected, because SQLite
offers no reliable way to make one fail.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobledger._storage.sqlite.connections import open_writer
from jobledger._storage.tx import (
    NestedTransactionError,
    TxDiagnostics,
    diagnostics_of,
    is_busy_error,
    run_with_write_retry,
    run_write_statement,
    run_write_transaction,
    with_write_tx,
)
from jobledger.errors import DatabaseBusy, WriteTransactionFailed

Connect = Callable[..., sqlite3.Connection]


class Boom(Exception):
    pass


class RollbackFails(sqlite3.Connection):
    """A connection whose ROLLBACK always fails (the one injected fault)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if sql.strip().upper() == "ROLLBACK":
            raise sqlite3.OperationalError("injected: rollback failed")
        return super().execute(sql, parameters)


class CountsBegins(sqlite3.Connection):
    begins = 0

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if sql.startswith("BEGIN"):
            self.begins += 1
        return super().execute(sql, parameters)


@pytest.fixture
def connect() -> Iterator[Connect]:
    """Open connections that are all closed after the test."""
    opened: list[sqlite3.Connection] = []

    def _connect(path: str, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("isolation_level", None)
        kwargs.setdefault("timeout", 0.0)
        conn: sqlite3.Connection = sqlite3.connect(path, **kwargs)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


def _make_db(path: Path, *, wal: bool) -> str:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if wal:
            assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
        conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        conn.execute("INSERT INTO counter VALUES (1, 0)")
        conn.execute("CREATE TABLE t (x TEXT UNIQUE)")
    finally:
        conn.close()
    return str(path)


@pytest.fixture
def wal_db(tmp_path: Path) -> str:
    return _make_db(tmp_path / "wal.db", wal=True)


@pytest.fixture
def journal_db(tmp_path: Path) -> str:
    return _make_db(tmp_path / "journal.db", wal=False)


def _no_retry(seconds: float) -> None:
    pytest.fail(f"the coordinator backed off {seconds}s to retry")


def _diag(exc: BaseException) -> TxDiagnostics:
    diag = diagnostics_of(exc)
    assert diag is not None, "the primitive attaches diagnostics to every failure"
    return diag


def _rows(path: str, connect: Connect) -> list[Any]:
    return connect(path).execute("SELECT x FROM t ORDER BY x").fetchall()


def _counter(path: str, connect: Connect) -> int:
    return int(connect(path).execute("SELECT n FROM counter WHERE id = 1").fetchone()[0])


# -- cleanup never masks the primary error ------------------------------------------


def test_sqlite_auto_rollback_keeps_the_primary_error(wal_db: str, connect: Connect) -> None:
    conn = connect(wal_db)
    ticks = 0

    def abort_once() -> int:
        nonlocal ticks
        ticks += 1
        return 1 if ticks == 1 else 0

    def work() -> None:
        conn.execute("INSERT INTO t VALUES ('first')")
        conn.set_progress_handler(abort_once, 1)
        conn.execute("INSERT INTO t VALUES ('second')")

    with pytest.raises(sqlite3.OperationalError) as info:
        run_write_transaction(conn, work, "interrupted-insert")
    conn.set_progress_handler(None, 1)

    assert str(info.value) == "interrupted"
    diag = _diag(info.value)
    assert diag.phase == "work"
    assert diag.code_name == "SQLITE_INTERRUPT"
    assert diag.rollback_succeeded is None  # SQLite had already rolled back: none issued
    assert diag.rollback_error is None
    assert diag.transaction_active is False
    assert "cannot rollback" not in str(info.value)
    assert not any("cannot rollback" in note for note in getattr(info.value, "__notes__", []))
    # SQLite undid the whole transaction, including the statement before the interrupt.
    assert _rows(wal_db, connect) == []
    # The hazard is real: an unguarded ROLLBACK here raises the masking error.
    with pytest.raises(sqlite3.OperationalError, match="cannot rollback - no transaction"):
        conn.execute("ROLLBACK")


def test_a_failing_rollback_never_masks_the_primary_error(wal_db: str) -> None:
    conn = sqlite3.connect(wal_db, isolation_level=None, timeout=0.0, factory=RollbackFails)
    boom = Boom("the real failure")

    def work() -> None:
        conn.execute("INSERT INTO t VALUES ('doomed')")
        raise boom

    try:
        with pytest.raises(Boom) as info:
            run_write_transaction(conn, work, "doomed")
        assert info.value is boom
        diag = _diag(boom)
        assert diag.phase == "work"
        assert diag.rollback_succeeded is False
        assert diag.rollback_error == "injected: rollback failed"
        assert diag.transaction_active is True
        assert conn.in_transaction
    finally:
        sqlite3.Connection.execute(conn, "ROLLBACK")
        conn.close()


def test_a_sqlite_error_with_a_failed_rollback_becomes_write_transaction_failed(
    wal_db: str,
) -> None:
    conn = sqlite3.connect(wal_db, isolation_level=None, timeout=0.0, factory=RollbackFails)
    conn.execute("INSERT INTO t VALUES ('taken')")
    runs = 0

    def work() -> None:
        nonlocal runs
        runs += 1
        conn.execute("INSERT INTO t VALUES ('taken')")  # IntegrityError

    try:
        with pytest.raises(WriteTransactionFailed) as info:
            with_write_tx(conn, work, "duplicate")
        assert info.value.code == "DB_WRITE_TX_FAILED"
        assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
        assert info.value.params["transaction_active"] is True
        assert info.value.params["rollback_succeeded"] is False
        assert info.value.params["attempts"] == 1
        assert runs == 1
    finally:
        sqlite3.Connection.execute(conn, "ROLLBACK")
        conn.close()


def test_an_unknown_transaction_state_becomes_write_transaction_failed(wal_db: str) -> None:
    conn = sqlite3.connect(wal_db, isolation_level=None, timeout=0.0)

    def work() -> None:
        conn.execute("INSERT INTO t VALUES ('lost')")
        conn.close()  # whatever the reason, the state can no longer be read
        conn.execute("INSERT INTO t VALUES ('after close')")

    with pytest.raises(WriteTransactionFailed) as info:
        with_write_tx(conn, work, "closed-under-us")
    cause = info.value.__cause__
    assert isinstance(cause, sqlite3.ProgrammingError)
    diag = _diag(cause)
    assert diag.transaction_active is None
    assert diag.rollback_succeeded is False  # it tried, because "unknown" is not "no"
    assert info.value.params["transaction_active"] is None


# -- BUSY: replay the whole transaction, or not at all -----------------------------------


def test_busy_at_commit_replays_the_whole_transaction(journal_db: str, connect: Connect) -> None:
    writer = open_writer(journal_db, busy_timeout=0.0)
    reader = connect(journal_db)
    # In rollback-journal mode a reader's SHARED lock makes COMMIT (which needs
    # EXCLUSIVE) fail with SQLITE_BUSY while the write transaction stays open.
    reader.execute("BEGIN")
    reader.execute("SELECT n FROM counter").fetchall()

    runs = 0
    failures: list[TxDiagnostics] = []
    sleeps: list[float] = []

    def work() -> None:
        nonlocal runs
        runs += 1
        writer.execute("UPDATE counter SET n = n + 1 WHERE id = 1")

    def op() -> None:
        try:
            run_write_transaction(writer, work, "bump")
        except sqlite3.Error as exc:
            failures.append(_diag(exc))
            raise

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        reader.execute("COMMIT")  # the reader finishes while the coordinator backs off

    try:
        run_with_write_retry(op, idempotent=True, sleep=sleep)
    finally:
        writer.close()

    assert runs == 2, "the work ran again from BEGIN, not just the failed COMMIT"
    assert len(sleeps) == 1
    [first] = failures
    assert first.phase == "commit"
    assert first.code_name == "SQLITE_BUSY"
    assert first.rollback_succeeded is True
    assert first.transaction_active is False
    assert _counter(journal_db, connect) == 1, "the replay did not duplicate the effect"


def test_a_non_idempotent_transaction_is_never_retried(journal_db: str, connect: Connect) -> None:
    writer = open_writer(journal_db, busy_timeout=0.0)
    reader = connect(journal_db)
    reader.execute("BEGIN")
    reader.execute("SELECT n FROM counter").fetchall()
    runs = 0
    sleeps: list[float] = []

    def work() -> None:
        nonlocal runs
        runs += 1
        writer.execute("UPDATE counter SET n = n + 1 WHERE id = 1")

    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            run_with_write_retry(
                lambda: run_write_transaction(writer, work, "bump"),
                idempotent=False,
                sleep=sleeps.append,
            )
    finally:
        writer.close()
    reader.execute("COMMIT")

    assert is_busy_error(info.value)
    assert _diag(info.value).attempts == 1
    assert runs == 1
    assert sleeps == []
    assert _counter(journal_db, connect) == 0


def test_a_busy_error_that_leaves_the_transaction_open_is_not_retried(wal_db: str) -> None:
    conn = sqlite3.connect(wal_db, isolation_level=None, timeout=0.0, factory=RollbackFails)
    runs = 0

    def work() -> None:
        nonlocal runs
        runs += 1
        conn.execute("INSERT INTO t VALUES ('stuck')")
        raise sqlite3.OperationalError("database is locked")

    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked") as info:
            run_with_write_retry(
                lambda: run_write_transaction(conn, work, "stuck"),
                idempotent=True,
                sleep=_no_retry,
            )
        diag = _diag(info.value)
        assert diag.transaction_active is True
        assert diag.attempts == 1
        assert runs == 1
    finally:
        sqlite3.Connection.execute(conn, "ROLLBACK")
        conn.close()


def test_busy_snapshot_is_recognised_and_waiting_does_not_cure_it(
    wal_db: str, connect: Connect
) -> None:
    stale = connect(wal_db, timeout=2.0)
    other = connect(wal_db, timeout=2.0)
    stale.execute("BEGIN")  # deferred: the SELECT pins a read snapshot
    stale.execute("SELECT count(*) FROM t").fetchall()
    other.execute("INSERT INTO t VALUES ('newer')")

    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as info:
        stale.execute("INSERT INTO t VALUES ('stale')")
    elapsed = time.monotonic() - started

    assert info.value.sqlite_errorcode == sqlite3.SQLITE_BUSY_SNAPSHOT == 517
    assert info.value.sqlite_errorname == "SQLITE_BUSY_SNAPSHOT"
    assert is_busy_error(info.value)
    assert elapsed < 1.0, "BUSY_SNAPSHOT returns at once; the 2 s busy timeout never ran"
    assert stale.in_transaction, "the transaction stays open and must be rolled back"
    # Replaying the statement is useless; only a whole new transaction can succeed.
    with pytest.raises(sqlite3.OperationalError) as again:
        stale.execute("INSERT INTO t VALUES ('stale')")
    assert again.value.sqlite_errorcode == 517
    stale.execute("ROLLBACK")
    stale.execute("BEGIN")
    stale.execute("SELECT count(*) FROM t").fetchall()
    stale.execute("INSERT INTO t VALUES ('stale')")
    stale.execute("COMMIT")
    assert _rows(wal_db, connect) == [("newer",), ("stale",)]


def test_busy_snapshot_diagnostics(wal_db: str, tmp_path: Path, connect: Connect) -> None:
    meta = connect(_make_db(tmp_path / "meta.db", wal=True))
    stale = connect(wal_db, timeout=2.0)
    other = connect(wal_db)

    def work() -> None:
        # A deferred read-then-write on another database, raising a real 517 here.
        stale.execute("BEGIN")
        try:
            stale.execute("SELECT count(*) FROM t").fetchall()
            other.execute("INSERT INTO t VALUES ('newer')")
            stale.execute("INSERT INTO t VALUES ('stale')")
        finally:
            if stale.in_transaction:
                stale.execute("ROLLBACK")

    with pytest.raises(sqlite3.OperationalError) as info:
        run_write_transaction(meta, work, "snapshot")
    diag = _diag(info.value)
    assert (diag.code, diag.code_name) == (517, "SQLITE_BUSY_SNAPSHOT")
    assert diag.phase == "work"
    assert diag.rollback_succeeded is True
    assert diag.transaction_active is False


def test_busy_at_begin_becomes_database_busy_and_is_not_retried(
    wal_db: str, connect: Connect
) -> None:
    holder = connect(wal_db)
    holder.execute("BEGIN IMMEDIATE")
    conn = sqlite3.connect(wal_db, isolation_level=None, timeout=0.0, factory=CountsBegins)
    runs = 0

    def work() -> None:
        nonlocal runs
        runs += 1

    try:
        with pytest.raises(DatabaseBusy) as info:
            with_write_tx(conn, work, "enqueue")
    finally:
        conn.close()
    holder.execute("ROLLBACK")

    assert info.value.code == "DB_BUSY"
    assert info.value.retryable is True
    assert info.value.params["phase"] == "begin"
    assert info.value.params["transaction_active"] is False
    assert info.value.params["attempts"] == 1
    assert conn.begins == 1
    assert runs == 0


def test_nesting_is_refused_and_the_outer_transaction_is_left_alone(
    wal_db: str, connect: Connect
) -> None:
    conn = connect(wal_db)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES ('outer')")
    runs = 0

    def work() -> None:
        nonlocal runs
        runs += 1

    with pytest.raises(NestedTransactionError):
        run_write_transaction(conn, work, "inner")
    assert runs == 0
    assert conn.in_transaction
    assert conn.execute("SELECT x FROM t").fetchall() == [("outer",)]
    conn.execute("COMMIT")
    assert _rows(wal_db, connect) == [("outer",)]


# -- the coordinator's limits ----------------------------------------------------------


def _always_busy(conn: sqlite3.Connection, calls: list[int]) -> Callable[[], None]:
    def op() -> None:
        def work() -> None:
            conn.execute("UPDATE counter SET n = n + 1")
            raise sqlite3.OperationalError("database is locked")

        calls.append(1)
        if len(calls) > 10:
            pytest.fail("the coordinator does not stop retrying")
        run_write_transaction(conn, work, "busy")

    return op


def test_the_retry_stops_after_three_attempts(wal_db: str, connect: Connect) -> None:
    conn = connect(wal_db)
    calls: list[int] = []
    sleeps: list[float] = []
    with pytest.raises(sqlite3.OperationalError) as info:
        run_with_write_retry(
            _always_busy(conn, calls),
            idempotent=True,
            retry_delay=0.025,
            monotonic=lambda: 0.0,
            sleep=sleeps.append,
        )
    assert len(calls) == 3
    assert _diag(info.value).attempts == 3
    assert sleeps == pytest.approx([0.025, 0.050])  # linear backoff
    assert _counter(wal_db, connect) == 0


def test_the_retry_stops_when_the_budget_is_spent(wal_db: str, connect: Connect) -> None:
    conn = connect(wal_db)
    now = 0.0
    calls: list[int] = []
    sleeps: list[float] = []
    busy = _always_busy(conn, calls)

    def slow_busy() -> None:
        nonlocal now
        now += 0.99  # each attempt costs almost the whole 1 s budget
        busy()

    def sleep(seconds: float) -> None:
        nonlocal now
        sleeps.append(seconds)
        now += seconds

    with pytest.raises(sqlite3.OperationalError) as info:
        run_with_write_retry(
            slow_busy, idempotent=True, retry_delay=0.025, monotonic=lambda: now, sleep=sleep
        )
    assert len(calls) == 2
    assert _diag(info.value).attempts == 2
    assert sleeps == pytest.approx([0.01])  # clipped to what was left of the budget


def test_errors_outside_the_busy_family_are_not_retried(wal_db: str, connect: Connect) -> None:
    conn = connect(wal_db)
    conn.execute("INSERT INTO t VALUES ('taken')")
    runs = 0

    def work() -> None:
        nonlocal runs
        runs += 1
        conn.execute("INSERT INTO t VALUES ('taken')")

    with pytest.raises(sqlite3.IntegrityError):
        run_with_write_retry(
            lambda: run_write_transaction(conn, work, "dup"), idempotent=True, sleep=_no_retry
        )
    assert runs == 1


@pytest.mark.parametrize(
    ("error", "busy"),
    [
        (sqlite3.OperationalError("database is locked"), True),  # no code: message fallback
        (sqlite3.OperationalError("database table is locked"), False),  # SQLITE_LOCKED
        (sqlite3.IntegrityError("UNIQUE constraint failed: t.x"), False),
        (ValueError("database is locked"), False),
    ],
)
def test_is_busy_error_without_sqlite_codes(error: Exception, busy: bool) -> None:
    assert is_busy_error(error) is busy


# -- one statement as its own transaction ------------------------------------------------


def test_a_write_statement_is_committed_when_it_returns(wal_db: str, connect: Connect) -> None:
    conn = connect(wal_db)
    cursor = run_write_statement(conn, "INSERT INTO t VALUES (?)", ("one",), "enqueue")
    assert cursor.rowcount == 1
    assert not conn.in_transaction
    assert _rows(wal_db, connect) == [("one",)]  # another connection sees it


def test_a_failed_write_statement_leaves_nothing_and_carries_diagnostics(
    wal_db: str, connect: Connect
) -> None:
    conn = connect(wal_db)
    run_write_statement(conn, "INSERT INTO t VALUES ('taken')", ())
    with pytest.raises(sqlite3.IntegrityError) as info:
        # Two rows, the second a duplicate: SQLite undoes the first as well.
        run_write_statement(conn, "INSERT INTO t VALUES ('new'), ('taken')", (), "dup")
    diag = _diag(info.value)
    assert diag.phase == "statement"
    assert diag.label == "dup"
    assert diag.transaction_active is False
    assert diag.rollback_succeeded is None  # SQLite rolled back by itself: none issued
    assert _rows(wal_db, connect) == [("taken",)]


def test_busy_on_a_write_statement_is_never_replayed(wal_db: str, connect: Connect) -> None:
    holder = connect(wal_db)
    holder.execute("BEGIN IMMEDIATE")
    store_conn = sqlite3.connect(wal_db, isolation_level=None, timeout=0.05)
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            run_write_statement(store_conn, "UPDATE counter SET n = n + 1", (), "bump")
    finally:
        store_conn.close()
    holder.execute("ROLLBACK")
    diag = _diag(info.value)
    assert diag.code_name == "SQLITE_BUSY"
    assert diag.phase == "statement"
    assert diag.transaction_active is False
    assert _counter(wal_db, connect) == 0
    # Never replayed: the wait for the lock was the statement's whole busy timeout.
    calls: list[int] = []

    def op() -> None:
        calls.append(1)
        raise info.value

    with pytest.raises(sqlite3.OperationalError):
        run_with_write_retry(op, idempotent=True, sleep=_no_retry)
    assert calls == [1]


def test_a_write_statement_inside_a_transaction_is_refused(wal_db: str, connect: Connect) -> None:
    conn = connect(wal_db)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES ('outer')")
    with pytest.raises(NestedTransactionError):
        run_write_statement(conn, "INSERT INTO t VALUES ('inner')", ())
    assert conn.in_transaction
    conn.execute("ROLLBACK")
    assert _rows(wal_db, connect) == []
