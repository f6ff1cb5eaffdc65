"""An SQLite too old for jobledger's statements is refused at open, with the version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jobledger import JobManager
from jobledger.errors import StorageError


def test_an_sqlite_older_than_3_35_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: the library this Python links is what it is; pretend it is old.
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    with pytest.raises(StorageError) as info:
        JobManager(str(tmp_path / "jobs.db"))
    assert info.value.code == "DB_SQLITE_TOO_OLD"
    assert info.value.params == {"sqlite_version": "3.31.1"}
    assert "3.35" in str(info.value)
    assert not (tmp_path / "jobs.db").exists()
