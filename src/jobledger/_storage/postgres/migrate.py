"""Numbered schema migrations for PostgreSQL, one schema per jobledger installation.

The migrations are `migrations/NNNN_name.sql`, numbered 1, 2, 3 ... with no gaps, written
without schema names: each runs with `SET LOCAL search_path` pointing at the target
schema. The table `<schema>.schema_migrations(version, name, applied_at)` records what
was applied; `SCHEMA_VERSION` is the highest number this library knows.

Invariants:

* A schema already at `SCHEMA_VERSION` is opened with one read and no lock.
* Otherwise everything happens in ONE transaction holding a transaction-scoped advisory
  lock keyed on the schema name (`pg_advisory_xact_lock`), with the version re-read under
  it: two processes opening one fresh schema at the same moment apply each migration
  once, and the loser finds the work done. DDL is transactional in PostgreSQL, so a
  schema is always at a whole version, and the lock is released by COMMIT/ROLLBACK even
  when the process dies.
* A schema from a newer library (`version > SCHEMA_VERSION`) raises `SchemaError` and is
  left untouched.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from jobledger._storage.postgres.queries import check_schema_name, quote_ident
from jobledger.errors import SchemaError

__all__ = ["SCHEMA_VERSION", "Migration", "load_migrations", "migrate", "schema_version"]

_PACKAGE = "jobledger._storage.postgres"
_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    sql: str


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


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's version; 0 when the schema or its version table does not exist."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{quote_ident(schema)}.schema_migrations",)
    ).fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute(
        f"SELECT coalesce(max(version), 0) FROM {quote_ident(schema)}.schema_migrations"
    ).fetchone()
    return 0 if found is None else int(found[0])


def _too_new(schema: str, version: int) -> SchemaError:
    return SchemaError(
        f"schema {schema!r} has version {version}; this jobledger knows up to "
        f"{SCHEMA_VERSION}. Upgrade jobledger to open it.",
        params={"schema": schema, "version": version, "schema_version": SCHEMA_VERSION},
    )


def migrate(conn: psycopg.Connection[Any], schema: str) -> int:
    """Bring `schema` to `SCHEMA_VERSION` (creating it); return the version.

    `conn` must be in autocommit mode and outside a transaction.
    """
    check_schema_name(schema)
    version = schema_version(conn, schema)
    if version > SCHEMA_VERSION:
        raise _too_new(schema, version)
    if version == SCHEMA_VERSION:
        return version
    ident = quote_ident(schema)
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"jobledger:migrate:{schema}",),
        )
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {ident}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {ident}.schema_migrations ("
            "version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        version = schema_version(conn, schema)  # under the lock: the authoritative read
        if version > SCHEMA_VERSION:
            raise _too_new(schema, version)
        conn.execute(f"SET LOCAL search_path TO {ident}")
        for migration in load_migrations():
            if migration.number <= version:
                continue
            # No parameters: psycopg sends the script as one simple query, so functions
            # with `;` in their bodies need no splitting.
            conn.execute(migration.sql.encode("utf-8"))
            conn.execute(
                f"INSERT INTO {ident}.schema_migrations (version, name) VALUES (%s, %s)",
                (migration.number, migration.name),
            )
            version = migration.number
    return version
