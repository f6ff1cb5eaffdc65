"""The audit log on PostgreSQL (`audit_log`, migration 11): append one row, read a page.

Invariants: as SQLite's (`_storage/sqlite/audit.py`); `detail` is stored as jsonb and
read back as JSON text, so both backends hand the same `AuditRecord` up. Every name is
qualified with the installation's schema.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from jobledger._storage.equality import equal_to
from jobledger._storage.observe import AuditRecord

__all__ = ["audit_records", "count_audit", "insert_audit"]

Conn = psycopg.Connection[Any]


def insert_audit(
    conn: Conn, s: str, at_ms: int, actor: str, action: str, target: str, detail: str
) -> AuditRecord:
    row = conn.execute(
        f"INSERT INTO {s}.audit_log (at, actor, action, target, detail) "
        "VALUES (%s, %s, %s, %s, %s::jsonb) RETURNING id",
        (at_ms, actor, action, target, detail),
    ).fetchone()
    assert row is not None
    return AuditRecord(int(row[0]), at_ms, actor, action, target, detail)


def _has_log(conn: Conn, s: str) -> bool:
    found = conn.execute("SELECT to_regclass(%s)", (f"{s}.audit_log",)).fetchone()
    return found is not None and found[0] is not None


def _where(actor: str | None, action: str | None) -> tuple[str, tuple[str, ...]]:
    sql, params = equal_to((("actor", actor), ("action", action)), "%s")
    return (f" WHERE {sql}" if sql else ""), params


def _text(detail: Any) -> str:
    # psycopg decodes jsonb; give the caller the same JSON text SQLite stores.
    return detail if isinstance(detail, str) else json.dumps(detail, separators=(",", ":"))


def audit_records(
    conn: Conn, s: str, limit: int, offset: int, actor: str | None, action: str | None
) -> list[AuditRecord]:
    if not _has_log(conn, s):
        return []
    where, params = _where(actor, action)
    rows = conn.execute(
        f"SELECT id, at, actor, action, target, detail FROM {s}.audit_log{where} "
        "ORDER BY id DESC LIMIT %s OFFSET %s",
        (*params, limit, offset),
    ).fetchall()
    return [AuditRecord(int(r[0]), int(r[1]), r[2], r[3], r[4], _text(r[5])) for r in rows]


def count_audit(conn: Conn, s: str, actor: str | None, action: str | None) -> int:
    if not _has_log(conn, s):
        return 0
    where, params = _where(actor, action)
    row = conn.execute(f"SELECT count(*) FROM {s}.audit_log{where}", params).fetchone()
    return 0 if row is None else int(row[0])
