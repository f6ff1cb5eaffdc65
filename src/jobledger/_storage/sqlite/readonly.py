"""`SqliteStore` opened for observers: `open_store(path, read_only=True)`.

Invariants:

* Never creates, migrates or writes anything: the file must exist and pass the checks
  a worker's open makes before it writes (`migrate.observed_state`: a jobledger
  database of a version this library knows), else `DB_NOT_FOUND` / `DB_SCHEMA`. A file
  the process may not write (a read-only mount, another user's) is still read.
* Every connection is `mode=ro`, so SQLite itself refuses a write, and the write
  entry points raise `ReadOnlyStoreError` before reaching it.
* A file older than this library is read as it is: a column a later migration added
  (`retry_of`, `workflow_id`, `step`) reads as NULL.
* One reader connection per thread (the HTTP server reads in a thread pool), each in
  autocommit with every statement read to the end: no read snapshot is held between
  calls (one would stop WAL checkpoints from finishing), and no lock is taken.

The reads are `SqliteStore`'s own (`get`, `list`, `count`, the observer operations);
only how connections are opened differs.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from jobledger._storage.attempts import with_final_attempt
from jobledger._storage.interface import JobRow, WorkflowHead
from jobledger._storage.layout import JOB_COLUMNS, older_job_columns
from jobledger._storage.observe import DatabaseMissing, ReadOnlyStoreError
from jobledger._storage.records import AttemptRow
from jobledger._storage.sqlite import observe
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.connections import open_reader
from jobledger._storage.sqlite.group import WriterLock
from jobledger._storage.sqlite.migrate import SCHEMA_VERSION, observed_state
from jobledger._storage.sqlite.store import SqliteStore
from jobledger.errors import SchemaError, StorageError

__all__ = ["ReadOnlySqliteStore"]

T = TypeVar("T")
_GET_WORKFLOW_BEFORE_RETRIES = "SELECT id, name, created_at, NULL FROM workflows WHERE id = ?"
_HAS_ATTEMPTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'job_attempts'"


class _ObserverConnection(sqlite3.Connection):
    """A reader connection; on a file no worker has migrated to the `retry_of` or the
    workflow columns yet (`older_columns`), every statement reads those as NULL."""

    older_columns: str | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if self.older_columns is not None:
            sql = sql.replace(JOB_COLUMNS, self.older_columns)
        return super().execute(sql, parameters)


def _open_observer(path: str, busy_timeout: float) -> sqlite3.Connection:
    conn = open_reader(path, busy_timeout=busy_timeout, read_only=True, factory=_ObserverConnection)
    assert isinstance(conn, _ObserverConnection)
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(jobs)").fetchall()}
    # No columns at all: no jobs table; the first read reports that (`_read`).
    conn.older_columns = older_job_columns(columns)
    return conn


class ReadOnlySqliteStore(SqliteStore):
    # SqliteStore.__init__ is not called on purpose: it migrates (creates the file).
    def __init__(self, path: str, *, busy_timeout: float = 5.0) -> None:
        if path in ("", ":memory:"):
            raise DatabaseMissing("observers need a database file, not an in-memory database")
        if not os.path.exists(path):
            raise DatabaseMissing(f"no jobledger database at {path}", params={"path": path})
        state = observed_state(path, busy_timeout)  # None: busy; the reads will tell
        if state is not None and state[0] == 0:
            raise SchemaError(
                f"{path} is not a jobledger database yet (schema version 0; a worker "
                "creates the schema on its first start)",
                params={"path": path, "user_version": 0, "schema_version": SCHEMA_VERSION},
            )
        self.path = path
        self.kind = "sqlite"
        self.q = q
        self.memory = False
        self.read_only = True
        self.lock = WriterLock()  # never holds a group: nothing is written here
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._generation = 0
        self._closed = False
        self._known_queues: set[str] = set()
        self._read(lambda c: c.execute("SELECT 1").fetchone())  # opens, or says why not

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return self._read(work)

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        try:
            if conn is None or getattr(self._local, "generation", None) != self._generation:
                conn = _open_observer(self.path, self._busy_timeout)
                self._local.conn = conn
                self._local.generation = self._generation
                with self._readers_lock:
                    self._readers.append(conn)
            return work(conn)
        except sqlite3.Error as exc:
            if "no such table" in str(exc):
                raise SchemaError(
                    f"{self.path} is not a jobledger database (or its schema is not "
                    f"created yet): {exc}",
                    params={"path": self.path},
                ) from exc
            raise StorageError(f"read of {self.path} failed: {exc}", code="DB_READ_FAILED") from exc

    def attempts(self, job_id: str) -> list[AttemptRow]:
        # A file no worker has migrated to `job_attempts` yet: only its rows tell attempts.
        has = self._read(lambda c: c.execute(_HAS_ATTEMPTS).fetchone())
        return super().attempts(job_id) if has else with_final_attempt(self.get(job_id), [])

    def get(self, job_id: str) -> JobRow | None:
        row = super().get(job_id)
        if row is None:
            row = self._read(lambda c: observe.get_by_id(c, job_id))
        return row

    def get_workflow(self, workflow_id: str) -> WorkflowHead | None:
        def read(conn: sqlite3.Connection) -> WorkflowHead | None:
            # A file older than workflows (migration 11) has none; one older than
            # migration 12 has no `retry_of`.
            columns = {r[1] for r in conn.execute("PRAGMA table_info(workflows)")}
            if not columns:
                return None
            sql = q.GET_WORKFLOW if "retry_of" in columns else _GET_WORKFLOW_BEFORE_RETRIES
            row = conn.execute(sql, (workflow_id,)).fetchone()
            return None if row is None else WorkflowHead(*row)

        return self._read(read)

    def close(self) -> None:
        with self._readers_lock:
            self._closed = True
            self._generation += 1
            readers, self._readers = self._readers, []
        for conn in readers:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def _refuse(self, what: str) -> NoReturn:
        raise ReadOnlyStoreError(f"{what}: {self.path} was opened read-only")

    def write(self, work: Callable[[sqlite3.Connection], T], label: str) -> T:
        self._refuse(label)

    def write_statement(self, sql: str, params: Sequence[Any], label: str) -> None:
        self._refuse(label)

    def user_transaction(self) -> NoReturn:
        self._refuse("write_tx")

    def data_version(self) -> int:
        return int(self._read(lambda c: c.execute("PRAGMA data_version").fetchone()[0]))

    def report_file_replaced(self) -> bool:
        return False
