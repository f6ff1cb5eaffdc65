"""The audit log on SQLite (`audit_log`, migration 15): append one row, read a page.

Invariants: a row is written in the caller's write transaction (or one of its own) and
never changed; a file from before migration 15 (opened read-only, so not migrated)
reads as an empty log.
"""

from __future__ import annotations

import sqlite3

from jobledger._storage.equality import equal_to
from jobledger._storage.observe import AuditRecord

__all__ = ["audit_records", "count_audit", "insert_audit"]

_INSERT = (
    "INSERT INTO audit_log (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?) RETURNING id"
)
_COLUMNS = "SELECT id, at, actor, action, target, detail FROM audit_log"


def insert_audit(
    conn: sqlite3.Connection, at_ms: int, actor: str, action: str, target: str, detail: str
) -> AuditRecord:
    row = conn.execute(_INSERT, (at_ms, actor, action, target, detail)).fetchone()
    return AuditRecord(int(row[0]), at_ms, actor, action, target, detail)


def _has_log(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_log'"
    ).fetchone()
    return found is not None


def _where(actor: str | None, action: str | None) -> tuple[str, tuple[str, ...]]:
    sql, params = equal_to((("actor", actor), ("action", action)), "?")
    return (f" WHERE {sql}" if sql else ""), params


def audit_records(
    conn: sqlite3.Connection, limit: int, offset: int, actor: str | None, action: str | None
) -> list[AuditRecord]:
    if not _has_log(conn):
        return []
    where, params = _where(actor, action)
    rows = conn.execute(
        f"{_COLUMNS}{where} ORDER BY id DESC LIMIT ? OFFSET ?", (*params, limit, offset)
    ).fetchall()
    return [AuditRecord(int(r[0]), int(r[1]), r[2], r[3], r[4], r[5]) for r in rows]


def count_audit(conn: sqlite3.Connection, actor: str | None, action: str | None) -> int:
    if not _has_log(conn):
        return 0
    where, params = _where(actor, action)
    return int(conn.execute(f"SELECT count(*) FROM audit_log{where}", params).fetchone()[0])
