"""Search indexes on SQLite (`search_indexes`, migration 17): an index on `jobs` per
declared JSON field, so a console search by that field reads the index.

Invariants: a field's registry row and its index are created, and dropped, in one write
transaction, so the registry names exactly the indexes that exist; the index's
expression is `queries.field_expr(field)`, the text the search spells; a file from
before migration 17 (opened read-only, so not migrated) has no search indexes.
"""

from __future__ import annotations

import sqlite3

from jobledger._core.search import SearchField
from jobledger._storage.observe import SearchIndexRecord
from jobledger._storage.search_names import checked_index_name, index_name
from jobledger._storage.sqlite.queries import field_expr

__all__ = ["add_search_index", "drop_search_index", "search_indexes"]


def _has_registry(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_indexes'"
    ).fetchone()
    return found is not None


def add_search_index(conn: sqlite3.Connection, field: SearchField, now_ms: int) -> bool:
    """Create the field's index (reading every row once) unless the registry has it;
    True when this call created it. Runs in the caller's write transaction."""
    if conn.execute("SELECT 1 FROM search_indexes WHERE field = ?", (field.name,)).fetchone():
        return False
    expr = field_expr(field)
    name = index_name(field)
    # Partial on IS NOT NULL: SQLite uses such an index for `expr = ?`, and the rows
    # without the field (other job types) stay out of it.
    conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON jobs (({expr})) WHERE ({expr}) IS NOT NULL")
    conn.execute(
        "INSERT INTO search_indexes (field, index_name, created_at) VALUES (?, ?, ?)",
        (field.name, name, now_ms),
    )
    return True


def drop_search_index(conn: sqlite3.Connection, field: SearchField) -> bool:
    """Drop the field's index; True when there was one."""
    row = conn.execute(
        "DELETE FROM search_indexes WHERE field = ? RETURNING index_name", (field.name,)
    ).fetchone()
    if row is None:
        return False
    conn.execute(f"DROP INDEX IF EXISTS {checked_index_name(str(row[0]))}")
    return True


def search_indexes(conn: sqlite3.Connection) -> list[SearchIndexRecord]:
    """The declared fields, by name."""
    if not _has_registry(conn):
        return []
    rows = conn.execute("SELECT field, created_at FROM search_indexes ORDER BY field").fetchall()
    return [SearchIndexRecord(str(r[0]), int(r[1])) for r in rows]
