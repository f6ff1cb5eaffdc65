"""Choosing the backend from what the user passed to `JobManager(...)`.

* a `postgresql://` or `postgres://` URL -> `PostgresStore` (the `postgres` extra). A
  `schema=NAME` query parameter picks the schema (default `jobledger`); it is removed
  from the URL before psycopg sees it.
* anything else -> `SqliteStore` on that file (":memory:" for tests).

Durability settings map onto each backend: SQLite's `synchronous` pragma as given;
PostgreSQL keeps the server's `synchronous_commit` (durable at COMMIT) unless
`synchronous="OFF"` asks for `synchronous_commit=off`.

`redact` is the one place that hides passwords in what a human reads (docs/reference/cli.md): every
URL shown by the CLI, the server and their logs goes through it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobledger._storage.interface import Store
from jobledger._storage.sqlite.connections import Synchronous as Synchronous  # re-exported
from jobledger.errors import JobValidationError

__all__ = ["is_postgres_url", "open_store", "redact", "split_schema"]

_MASK = "***"
# scheme://authority: the authority ends at the first "/" (libpq's rule, and a password
# holding "?" or "#" unencoded still counts as the password).
_URL_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<auth>[^/\s]*)")
# `password=` as a URL query parameter or a libpq `key=value` conninfo entry.
_PASSWORD_PARAM = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#'\"]+)")


def is_postgres_url(path: str) -> bool:
    return path.startswith(("postgresql://", "postgres://"))


def _mask_authority(match: re.Match[str]) -> str:
    auth = match["auth"]
    at = auth.rfind("@")
    colon = auth.find(":", 0, at)
    if at < 0 or colon < 0:
        return match[0]
    # Everything between the user's first ":" and the last "@": Python's urlsplit takes
    # the last "@", libpq the first, and a mask must cover what either would send.
    return f"{match['scheme']}{auth[:colon]}:{_MASK}{auth[at:]}"


def redact(text: str) -> str:
    """`text` with every password in a URL (`user:PASSWORD@host`, `?password=`) or a
    conninfo (`password=...`) replaced by `***`; anything else is left as it is."""
    if "://" not in text and "password" not in text.lower():
        return text
    text = _URL_AUTHORITY.sub(_mask_authority, text)
    return _PASSWORD_PARAM.sub(lambda m: f"{m[1]}{_MASK}", text)


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


def open_store(
    path: str,
    *,
    synchronous: Synchronous = "NORMAL",
    busy_timeout: float = 1.0,
    read_only: bool = False,
) -> Store:
    """The store for `path` (a file, or a `postgresql://` URL).

    `read_only=True` is the observers' door (CLI, HTTP, dashboard, metrics): it never
    creates or migrates anything, raises `DB_NOT_FOUND` for a missing file and
    `DB_SCHEMA` for a file or schema that is not a jobledger database of a known
    version, and its connections refuse writes (SQLite `mode=ro`, PostgreSQL
    `default_transaction_read_only`). See `sqlite/readonly.py`, `postgres/readonly.py`.
    """
    if is_postgres_url(path):
        try:
            from jobledger._storage.postgres.readonly import ReadOnlyPostgresStore
            from jobledger._storage.postgres.store import PostgresStore
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise JobValidationError(
                "PostgreSQL needs the extra: pip install 'jobledger[postgres]'",
                code="JOB_INVALID_OPTION",
            ) from exc
        dsn, schema = split_schema(path)
        if read_only:
            return ReadOnlyPostgresStore(dsn, schema=schema, busy_timeout=max(busy_timeout, 5.0))
        return PostgresStore(
            dsn,
            schema=schema,
            busy_timeout=busy_timeout,
            synchronous_commit="off" if synchronous == "OFF" else None,
        )
    if read_only:
        from jobledger._storage.sqlite.readonly import ReadOnlySqliteStore

        return ReadOnlySqliteStore(path, busy_timeout=max(busy_timeout, 5.0))
    from jobledger._storage.sqlite.store import SqliteStore

    return SqliteStore(path, synchronous=synchronous, busy_timeout=busy_timeout)
