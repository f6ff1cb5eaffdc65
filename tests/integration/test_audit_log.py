"""`jobs.record_audit` / `jobs.audit_log` on both backends: what an entry may hold (bad
input is a JOB_INVALID_OPTION and writes nothing), paging and filters, entries that
outlive GC, and a file from before the audit log read as an empty one."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import jobledger as jl
from jobledger._fake_clock import FakeClock
from jobledger._observe.read_model import ReadModel
from jobledger._storage.sqlite import migrate as migrate_module
from jobledger._storage.sqlite.migrate import load_migrations

IDLE = jl.JobType("audit.idle", dict)


def test_record_and_read_back(db: str) -> None:
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    jobs = jl.JobManager(db, clock=clock)
    try:
        first = jobs.record_audit("ann", "queue.pause", "emails", {"why": "<b>outage</b>"})
        clock.advance(1.5)
        second = jobs.record_audit("bob", "job.retry", "01abc", {"new_job": "02def", "n": [1, 2]})
        jobs.record_audit("ann", "queue.resume", "emails")
        assert first.id < second.id
        assert first.at == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
        assert first.detail == {"why": "<b>outage</b>"}

        log = jobs.audit_log()
        assert [e.action for e in log] == ["queue.resume", "job.retry", "queue.pause"]
        assert log[1] == second
        assert log[1].to_json() == {
            "id": second.id,
            "at": "2026-03-01T12:00:01.500000Z",
            "actor": "bob",
            "action": "job.retry",
            "target": "01abc",
            "detail": {"new_job": "02def", "n": [1, 2]},
        }
        assert [e.action for e in jobs.audit_log(actor="ann")] == ["queue.resume", "queue.pause"]
        assert [e.actor for e in jobs.audit_log(action="job.retry")] == ["bob"]
        assert jobs.audit_log(actor="ann", action="job.retry") == []
        assert [e.id for e in jobs.audit_log(limit=1, offset=1)] == [second.id]
        with ReadModel(db) as rm:  # the console's read-only view agrees
            assert rm.audit(limit=10) == log
    finally:
        asyncio.run(jobs.stop())


BAD: list[tuple[dict[str, Any], str]] = [
    ({"actor": ""}, "actor"),
    ({"actor": "a\x00b"}, "actor"),
    ({"action": "x\ny"}, "action"),
    ({"target": "t" * 501}, "target"),
    ({"actor": 7}, "actor"),
    ({"detail": ["not", "a", "mapping"]}, "detail"),
    ({"detail": {"f": float("nan")}}, "detail"),
    ({"detail": {"o": object()}}, "detail"),
    ({"detail": {"big": "x" * 20_000}}, "detail"),
    ({"detail": {"nul": "a\x00"}}, "detail"),
    ({"detail": {"sur": "\ud800"}}, "detail"),
]


@pytest.mark.parametrize(("override", "field"), BAD)
def test_bad_entries_are_refused_and_write_nothing(
    db: str, override: dict[str, Any], field: str
) -> None:
    jobs = jl.JobManager(db)
    try:
        args: dict[str, Any] = {"actor": "ann", "action": "queue.pause", "target": "q"}
        args.update(override)
        with pytest.raises(jl.JobValidationError) as err:
            jobs.record_audit(**args)
        assert err.value.code == "JOB_INVALID_OPTION"
        assert err.value.params["field"] == field
        assert jobs.audit_log() == []
        for page in ({"limit": 0}, {"offset": -1}, {"limit": True}):
            with pytest.raises(jl.JobValidationError):
                jobs.audit_log(**page)
    finally:
        asyncio.run(jobs.stop())


def test_entries_outlive_the_jobs_they_name(db: str) -> None:
    clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    jobs = jl.JobManager(db, clock=clock)

    @jobs.handler(IDLE, recovery="retry")
    async def idle(ctx: jl.JobContext[dict[str, Any]]) -> None:
        return None

    try:
        job = jobs.enqueue(IDLE, {}, delay=3600)
        asyncio.run(jobs.cancel(job.id))
        jobs.record_audit("ann", "job.cancel", job.id)
        clock.advance(90 * 86400)
        # What `jobledger gc` and the leader's GC run.
        assert jobs._store.gc(round(clock.now().timestamp() * 1000)) == 1
        assert jobs.get(job.id) is None
        assert [e.target for e in jobs.audit_log()] == [job.id]
    finally:
        asyncio.run(jobs.stop())


def _version_14_file(path: str) -> None:
    """A database as the last library before the audit log left it (migrations 1-14)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for migration in load_migrations()[:14]:
            conn.execute("BEGIN IMMEDIATE")
            migrate_module._apply(conn, migration)
            conn.execute("COMMIT")
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 14
    finally:
        conn.close()


def test_a_file_from_before_the_audit_log_reads_as_empty(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    _version_14_file(path)
    with ReadModel(path) as rm:
        assert rm.audit() == []
    # A writer's open migrates it, and the log starts.
    again = jl.JobManager(path)
    try:
        assert again.audit_log() == []
        again.record_audit("ann", "queue.resume", "q")
        assert [e.action for e in again.audit_log()] == ["queue.resume"]
    finally:
        asyncio.run(again.stop())


def test_a_target_with_control_characters_is_recorded_escaped() -> None:
    from jobledger._core.audit import audit_target

    assert audit_target("job\x00id\n") == "job\\x00id\\n"
    assert audit_target("") == "-"
    assert audit_target("q" * 900) == "q" * 500
