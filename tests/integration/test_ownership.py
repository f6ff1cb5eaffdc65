"""The ownership heartbeat (who *should* write) on top of the lease (who *can*)."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
import time
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

import pytest

from jobledger._storage import ownership
from jobledger._storage.lease import WriterLease, acquire_writer_lease, writer_lock_path_for
from jobledger._storage.ownership import (
    OwnershipResult,
    acquire_write_ownership,
    is_fresh,
    publish_heartbeat,
    read_owner,
)
from jobledger._storage.sqlite.migrate import migrate
from jobledger.errors import StorageError
from tests.integration import _procs

WAIT = _procs.WAIT
T = 1_780_000_000_000  # a fixed wall-clock instant, epoch ms


@pytest.fixture
def ctx() -> SpawnContext:
    return multiprocessing.get_context("spawn")


@pytest.fixture
def procs() -> Iterator[list[SpawnProcess]]:
    started: list[SpawnProcess] = []
    yield started
    for proc in started:
        if proc.is_alive():
            proc.kill()
        proc.join(WAIT)
        proc.close()


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "queue.db")
    migrate(path)
    return path


def _publish_from_child(
    ctx: SpawnContext, procs: list[SpawnProcess], db: str, owner: str, at_ms: int
) -> None:
    proc = ctx.Process(target=_procs.publish, args=(db, owner, at_ms))
    procs.append(proc)
    proc.start()
    proc.join(WAIT)
    assert proc.exitcode == 0, "the other process's heartbeat was skipped"


def _owner_row(db: str) -> tuple[str, int] | None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return read_owner(conn)
    finally:
        conn.close()


def _lease_is_free(db: str) -> bool:
    lease = acquire_writer_lease(writer_lock_path_for(db))
    if lease is None:
        return False
    lease.release()
    return True


def _release(result: OwnershipResult) -> WriterLease:
    assert result.lease is not None
    result.lease.release()
    return result.lease


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every database opened through sqlite3.connect from here on, as its target string."""
    seen: list[str] = []
    real: Callable[..., sqlite3.Connection] = sqlite3.connect

    def spy(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        seen.append(str(database))
        return real(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", spy)
    return seen


# -- freshness -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at_ms", "fresh"),
    [
        (T, True),  # just written
        (T - 59_999, True),
        (T - 60_000, False),  # strict: exactly one window old is stale
        (T - 3_600_000, False),
        (T + 5_000, True),  # a little clock skew is tolerated
        (T + 5_001, False),  # further in the future: invalid, not fresh
    ],
)
def test_freshness_window(at_ms: int, fresh: bool) -> None:
    assert is_fresh(at_ms, T, 60_000) is fresh


# -- publishing --------------------------------------------------------------------------


def test_publish_writes_the_row(db: str) -> None:
    assert publish_heartbeat(db, "daemon", T)
    assert _owner_row(db) == ("daemon", T)
    assert publish_heartbeat(db, "daemon", T + 30_000)
    assert _owner_row(db) == ("daemon", T + 30_000)
    assert _lease_is_free(db)


def test_publish_is_skipped_not_blocked_while_the_lease_is_held(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    holder = acquire_writer_lease(writer_lock_path_for(db))
    assert holder is not None
    try:
        with caplog.at_level(logging.WARNING, logger=ownership.__name__):
            assert publish_heartbeat(db, "daemon", T) is False
        assert "writer lease is busy" in caplog.text
        assert _owner_row(db) is None
        # The holder itself refreshes its heartbeat from inside its lease.
        assert publish_heartbeat(db, "daemon", T, lease_mode="caller-held")
        assert _owner_row(db) == ("daemon", T)
    finally:
        holder.release()


def test_publish_is_skipped_not_blocked_while_the_database_is_busy(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger=ownership.__name__):
            assert publish_heartbeat(db, "daemon", T) is False
        assert time.monotonic() - started < 1.0, "a heartbeat never waits for the database"
        assert "database is locked" in caplog.text
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert _owner_row(db) is None
    assert _lease_is_free(db), "the skipped beat gave its lease back"


def test_publish_to_a_missing_database_is_skipped(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.db")
    assert publish_heartbeat(path, "daemon", T) is False
    assert not (tmp_path / "absent.db").exists()


# -- reading, failing closed ------------------------------------------------------------


def test_a_missing_ownership_table_means_no_owner(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "blank.db", isolation_level=None)
    try:
        assert read_owner(conn) is None
    finally:
        conn.close()


def test_any_other_read_error_fails_closed(tmp_path: Path) -> None:
    path = str(tmp_path / "broken.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE ownership (key TEXT PRIMARY KEY, owner TEXT)")  # no at_ms
    conn.close()

    with pytest.raises(sqlite3.OperationalError, match="at_ms"):
        acquire_write_ownership(path, "cli", now_ms=T)
    assert _lease_is_free(path)


def test_a_malformed_row_fails_closed(db: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("INSERT INTO ownership VALUES ('writer', 'daemon', 'yesterday')")
    conn.close()
    with pytest.raises(StorageError, match="malformed"):
        acquire_write_ownership(db, "cli", now_ms=T)
    assert _lease_is_free(db)


# -- acquiring write ownership -----------------------------------------------------------


def test_a_fresh_heartbeat_of_another_process_keeps_us_read_only(
    ctx: SpawnContext, procs: list[SpawnProcess], db: str, connects: list[str]
) -> None:
    _publish_from_child(ctx, procs, db, "daemon", T)
    connects.clear()

    result = acquire_write_ownership(db, "cli", now_ms=T + 59_999)

    assert result == OwnershipResult(False, "owned_by_other", None, "daemon")
    assert connects, "the heartbeat was read"
    for target in connects:
        assert target.startswith("file:"), f"opened a connection that can write: {target}"
        assert target.endswith("?mode=ro"), f"opened a connection that can write: {target}"
    assert not any(target.endswith(".lock") for target in connects), "touched the lease"


def test_a_stale_heartbeat_lets_another_process_take_over(
    ctx: SpawnContext, procs: list[SpawnProcess], db: str
) -> None:
    _publish_from_child(ctx, procs, db, "daemon", T)

    result = acquire_write_ownership(db, "cli", now_ms=T + 60_000)

    assert (result.granted, result.reason, result.current_owner) == (True, "granted", "daemon")
    assert result.lease is not None
    assert result.lease.held
    assert not _lease_is_free(db), "the grant comes with the lease held"
    # While we hold it, the old owner's beats are skipped, so it cannot come back in.
    assert publish_heartbeat(db, "daemon", T + 60_001) is False
    _release(result)
    assert _lease_is_free(db)


def test_our_own_fresh_heartbeat_does_not_block_us(db: str) -> None:
    assert publish_heartbeat(db, "cli", T)
    result = acquire_write_ownership(db, "cli", now_ms=T + 1)
    assert (result.granted, result.current_owner) == (True, "cli")
    _release(result)


def test_a_missing_database_is_unowned_and_not_created(tmp_path: Path) -> None:
    path = str(tmp_path / "new.db")
    result = acquire_write_ownership(path, "cli", now_ms=T)
    assert (result.granted, result.reason, result.current_owner) == (True, "granted", None)
    _release(result)
    assert not (tmp_path / "new.db").exists(), "the ownership checks only read"


def test_a_held_lease_means_writer_busy(db: str) -> None:
    holder = acquire_writer_lease(writer_lock_path_for(db))
    assert holder is not None
    try:
        result = acquire_write_ownership(db, "cli", now_ms=T, lease_wait=0.05)
    finally:
        holder.release()
    assert result == OwnershipResult(False, "writer_busy", None, None)


def test_ownership_is_checked_again_under_the_lease(
    ctx: SpawnContext,
    procs: list[SpawnProcess],
    db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon starts between check #1 and the lease: the check under the lease sees it."""
    real_acquire = acquire_writer_lease
    real_read = ownership.read_owner
    reads: list[tuple[str, int] | None] = []

    def racing_acquire(lock_path: str, **kwargs: Any) -> WriterLease | None:
        _publish_from_child(ctx, procs, db, "daemon", T)
        return real_acquire(lock_path, **kwargs)

    def recording_read(conn: sqlite3.Connection, *, key: str = "writer") -> Any:
        row = real_read(conn, key=key)
        reads.append(row)
        return row

    monkeypatch.setattr(ownership, "acquire_writer_lease", racing_acquire)
    monkeypatch.setattr(ownership, "read_owner", recording_read)

    result = acquire_write_ownership(db, "cli", now_ms=T + 1_000)

    assert reads == [None, ("daemon", T)], "check #1 saw nobody; check #2 saw the daemon"
    assert result == OwnershipResult(False, "owned_by_other", None, "daemon")
    assert _lease_is_free(db), "the refused caller gave the lease back"


def test_a_read_error_under_the_lease_releases_it(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_acquire = acquire_writer_lease

    def breaking_acquire(lock_path: str, **kwargs: Any) -> WriterLease | None:
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("DROP TABLE ownership")
        conn.execute("CREATE TABLE ownership (key TEXT PRIMARY KEY)")
        conn.close()
        return real_acquire(lock_path, **kwargs)

    monkeypatch.setattr(ownership, "acquire_writer_lease", breaking_acquire)
    with pytest.raises(sqlite3.OperationalError):
        acquire_write_ownership(db, "cli", now_ms=T)
    assert _lease_is_free(db)
