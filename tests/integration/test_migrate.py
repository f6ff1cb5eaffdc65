"""Numbered migrations under the writer lease, including two processes racing on one file.

`schema.sql` is generated. After adding a migration, regenerate it from the repository
root with

    .venv/bin/python -m jobledger._storage.sqlite.migrate \
        > src/jobledger/_storage/sqlite/schema.sql

and review the diff; `test_a_fresh_schema_equals_all_migrations_applied` fails until then.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from collections.abc import Iterator
from importlib import resources
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

import pytest

from jobledger._core.ids import new_keyed_id
from jobledger._storage import layout as L
from jobledger._storage.lease import WriterLease, acquire_writer_lease, writer_lock_path_for
from jobledger._storage.open import open_store
from jobledger._storage.sqlite import migrate as migrate_module
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.migrate import (
    SCHEMA_VERSION,
    Migration,
    dump_schema,
    load_migrations,
    migrate,
    migrate_connection,
    render_fresh_schema,
    schema_version,
    split_statements,
)
from jobledger.errors import DatabaseBusy, SchemaError, WriteTransactionFailed
from tests.integration import _procs, v7_id

WAIT = _procs.WAIT
TABLES = {
    "audit_log",
    "job_attempts",
    "job_counts",
    "job_deps",
    "job_minutes",
    "job_schedules",
    "job_totals",
    "jobs",
    "locks",
    "leader",
    "ownership",
    "queue_settings",
    "queues",
    "rate_log",
    "search_indexes",
    "workers",
    "workflows",
}


def _schema_file() -> str:
    return (
        resources.files("jobledger._storage.sqlite")
        .joinpath("schema.sql")
        .read_text(encoding="utf-8")
    )


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
    return str(tmp_path / "queue.db")


def _open(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _lease_is_free(db: str) -> bool:
    lease = acquire_writer_lease(writer_lock_path_for(db))
    if lease is None:
        return False
    lease.release()
    return True


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {str(name) for (name,) in rows}


def test_two_processes_open_one_fresh_database_at_the_same_moment(
    ctx: SpawnContext, procs: list[SpawnProcess], db: str
) -> None:
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    for _ in range(2):
        proc = ctx.Process(target=_procs.migrate_at_barrier, args=(db, barrier, results))
        procs.append(proc)
        proc.start()
    outcomes = sorted(results.get(timeout=WAIT) for _ in range(2))
    for proc in procs:
        proc.join(WAIT)
    results.close()
    results.join_thread()

    assert outcomes == [("ok", str(SCHEMA_VERSION))] * 2
    assert [proc.exitcode for proc in procs] == [0, 0]
    conn = _open(db)
    try:
        assert schema_version(conn) == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert _tables(conn) == TABLES
        assert dump_schema(conn) == _schema_file(), "exactly one copy of the schema"
    finally:
        conn.close()


def test_a_fresh_schema_equals_all_migrations_applied(db: str) -> None:
    assert render_fresh_schema() == _schema_file()
    assert migrate(db) == SCHEMA_VERSION
    conn = _open(db)
    try:
        assert dump_schema(conn) == _schema_file()
        assert _tables(conn) == TABLES
    finally:
        conn.close()


def test_schema_version_is_the_highest_migration() -> None:
    migrations = load_migrations()
    assert [m.number for m in migrations] == list(range(1, len(migrations) + 1))
    assert migrations[-1].number == SCHEMA_VERSION
    assert f"-- user_version = {SCHEMA_VERSION}\n" in _schema_file()


def test_a_version_1_file_with_jobs_upgrades_in_place(db: str) -> None:
    conn = _open(db)
    try:
        conn.execute("BEGIN IMMEDIATE")
        migrate_module._apply(conn, load_migrations()[0])
        conn.execute("COMMIT")
        for i, status in enumerate(["completed", "failed", "pending", "cancelled"]):
            conn.execute(
                "INSERT INTO jobs (id, type, status, queue, payload, scheduled_at, created_at, "
                "updated_at) VALUES (?, 't', ?, 'q', '{}', 0, ?, ?)",
                (v7_id(1_000 + i, i), status, 1_000 + i, 1_000 + i),
            )
    finally:
        conn.close()

    assert migrate(db) == SCHEMA_VERSION
    conn = _open(db)
    try:
        assert dump_schema(conn) == _schema_file()
        statuses = [
            r[0]
            for r in conn.execute(
                q.JobsWhere().list_sql(limit=10, offset=0)[0].replace(L.JOB_COLUMNS, "status"),
                (10, 0),
            )
        ]
        assert statuses == ["cancelled", "pending", "failed", "completed"]
        sql, params = q.JobsWhere(("failed",)).list_sql(limit=10, offset=0)
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        assert "jobs_failed_idx" in plan
        assert [r[2] for r in conn.execute(sql, params)] == ["failed"]
    finally:
        conn.close()


def _version_2_file_with_references(db: str) -> list[tuple[Any, ...]]:
    """A schema-2 file: a schedule, a parent, its child, and an orphan written with
    foreign keys off (another program's row). Returns every job row with its rowid."""
    conn = _open(db)
    try:
        for migration in load_migrations()[:2]:
            conn.execute("BEGIN IMMEDIATE")
            migrate_module._apply(conn, migration)
            conn.execute("COMMIT")
        conn.execute(
            "INSERT INTO job_schedules (id, type, trigger, payload, catch_up, created_at, "
            "updated_at) VALUES ('s1', 't', '{}', '{}', 'latest', 0, 0)"
        )
        insert = (
            "INSERT INTO jobs (rowid, id, type, status, queue, payload, output, parent_id, "
            "schedule_id, scheduled_at, created_at, updated_at) "
            "VALUES (?, ?, 't', ?, 'q', ?, ?, ?, ?, 0, ?, ?)"
        )
        parent, child, orphan = v7_id(1_000, 1), v7_id(1_001, 2), v7_id(1_002, 3)
        # Rowids out of id order, as a file whose rows were deleted and reused could be.
        conn.execute(insert, (7, parent, "completed", '{"n": 1}', '"out"', None, "s1", 1, 1))
        conn.execute(insert, (3, child, "pending", '{"n": 2}', None, parent, "s1", 2, 2))
        conn.execute(insert, (5, orphan, "failed", "{}", None, "no-such-job", None, 3, 3))
        # Schema 2 has no retry_of column; after the upgrade it reads NULL on these rows.
        columns = L.JOB_COLUMNS_BEFORE_RETRY_OF
        return conn.execute(f"SELECT rowid, {columns} FROM jobs ORDER BY id").fetchall()
    finally:
        conn.close()


def test_a_version_2_file_is_rebuilt_keeping_every_row_and_reference(db: str) -> None:
    before = _version_2_file_with_references(db)
    assert migrate(db) == SCHEMA_VERSION
    conn = _open(db)
    try:
        assert dump_schema(conn) == _schema_file()
        # Dropping the old table with foreign keys on would have run ON DELETE SET NULL.
        rows = conn.execute(f"SELECT rowid, {L.JOB_COLUMNS} FROM jobs ORDER BY id").fetchall()
        assert [r[1:] for r in rows] == [r[1:] for r in before]
        # Schema 4 renumbered them below zero, in id order (they had rowids 7, 3, 5).
        assert [r[0] for r in rows] == [q.LEGACY_BASE + 1, q.LEGACY_BASE + 2, q.LEGACY_BASE + 3]
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        sql, params = q.JobsWhere(("failed", "cancelled")).list_sql(limit=10, offset=0)
        assert [r[L.C_ID] for r in conn.execute(sql, params)] == [before[2][1 + L.C_ID]]
    finally:
        conn.close()


def test_the_status_check_still_refuses_an_unknown_status(db: str) -> None:
    migrate(db)
    conn = _open(db)
    try:
        insert = (
            "INSERT INTO jobs (id, type, status, queue, payload, scheduled_at, created_at, "
            "updated_at) VALUES (?, 't', ?, 'q', '{}', 0, 0, 0)"
        )
        statuses = ("pending", "delayed", "running", "completed", "failed", "cancelled")
        for i, status in enumerate(statuses):
            conn.execute(insert, (f"ok-{i}", status))
        for bad in ("done", "Pending", ""):
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute(insert, (f"bad-{bad}", bad))
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE jobs SET status = 'finished' WHERE id = 'ok-0'")
    finally:
        conn.close()


def test_no_status_test_builds_a_temporary_table_per_execution(db: str) -> None:
    """SQLite turns `x IN (a, b, c, ...)` (three values or more) into a temporary B-tree
    that it builds on every execution; in the status CHECK that was a quarter of an
    enqueue's SQLite work. A row's insert and its finalize must build none, and the
    live-key lookup must still find its partial index."""
    migrate(db)
    conn = _open(db)
    try:
        for sql in (q.INSERT_JOB, q.FINISH_NO_ROW):
            rows = conn.execute(f"EXPLAIN {sql}", (None,) * sql.count("?")).fetchall()
            # EXPLAIN lists the statement's program, then each trigger's (addresses start
            # at 0 again). The workflow release trigger's subqueries run only past its
            # WHEN (`workflow_id IS NOT NULL`), which an ordinary row fails at once.
            end = next((i for i, r in enumerate(rows) if i and r[0] == 0), len(rows))
            ops = {r[1] for r in rows[:end]}
            assert "OpenEphemeral" not in ops, sql
        plan = conn.execute(f"EXPLAIN QUERY PLAN {q.FIND_LIVE_BY_KEY}", ("k",)).fetchall()
        assert "jobs_idempotency_key_uq" in plan[0][3]
    finally:
        conn.close()


def test_a_rebuild_leaves_the_connection_enforcing_foreign_keys(db: str) -> None:
    _version_2_file_with_references(db)
    conn = _open(db)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        assert migrate_connection(conn) == SCHEMA_VERSION
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute(
                "INSERT INTO jobs (id, type, status, queue, payload, schedule_id, scheduled_at, "
                "created_at, updated_at) VALUES ('j', 't', 'pending', 'q', '{}', 'nope', 0, 0, 0)"
            )
        conn.execute("DELETE FROM job_schedules")  # ON DELETE SET NULL runs again
        assert (
            conn.execute("SELECT count(*) FROM jobs WHERE schedule_id IS NOT NULL").fetchone()[0]
            == 0
        )
    finally:
        conn.close()


def test_a_rebuild_that_would_break_a_reference_is_refused(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate(db)
    conn = _open(db)
    try:
        conn.execute(
            "INSERT INTO job_schedules (id, type, trigger, payload, catch_up, created_at, "
            "updated_at) VALUES ('s1', 't', '{}', '{}', 'latest', 0, 0)"
        )
        conn.execute(
            "INSERT INTO jobs (id, type, status, queue, payload, schedule_id, scheduled_at, "
            "created_at, updated_at) VALUES ('j1', 't', 'pending', 'q', '{}', 's1', 0, 0, 0)"
        )
    finally:
        conn.close()
    careless = Migration(
        SCHEMA_VERSION + 1,
        "careless_rebuild",
        "-- jobledger: foreign_keys=off\nDELETE FROM job_schedules;\n",
    )
    monkeypatch.setattr(migrate_module, "load_migrations", lambda: (*load_migrations(), careless))
    monkeypatch.setattr(migrate_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)

    with pytest.raises(SchemaError, match="foreign key") as info:
        migrate(db)
    assert info.value.params["violations"] == 1
    conn = _open(db)
    try:
        assert schema_version(conn) == SCHEMA_VERSION
        assert conn.execute("SELECT id FROM job_schedules").fetchall() == [("s1",)]
    finally:
        conn.close()


@pytest.mark.parametrize("wal", [True, False], ids=["wal", "rollback-journal"])
def test_a_newer_database_raises_schema_error_and_is_left_alone(db: str, wal: bool) -> None:
    conn = _open(db)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()

    holder = acquire_writer_lease(writer_lock_path_for(db))
    assert holder is not None
    try:
        with pytest.raises(SchemaError) as info:
            migrate(db, lease_wait=0.0)  # refused at once, without waiting for the lease
    finally:
        holder.release()
    assert info.value.code == "DB_SCHEMA"
    assert info.value.params["user_version"] == SCHEMA_VERSION + 1

    conn = _open(db)
    try:
        assert schema_version(conn) == SCHEMA_VERSION + 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == ("wal" if wal else "delete")
        assert _tables(conn) == set()
        with pytest.raises(SchemaError):
            migrate_connection(conn)
    finally:
        conn.close()


def test_the_version_is_checked_again_under_the_lease(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer library upgrades the file between our first read and our lease."""

    def racing_acquire(lock_path: str, **kwargs: Any) -> WriterLease | None:
        conn = _open(db)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
        return acquire_writer_lease(lock_path, **kwargs)

    monkeypatch.setattr(migrate_module, "acquire_writer_lease", racing_acquire)
    with pytest.raises(SchemaError):
        migrate(db)
    conn = _open(db)
    try:
        assert _tables(conn) == set()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "left alone"
    finally:
        conn.close()
    assert _lease_is_free(db)


def test_the_version_is_checked_again_inside_each_transaction(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale read before BEGIN (another lease-less writer got there first) is harmless."""
    conn = _open(db)
    migrate_connection(conn)
    real = migrate_module.schema_version
    reads = 0

    def stale_first(c: sqlite3.Connection) -> int:
        nonlocal reads
        reads += 1
        return 0 if reads == 1 else real(c)

    monkeypatch.setattr(migrate_module, "schema_version", stale_first)
    try:
        assert migrate_connection(conn) == SCHEMA_VERSION
        assert reads > 2, "the version was read again inside the transaction"
    finally:
        conn.close()


def test_a_current_database_opens_without_the_lease(db: str) -> None:
    migrate(db)
    holder = acquire_writer_lease(writer_lock_path_for(db))
    assert holder is not None
    try:
        assert migrate(db, lease_wait=0.0) == SCHEMA_VERSION
    finally:
        holder.release()


def test_pending_work_without_the_lease_raises_database_busy(db: str) -> None:
    holder = acquire_writer_lease(writer_lock_path_for(db))
    assert holder is not None
    try:
        with pytest.raises(DatabaseBusy) as info:
            migrate(db, lease_wait=0.05)
        assert info.value.code == "DB_BUSY"
        # A caller that holds the lease says so, and migrates under it.
        assert migrate(db, lease_mode="caller-held") == SCHEMA_VERSION
    finally:
        holder.release()


def test_an_existing_rollback_journal_database_is_switched_to_wal(db: str) -> None:
    conn = _open(db)
    assert migrate_connection(conn) == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()

    assert migrate(db) == SCHEMA_VERSION
    conn = _open(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_migrate_connection_serves_in_memory_databases() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        assert migrate_connection(conn) == SCHEMA_VERSION
        assert migrate_connection(conn) == SCHEMA_VERSION  # nothing left to do
        assert _tables(conn) == TABLES
    finally:
        conn.close()
    with pytest.raises(ValueError, match="migrate_connection"):
        migrate(":memory:")


def test_each_migration_is_all_or_nothing(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Migration(
        SCHEMA_VERSION + 1,
        "broken",
        "CREATE TABLE half_done (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n",
    )
    migrate(db)
    monkeypatch.setattr(migrate_module, "load_migrations", lambda: (*load_migrations(), broken))
    monkeypatch.setattr(migrate_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)

    with pytest.raises(WriteTransactionFailed, match="no_such_table"):
        migrate(db)
    conn = _open(db)
    try:
        assert schema_version(conn) == SCHEMA_VERSION
        assert "half_done" not in _tables(conn)
    finally:
        conn.close()
    assert _lease_is_free(db), "the failed migration gave the lease back"


def test_statements_split_only_at_real_terminators() -> None:
    script = """-- a header; with a semicolon
CREATE TABLE a (x TEXT DEFAULT ';');  -- trailing; comment
INSERT INTO a VALUES ('one;two');
CREATE TRIGGER a_t AFTER INSERT ON a BEGIN
    UPDATE a SET x = x || ';';
END;
-- the end; nothing follows
"""
    assert split_statements(script) == [
        "-- a header; with a semicolon\nCREATE TABLE a (x TEXT DEFAULT ';');",
        "-- trailing; comment\nINSERT INTO a VALUES ('one;two');",
        "CREATE TRIGGER a_t AFTER INSERT ON a BEGIN\n    UPDATE a SET x = x || ';';\nEND;",
    ]
    with pytest.raises(ValueError, match="incomplete"):
        split_statements("CREATE TABLE a (x);\nCREATE TABLE b (y)")


def test_the_fast_path_reads_without_creating_anything(db: str) -> None:
    migrate(db)
    lock = writer_lock_path_for(db)
    os.remove(lock)
    assert migrate(db) == SCHEMA_VERSION
    assert not os.path.exists(lock), "a current database never touches the lock file"


def test_paths_with_uri_characters_open_the_right_file(tmp_path: Path) -> None:
    """The read-only fast path once dropped everything after a `#` or `?` in the path."""
    folder = tmp_path / "a#b?c"
    folder.mkdir()
    db = str(folder / "queue.db")
    assert migrate(db) == SCHEMA_VERSION
    assert migrate(db) == SCHEMA_VERSION  # the fast path, through a file: URI
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a#b?c"], "no stray file opened"


def test_an_observer_reads_a_file_from_before_attempts_and_retry_of(db: str) -> None:
    # A worker of an older release wrote this file (version 5): observers of this one
    # read it as it is, with no attempts and no re-runs, and never migrate it.
    conn = _open(db)
    try:
        for migration in load_migrations()[:5]:
            conn.execute("BEGIN IMMEDIATE")
            migrate_module._apply(conn, migration)
            conn.execute("COMMIT")
        key, job_id = new_keyed_id(2_000)
        conn.execute(
            "INSERT INTO jobs (rowid, id, type, status, queue, payload, scheduled_at, "
            "created_at, updated_at) VALUES (?, ?, 't', 'failed', 'q', '{}', 0, 1, 1)",
            (key, job_id),
        )
    finally:
        conn.close()
    observer = open_store(db, read_only=True)
    try:
        row = observer.get(job_id)
        assert row is not None
        assert (row[L.C_STATUS], row[L.C_RETRY_OF]) == ("failed", None)
        assert observer.attempts(job_id) == []
    finally:
        observer.close()
    conn = _open(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (5,)
    finally:
        conn.close()


def test_a_keyed_fold_reads_only_the_unfolded_rows(db: str) -> None:
    """A fold's read and its mark go through the partial index of unfolded rows, not
    over every row of the queue's window (`_storage/rate.py`: `fold`)."""
    from jobledger._storage.sqlite.store import RATE_SQL

    migrate(db)
    conn = _open(db)
    try:
        for sql in (RATE_SQL.unfolded, RATE_SQL.mark_folded):
            plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("q", 0)))
            assert "rate_log_unfolded_idx" in plan, (sql, plan)
    finally:
        conn.close()
