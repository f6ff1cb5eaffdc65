"""Numbered schema migrations, applied under the writer lease.

The migrations are the files `migrations/NNNN_name.sql`, numbered 1, 2, 3 ... with no
gaps. `PRAGMA user_version` records the last one applied; `SCHEMA_VERSION` is the
highest number this library knows. `schema.sql` beside this module is the canonical
result of applying all of them (`render_fresh_schema()` regenerates it).

Invariants:

* A database that already has `SCHEMA_VERSION` and WAL is opened without touching the
  lease (the fast path is a read on a read-only connection).
* Everything else happens under the writer lease, with the version re-read under it: two
  processes opening one fresh file at the same moment apply each migration once, and
  the loser finds the work done. WAL is switched on here, once, because switching needs
  exclusive access to the file.
* Each migration is one write transaction (`BEGIN IMMEDIATE`) containing its statements
  and `PRAGMA user_version = N`, so a file is always at a whole version. The version is
  checked again inside the transaction, which keeps lease-less callers
  (`migrate_connection`) safe as well.
* Statements are split with `sqlite3.complete_statement` and run one by one, never with
  `executescript`, which would COMMIT the open transaction first.
* A file from a newer library (`user_version > SCHEMA_VERSION`) raises `SchemaError` and
  is left untouched.
* So does every file that is not a jobledger database, checked on a read-only connection
  before anything writes (`_read_state`): a directory, garbage or a file cut short
  (SQLite cannot read it, or a table's first page is past its end), another program's
  database (version 0 with objects in it, or a version whose tables are missing), and a
  file this process cannot open for writing. Without this, the switch to WAL would
  change another program's file before its first migration failed.
* A migration whose first line is `-- jobledger: foreign_keys=off` (a table rebuild) runs
  with foreign keys off, since the pragma cannot change inside a transaction, and must
  not add a `foreign_key_check` violation before it commits; the connection's setting
  is restored after it.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources

from jobledger._storage.lease import (
    LeaseMode,
    acquire_writer_lease,
    writer_lease,
    writer_lock_path_for,
)
from jobledger._storage.sqlite import connections
from jobledger._storage.tx import is_busy_error, with_write_tx
from jobledger.errors import DatabaseBusy, SchemaError, StorageError

__all__ = [
    "SCHEMA_VERSION",
    "Migration",
    "dump_schema",
    "load_migrations",
    "migrate",
    "migrate_connection",
    "observed_state",
    "render_fresh_schema",
    "schema_version",
    "split_statements",
]

_PACKAGE = "jobledger._storage.sqlite"
_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FOREIGN_KEYS_OFF = "-- jobledger: foreign_keys=off"


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    sql: str

    @property
    def foreign_keys_off(self) -> bool:
        return self.sql.startswith(_FOREIGN_KEYS_OFF)


@functools.cache
def load_migrations() -> tuple[Migration, ...]:
    """Every migration shipped with the package, in order."""
    found: list[Migration] = []
    for entry in resources.files(_PACKAGE).joinpath("migrations").iterdir():
        match = _NAME_RE.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.number)
    numbers = [m.number for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..N without gaps, found {numbers}")
    return tuple(found)


SCHEMA_VERSION: int = load_migrations()[-1].number


def split_statements(sql: str) -> list[str]:
    """Split a script into single statements (comments and string literals may hold `;`)."""
    statements: list[str] = []
    buffer = ""
    pieces = sql.split(";")
    for piece in pieces[:-1]:
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if not _only_comments(buffer[:-1]):
                statements.append(buffer.strip())
            buffer = ""
    # After the last `;` only comments and whitespace may remain; anything else is a
    # statement missing its terminator (or a `;` swallowed by an open string/comment).
    rest = buffer + pieces[-1]
    if not _only_comments(rest):
        raise ValueError(f"incomplete SQL statement at the end of the script: {rest.strip()!r}")
    return statements


def _only_comments(sql: str) -> bool:
    for line in sql.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return False
    return True


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _too_new(version: int) -> SchemaError:
    return SchemaError(
        f"the database has schema version {version}; this jobledger knows up to "
        f"{SCHEMA_VERSION}. Upgrade jobledger to open it.",
        params={"user_version": version, "schema_version": SCHEMA_VERSION},
    )


def migrate_connection(conn: sqlite3.Connection) -> int:
    """Bring the database behind `conn` to `SCHEMA_VERSION`, without the lease.

    For ":memory:" databases and callers that already hold the lease. `conn` must have
    been opened with `isolation_level=None` and must not be inside a transaction.
    """
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise _too_new(current)
    for migration in load_migrations():
        if migration.number <= current:
            continue
        with _foreign_keys_off(conn, migration.foreign_keys_off):
            with_write_tx(
                conn,
                functools.partial(_apply, conn, migration),
                f"migrate:{migration.number:04d}_{migration.name}",
            )
    return schema_version(conn)


@contextmanager
def _foreign_keys_off(conn: sqlite3.Connection, off: bool) -> Iterator[None]:
    was_on = bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    if not (off and was_on):
        yield
        return
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def _foreign_key_violations(conn: sqlite3.Connection) -> int:
    return len(conn.execute("PRAGMA foreign_key_check").fetchall())


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    # Re-read inside the transaction: it is the only read no other writer can race.
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise _too_new(version)
    if version >= migration.number:
        return
    # Rows that broke a foreign key before (written with enforcement off, by another
    # program) are not this migration's to fix; only new violations stop it.
    before = _foreign_key_violations(conn) if migration.foreign_keys_off else 0
    for statement in split_statements(migration.sql):
        conn.execute(statement)
    if migration.foreign_keys_off:
        after = _foreign_key_violations(conn)
        if after > before:
            raise SchemaError(
                f"migration {migration.number:04d}_{migration.name} would break "
                f"{after - before} foreign key reference(s); nothing was changed",
                params={"migration": migration.number, "violations": after - before},
            )
    conn.execute(f"PRAGMA user_version = {migration.number:d}")


def _not_ours(db_path: str, why: str, **params: object) -> SchemaError:
    return SchemaError(
        f"{db_path} is not a jobledger database this process can use: {why}; "
        "nothing in it was changed",
        params={"path": db_path, "reason": why, **params},
    )


@functools.cache
def _tables_at(version: int) -> frozenset[str]:
    """The tables a jobledger database at `version` has (from the migrations themselves)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for migration in load_migrations()[:version]:
            for statement in split_statements(migration.sql):
                conn.execute(statement)
        return _tables(conn)
    finally:
        conn.close()


