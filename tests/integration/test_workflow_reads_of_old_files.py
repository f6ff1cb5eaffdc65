"""Observers read a file from before workflows (SQLite version 10) as it is: no
workflows to list, an empty page of them on the dashboard, and the file left alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx

from jobledger._observe.http import create_app
from jobledger._storage.open import open_store
from jobledger._storage.sqlite import migrate as migrate_module
from jobledger._storage.sqlite.migrate import load_migrations
from tests.http.conftest import running_server


def _version_10_file(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for migration in load_migrations()[:10]:
            conn.execute("BEGIN IMMEDIATE")
            migrate_module._apply(conn, migration)
            conn.execute("COMMIT")
    finally:
        conn.close()


def test_an_observer_lists_no_workflows_in_a_file_from_before_them(tmp_path: Path) -> None:
    db = str(tmp_path / "old.db")
    _version_10_file(db)
    observer = open_store(db, read_only=True)
    try:
        assert observer.list_workflows(limit=10) == []
        assert observer.count_workflows() == 0
    finally:
        observer.close()
    app = create_app(db)
    try:
        with running_server(app) as url:
            api = httpx.get(f"{url}/api/workflows", timeout=10)
            assert (api.status_code, api.json()["total"]) == (200, 0)
            page = httpx.get(f"{url}/workflows", timeout=10)
            assert page.status_code == 200
            assert "No workflows." in page.text
    finally:
        app.state.read_model.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (10,)
    finally:
        conn.close()
