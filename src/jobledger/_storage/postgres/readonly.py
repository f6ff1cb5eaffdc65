"""`PostgresStore` opened for observers: `open_store(url, read_only=True)`.

Invariants:

* Never creates or migrates anything: the schema must exist at a version this library
  knows, else `DB_SCHEMA` (a schema at an older version is read as it is).
* Every connection runs with `default_transaction_read_only = on`, so the server
  itself refuses a write, and the write entry points raise `ReadOnlyStoreError` before
  reaching it. No LISTEN connection and no writer connection are opened.
* Reads come from a small lazy pool in autocommit (each statement its own snapshot), so
  the store is safe to share between the HTTP server's threads.

The reads are `PostgresStore`'s own (`get`, `list`, `count`, the observer operations);
only how connections are opened differs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NoReturn, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from jobledger._storage.attempts import with_final_attempt
from jobledger._storage.layout import older_job_columns
from jobledger._storage.observe import ReadOnlyStoreError
from jobledger._storage.open import redact
from jobledger._storage.postgres.migrate import SCHEMA_VERSION, schema_version
from jobledger._storage.postgres.queries import Queries, check_schema_name
from jobledger._storage.postgres.store import (
    _NO_JIT,
    Conn,
    PostgresStore,
    _storage_error,
    rate_sql,
    reader_lock_timeout,
)
from jobledger._storage.records import AttemptRow
from jobledger.errors import SchemaError

__all__ = ["ReadOnlyPostgresStore"]

T = TypeVar("T")
_READ_ONLY = "SELECT set_config('default_transaction_read_only', 'on', false), " + _NO_JIT
_HAS_ATTEMPTS = (
    "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
    "AND table_name = 'job_attempts'"
)
_JOB_COLUMNS = (
    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
    "AND table_name = 'jobs'"
)


def _read_only_session(conn: Conn) -> None:
    conn.execute(_READ_ONLY + ", set_config('lock_timeout', %s, false)", (reader_lock_timeout(),))


class ReadOnlyPostgresStore(PostgresStore):
    # PostgresStore.__init__ is not called on purpose: it migrates (creates the schema).
    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "jobledger",
        busy_timeout: float = 5.0,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self.q = Queries(self.schema)
        # `rate_room` (jobs.explain's RATE_LIMITED) reads the rate log through it.
        self._rate_sql = rate_sql(self.schema)
        self.kind = "postgres"
        self.path = dsn
        self.memory = False
        self.read_only = True
        self._busy_timeout = busy_timeout
        self._connect_timeout = connect_timeout
        self._pool_size = max(1, pool_size)
        self._listen_wanted = False
        self.lock = threading.RLock()
        self._closed = False
        self._known_queues: set[str] = set()
        self._pool: ConnectionPool[Conn] | None = None
        self._pool_lock = threading.Lock()
        self._version = 0
        conn = self._connect("open")
        try:
            _read_only_session(conn)
            version = schema_version(conn, self.schema)
            columns = {str(r[0]) for r in conn.execute(_JOB_COLUMNS, (self.schema,))}
            self._has_attempts = conn.execute(_HAS_ATTEMPTS, (self.schema,)).fetchone() is not None
        except psycopg.Error as exc:
            raise _storage_error(exc, "open", None) from exc
        finally:
            conn.close()
        if version == 0:
            raise SchemaError(
                f"no jobledger schema {self.schema!r} at {redact(dsn)} (a worker creates "
                "it on its first start)",
                params={"schema": self.schema, "version": 0, "schema_version": SCHEMA_VERSION},
            )
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"schema {self.schema!r} has version {version}; this jobledger knows up to "
                f"{SCHEMA_VERSION}. Upgrade jobledger to open it.",
                params={
                    "schema": self.schema,
                    "version": version,
                    "schema_version": SCHEMA_VERSION,
                },
            )
        # A schema older than this library is read as it is (its later columns read NULL).
        self.q = Queries(self.schema, older_columns=older_job_columns(columns))

    def attempts(self, job_id: str) -> list[AttemptRow]:
        # A schema from before `job_attempts`: only its rows tell attempts (checked at open: a
        # worker that migrates it meanwhile shows them to the next observer).
        if self._has_attempts:
            return super().attempts(job_id)
        return with_final_attempt(self.get(job_id), [])

    _reader_name = "jobledger-observer"

    def _configure_reader(self, conn: Conn) -> None:
        _read_only_session(conn)

    def close(self) -> None:
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _refuse(self, what: str) -> NoReturn:
        raise ReadOnlyStoreError(f"{what}: the schema {self.schema!r} was opened read-only")

    def write(self, work: Callable[[Conn], T], label: str) -> T:
        self._refuse(label)

    def _with_retry(self, once: Callable[[Conn], T], label: str) -> T:
        self._refuse(label)

    def user_transaction(self) -> NoReturn:
        self._refuse("write_tx")

    def data_version(self) -> int:
        self._version += 1  # no listener: every look may find a change
        return self._version