def _tables(conn: sqlite3.Connection) -> frozenset[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return frozenset(str(r[0]) for r in rows)


def _read_state(db_path: str, busy_timeout: float) -> tuple[int, str] | None:
    """(user_version, journal_mode) from a read-only look, or None when that is not known
    (no file yet, or a busy one). Raises `SchemaError` for a file that is not ours."""
    state = observed_state(db_path, busy_timeout)
    if state is None:
        return None
    try:
        os.close(os.open(db_path, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        # A worker writes; SQLite would open the file read-only without a word and fail
        # at the first write. Observers (`ReadModel`, the CLI, HTTP) read such files.
        raise _not_ours(db_path, f"it cannot be opened for writing ({exc.strerror})") from exc
    return state


def observed_state(db_path: str, busy_timeout: float) -> tuple[int, str] | None:
    """`_read_state` for a reader: every check but whether the file can be written.
    Observers use it before they open a file read-only (they never migrate)."""
    if not os.path.lexists(db_path):
        return None
    if os.path.isdir(db_path):
        raise _not_ours(db_path, "it is a directory")
    try:
        conn = connections.open_reader(db_path, busy_timeout=busy_timeout, read_only=True)
        try:
            # One read transaction, so every answer is of one snapshot: read one by one,
            # a migration committed by another process in between (a fresh file opened by
            # several at once) looked like version 0 with tables, "another program's".
            conn.execute("BEGIN")
            version = schema_version(conn)
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            objects = int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
            tables = _tables(conn)
            # A table whose root page lies past the end was cut off (a truncated copy).
            last_root = conn.execute("SELECT max(rootpage) FROM sqlite_master").fetchone()[0]
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if is_busy_error(exc):
            return None  # someone is switching the file over; the slow path will wait
        raise _not_ours(db_path, f"SQLite cannot read it ({exc})") from exc
    if last_root is not None and int(last_root) > pages:
        raise _not_ours(db_path, "it is cut short (a table starts past its end)")
    if version > SCHEMA_VERSION:
        raise _too_new(version)
    if version == 0 and objects:
        raise _not_ours(db_path, "it holds another program's tables", tables=sorted(tables))
    missing = _tables_at(version) - tables if version else frozenset()
    if missing:
        raise _not_ours(
            db_path, f"it lacks jobledger's tables {sorted(missing)}", user_version=version
        )
    return version, mode


def migrate(
    db_path: str,
    *,
    lease_wait: float = 10.0,
    busy_timeout: float = 5.0,
    lease_mode: LeaseMode = "acquire",
) -> int:
    """Create or upgrade the database file at `db_path`; return its schema version.

    Raises `DatabaseBusy` when the writer lease is not had within `lease_wait` seconds
    and `SchemaError` when the file is newer than this library. `lease_mode=
    "caller-held"` is for a caller that already holds the lease.
    """
    if db_path == ":memory:" or db_path.startswith("file::memory:"):
        raise ValueError("migrate() needs a file; use migrate_connection() for :memory:")
    try:
        return _migrate(db_path, lease_wait, busy_timeout, lease_mode)
    except (sqlite3.Error, OSError) as exc:
        if isinstance(exc, sqlite3.Error) and is_busy_error(exc):
            raise DatabaseBusy(
                f"migrate: {db_path} stayed busy", params={"sqlite_error": str(exc)}
            ) from exc
        # E.g. a directory that does not exist, or one where the lease file cannot be made.
        raise _not_ours(db_path, f"it cannot be opened ({exc})") from exc


def _migrate(db_path: str, lease_wait: float, busy_timeout: float, lease_mode: LeaseMode) -> int:
    state = _read_state(db_path, busy_timeout)
    if state is not None:
        version, mode = state
        if version > SCHEMA_VERSION:
            raise _too_new(version)
        if version == SCHEMA_VERSION and mode == "wal":
            return version

    lock_path = writer_lock_path_for(db_path)
    if lease_mode == "acquire":
        # Polled here rather than in writer_lease() so the wait can be bounded and named.
        lease = acquire_writer_lease(lock_path, wait=lease_wait)
        if lease is None:
            raise DatabaseBusy(
                f"migrate: the writer lease on {db_path} was not had within {lease_wait}s",
                params={"lock_path": lock_path, "lease_wait": lease_wait},
            )
        with lease:
            return _migrate_under_lease(db_path, busy_timeout)
    with writer_lease(lock_path, mode=lease_mode):
        return _migrate_under_lease(db_path, busy_timeout)


def _migrate_under_lease(db_path: str, busy_timeout: float) -> int:
    conn = connections.open_writer(db_path, busy_timeout=busy_timeout)
    try:
        version = schema_version(conn)
        if version > SCHEMA_VERSION:
            raise _too_new(version)
        _ensure_wal(conn, db_path)
        return migrate_connection(conn)
    except sqlite3.Error as exc:
        if is_busy_error(exc):
            raise DatabaseBusy(
                f"migrate: {db_path} stayed busy", params={"sqlite_error": str(exc)}
            ) from exc
        raise
    finally:
        conn.close()


def _ensure_wal(conn: sqlite3.Connection, db_path: str) -> None:
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if mode == "wal":
        return
    mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
    if mode != "wal":
        raise StorageError(
            f"could not switch {db_path} to WAL (journal_mode is {mode!r})",
            params={"journal_mode": mode},
        )


def dump_schema(conn: sqlite3.Connection) -> str:
    """The canonical text of a schema: version, then every object's SQL, sorted."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
    ).fetchall()
    parts = [
        "-- GENERATED: the jobledger schema with every migration applied. Do not edit.",
        "-- After adding a migration, regenerate it from the repository root with",
        "--   python -m jobledger._storage.sqlite.migrate \\",
        "--       > src/jobledger/_storage/sqlite/schema.sql",
        f"-- user_version = {schema_version(conn)}",
        "",
    ]
    parts.extend(f"{sql};\n" for _, _, sql in rows)
    return "\n".join(parts)


def render_fresh_schema() -> str:
    """`dump_schema` of a fresh in-memory database after all migrations."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate_connection(conn)
        return dump_schema(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    print(render_fresh_schema(), end="")
