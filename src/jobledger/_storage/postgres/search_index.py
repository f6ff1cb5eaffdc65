"""Search indexes on PostgreSQL (`search_indexes`, migration 13), as SQLite's
(`_storage/sqlite/search_index.py`), built without stopping writers.

Invariants: the index is built `CONCURRENTLY` on a connection of its own, so enqueues,
claims and finalizes go on while it reads every row, and the store's writer is not held
meanwhile; the registry row is written only after the build succeeded, so a registered
field always has a valid index (an index left INVALID by a build that failed is dropped
and built again by the next call); the index's expression is `field_expr(field)`, the
text the search spells (the planner matches an index expression by its parsed form,
constants included).
"""

from __future__ import annotations

from typing import Any

import psycopg

from jobledger._core.search import SearchField
from jobledger._storage.observe import SearchIndexRecord
from jobledger._storage.search_names import checked_index_name, index_name

__all__ = [
    "INSERT",
    "REGISTERED",
    "build_index",
    "drop_index",
    "field_expr",
    "has_index",
    "search_indexes",
]

Conn = psycopg.Connection[Any]

REGISTERED = "SELECT 1 FROM {s}.search_indexes WHERE field = %s"
INSERT = (
    "INSERT INTO {s}.search_indexes (field, index_name, created_at) VALUES (%s, %s, %s) "
    "ON CONFLICT (field) DO NOTHING RETURNING 1"
)
DELETE = "DELETE FROM {s}.search_indexes WHERE field = %s RETURNING index_name"


def field_expr(field: SearchField, s: str) -> str:
    """The JSON value at `field` as text (`json_field`, NULL for a row that is not JSON),
    its path a literal: an index on it serves only a query that spells the same constant.
    The segments are checked names (`_core/search.py`): no quote or `%` can be in them."""
    path = "{" + ",".join(f'"{p}"' for p in field.path) + "}"
    return f"{s}.json_field({field.kind}, '{path}'::text[])"


def build_index(conn: Conn, s: str, field: SearchField) -> None:
    """Build the field's index on `conn` (autocommit: CONCURRENTLY needs it)."""
    name = index_name(field)
    if _validity(conn, s, field) is False:
        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {s}.{name}")
    expr = field_expr(field, s)
    # Ends with the listing's order, so a page of matches is one backward index scan;
    # partial, so rows without the field (other job types) stay out of it.
    conn.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {s}.jobs "
        f"({expr}, created_at, id) WHERE {expr} IS NOT NULL"
    )


def _validity(conn: Conn, s: str, field: SearchField) -> bool | None:
    """The field's index: None when there is none, else whether it is valid (a build
    that failed leaves an INVALID one, which the planner never uses)."""
    row = conn.execute(
        "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
        (f"{s}.{index_name(field)}",),
    ).fetchone()
    return None if row is None else bool(row[0])


def has_index(conn: Conn, s: str, field: SearchField) -> bool:
    """Whether the planner can use the field's index (asked of the catalog, so a schema
    from before migration 13 has none)."""
    return _validity(conn, s, field) is True


def drop_index(conn: Conn, s: str, name: str) -> None:
    """Drop the index the registry named (`search_names.checked_index_name`)."""
    conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {s}.{checked_index_name(name)}")


def search_indexes(conn: Conn, s: str) -> list[SearchIndexRecord]:
    found = conn.execute("SELECT to_regclass(%s)", (f"{s}.search_indexes",)).fetchone()
    if found is None or found[0] is None:  # a schema from before migration 13
        return []
    rows = conn.execute(
        f"SELECT field, created_at FROM {s}.search_indexes ORDER BY field"
    ).fetchall()
    return [SearchIndexRecord(str(r[0]), int(r[1])) for r in rows]
