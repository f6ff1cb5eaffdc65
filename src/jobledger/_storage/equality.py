"""`column = value` filters, the one shape both backends' listings share.

Invariant: column names come from the caller's code, never from input; only the values
are bound, with the backend's placeholder (`?` for SQLite, `%s` for psycopg).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["equal_to"]


def equal_to(pairs: Iterable[tuple[str, str | None]], mark: str) -> tuple[str, tuple[str, ...]]:
    """`col1 = ? AND col2 = ?` for the pairs whose value is not None, and those values
    ("" and () when none is)."""
    given = [(column, value) for column, value in pairs if value is not None]
    sql = " AND ".join(f"{column} = {mark}" for column, _ in given)
    return sql, tuple(value for _, value in given)
