"""`JobManager(path)` on a file that is not a jobledger database it can use (DESIGN
§8.12): `DB_SCHEMA`, and the file is byte-for-byte what it was, journal mode included.

Read-only is made with `chattr +i` when running as root (a mode of 0o444 does not stop
root); the test is skipped where neither makes the file unwritable.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger as jl
from jobledger._observe.read_model import JobQuery, ReadModel
from tests.engine import ITEM, Item


def fingerprint(path: Path) -> tuple[str, str | None]:
    """(sha256 of the bytes, journal mode as a read-only connection sees it)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        uri = f"file:{path}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            mode: str | None = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    except sqlite3.DatabaseError:
        mode = None
    return digest, mode


def refused(path: Path) -> jl.JobError:
    with pytest.raises(jl.SchemaError) as info:
        jl.JobManager(path)
    assert info.value.code == "DB_SCHEMA"
    return info.value


def valid_db(path: Path, jobs: int = 50) -> Path:
    manager = jl.JobManager(path)
    manager.enqueue_many(ITEM, [Item(n=i) for i in range(jobs)])
    asyncio.run(manager.stop())
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def foreign_db(path: Path, user_version: int = 0, table: str = "jobs") -> Path:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, title TEXT)")
        conn.execute(f"INSERT INTO {table} (title) VALUES ('theirs')")
        conn.execute(f"PRAGMA user_version = {user_version}")
        conn.commit()
    return path


def test_garbage_and_text_files(tmp_path: Path) -> None:
    for name, data in (
        ("garbage.db", bytes(range(256)) * 40),
        ("notes.db", b"not a database\n" * 300),
        ("header-only.db", b"SQLite format 3\x00" + b"\xff" * 200),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        before = fingerprint(path)
        err = refused(path)
        assert err.params["path"] == str(path)
        assert fingerprint(path) == before


def test_truncated_copies_of_a_real_database(tmp_path: Path) -> None:
    data = valid_db(tmp_path / "whole.db", jobs=400).read_bytes()
    for cut in (100, 4096, len(data) // 2):
        path = tmp_path / f"cut-{cut}.db"
        path.write_bytes(data[:cut])
        before = fingerprint(path)
        refused(path)
        assert fingerprint(path) == before


def test_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.mkdir()
    assert "directory" in refused(path).message
    assert list(path.iterdir()) == []


def test_another_programs_database_keeps_its_journal_mode(tmp_path: Path) -> None:
    for path in (
        foreign_db(tmp_path / "theirs.db"),  # its own `jobs` table
        foreign_db(tmp_path / "other-table.db", table="notes"),
        foreign_db(tmp_path / "versioned.db", user_version=2, table="notes"),
    ):
        before = fingerprint(path)
        assert before[1] == "delete"
        refused(path)
        assert fingerprint(path) == before
        assert not Path(f"{path}-wal").exists()


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    path.chmod(0o444)
    immutable = False
    try:
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError:
            pass
        else:  # root ignores the mode; an immutable file stops root too
            made = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
            immutable = made.returncode == 0
            try:
                os.close(os.open(path, os.O_RDWR))
            except OSError:
                pass
            else:
                pytest.skip("cannot make a file read-only here")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o644)


def test_a_read_only_jobledger_file_is_refused_to_workers_and_read_by_observers(
    tmp_path: Path,
) -> None:
    path = valid_db(tmp_path / "jobs.db")
    with read_only(path):
        before = fingerprint(path)
        assert "writing" in refused(path).message
        assert fingerprint(path) == before
        with ReadModel(path) as observer:
            assert observer.count_jobs(JobQuery()) == 50
        assert fingerprint(path) == before


def test_a_valid_file_still_opens(tmp_path: Path) -> None:
    path = valid_db(tmp_path / "jobs.db")
    manager = jl.JobManager(path)
    assert manager.count() == 50
    asyncio.run(manager.stop())
    empty = tmp_path / "empty.db"
    empty.touch()  # an empty file is an empty SQLite database: jobledger makes it its own
    manager = jl.JobManager(empty)
    assert manager.count() == 0
    asyncio.run(manager.stop())
