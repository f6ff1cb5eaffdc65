"""Choosing the backend from what the user passed to `JobManager(...)`.

* a `postgresql://` or `postgres://` URL -> `PostgresStore` (the `postgres` extra). A
  `schema=NAME` query parameter picks the schema (default `jobledger`); it is removed
  from the URL before psycopg sees it.
* anything else -> `SqliteStore` on that file (":memory:" for tests).

Durability settings map onto each backend: SQLite's `synchronous` pragma as given;
PostgreSQL keeps the server's `synchronous_commit` (durable at COMMIT) unless
`synchronous="OFF"` asks for `synchronous_commit=off`.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobledger._storage.interface import Store
from jobledger._storage.sqlite.connections import Synchronous
from jobledger.errors import JobValidationError

__all__ = ["is_postgres_url", "open_store", "split_schema"]


def is_postgres_url(path: str) -> bool:
    return path.startswith(("postgresql://", "postgres://"))


def split_schema(url: str) -> tuple[str, str]:
    """(url without `schema=`, schema name)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = "jobledger"
    kept: list[tuple[str, str]] = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(kept))), schema


def open_store(path: str, *, synchronous: Synchronous, busy_timeout: float) -> Store:
    if is_postgres_url(path):
        try:
            from jobledger._storage.postgres.store import PostgresStore
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise JobValidationError(
                "PostgreSQL needs the extra: pip install 'jobledger[postgres]'",
                code="JOB_INVALID_OPTION",
            ) from exc
        dsn, schema = split_schema(path)
        return PostgresStore(
            dsn,
            schema=schema,
            busy_timeout=busy_timeout,
            synchronous_commit="off" if synchronous == "OFF" else None,
        )
    from jobledger._storage.sqlite.store import SqliteStore

    return SqliteStore(path, synchronous=synchronous, busy_timeout=busy_timeout)
