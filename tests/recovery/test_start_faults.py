"""A worker that starts while another process holds the lock its registration needs
starts once the lock is free, instead of failing `start()`.

The fault is real: another connection holds the lock the worker row's insert waits on
(SQLite: `BEGIN IMMEDIATE` on a second connection; PostgreSQL: `LOCK TABLE workers IN
EXCLUSIVE MODE`, which lets reads through), past the manager's busy timeout (0.1 s), so
each try of the registration raises DB_BUSY. `bench/chaos.py` found it: a replacement worker started
during a lock hold exited with `start()`'s DB_BUSY (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

import jobledger as jl
from jobledger._runtime import lifecycle
from tests.conftest import db_rows, is_postgres, sql_for
from tests.recovery import arun

WORK = jl.JobType("start.work", int)
HOLD = 0.8  # s the lock is held once the worker starts


@contextmanager
def _lock_held(db: str, seconds: float) -> Iterator[threading.Event]:
    """Hold, from a thread of our own, what registering a worker writes through, for
    `seconds` after the event it yields is set (the lock is taken before it yields)."""
    taken = threading.Event()
    go = threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            if is_postgres(db):
                import psycopg

                from jobledger._storage.open import split_schema

                url = split_schema(db)[0]
                with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
                    conn.execute("LOCK TABLE workers IN EXCLUSIVE MODE")
                    taken.set()
                    go.wait(30)
                    time.sleep(seconds)
                return
            with closing(sqlite3.connect(db, timeout=5.0, isolation_level=None)) as lite:
                lite.execute("BEGIN IMMEDIATE")
                taken.set()
                go.wait(30)
                time.sleep(seconds)
                lite.execute("ROLLBACK")
        except BaseException as exc:
            errors.append(exc)
            taken.set()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert taken.wait(30)
        assert not errors, errors
        yield go
    finally:
        go.set()
        thread.join(30)
    assert not errors, errors


def _manager(db: str) -> jl.JobManager:
    jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, busy_timeout=0.1)

    @jobs.handler(WORK, recovery="retry")
    async def work(ctx: jl.JobContext[int]) -> int:
        return ctx.payload * 2

    return jobs


def _registered(db: str) -> int:
    return int(db_rows(db, sql_for(db, "SELECT count(*) FROM workers"))[0][0])


def test_a_worker_started_under_a_held_lock_starts_once_it_is_free(db: str) -> None:
    asyncio.run(jl.JobManager(db, startup_delay=0).stop())  # the schema, before the lock

    async def body() -> tuple[float, int, jl.JobSnapshot]:
        jobs = _manager(db)
        with _lock_held(db, HOLD) as go:
            began = time.monotonic()
            go.set()
            await jobs.start()
            took = time.monotonic() - began
        try:
            registered = _registered(db)
            snap = await asyncio.wait_for(jobs.enqueue(WORK, 21).finished, 30)
        finally:
            await jobs.stop()
        return took, registered, snap

    took, registered, snap = arun(body)
    # It waited for the lock: each try meets it for the busy timeout, then retries.
    assert took >= HOLD - 0.05
    assert registered == 1
    assert snap.status == "completed"
    assert snap.output == 42


def test_a_worker_gives_up_starting_when_the_lock_outlasts_its_retries(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `REGISTER_RETRY_FOR` (here 0.3 s) `start()` raises the last DB_BUSY, and the
    manager can still be stopped."""
    monkeypatch.setattr(lifecycle, "REGISTER_RETRY_FOR", 0.3)
    asyncio.run(jl.JobManager(db, startup_delay=0).stop())

    async def body() -> jl.JobError:
        jobs = _manager(db)
        with _lock_held(db, 2.0) as go:
            go.set()
            try:
                await jobs.start()
            except jl.JobError as exc:
                error = exc
            else:
                raise AssertionError("start() returned while the lock was held")
            finally:
                await jobs.stop()
        return error

    error = arun(body)
    assert isinstance(error, jl.DatabaseBusy)
    assert error.code == "DB_BUSY"
    assert _registered(db) == 0


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_worker_whose_connection_is_ended_while_it_registers_starts(db: str) -> None:
    """`pg_terminate_backend` of the connection whose registration waits on a lock: the
    write fails mid-transaction (57P01, DB_WRITE_TX_FAILED, "could not be closed
    cleanly"), and the registration, an upsert, is written again on a new connection.
    The chaos run's terminates met a replacement worker in its `start()` this way."""
    import psycopg

    from jobledger._storage.open import split_schema

    asyncio.run(jl.JobManager(db, startup_delay=0).stop())
    url = split_schema(db)[0]
    ended: list[int] = []

    def end_the_waiting_registration() -> None:
        deadline = time.monotonic() + 20
        with psycopg.connect(url, autocommit=True) as admin:
            while time.monotonic() < deadline and not ended:
                rows = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%%workers%%' "
                    "AND application_name LIKE 'jobledger%%'"
                ).fetchall()
                for (pid,) in rows:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    ended.append(int(pid))
                time.sleep(0.02)

    async def body() -> tuple[int, jl.JobSnapshot]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, busy_timeout=10.0)

        @jobs.handler(WORK, recovery="retry")
        async def work(ctx: jl.JobContext[int]) -> int:
            return ctx.payload * 2

        with _lock_held(db, 0.0) as go:
            killer = threading.Thread(target=end_the_waiting_registration)
            killer.start()
            starting = asyncio.ensure_future(jobs.start())
            await asyncio.to_thread(killer.join, 30)
            go.set()  # the lock goes once the registration's connection has been ended
            await starting
        try:
            registered = _registered(db)
            snap = await asyncio.wait_for(jobs.enqueue(WORK, 5).finished, 30)
        finally:
            await jobs.stop()
        return registered, snap

    registered, snap = arun(body)
    assert ended, "no registration was seen waiting on the lock"
    assert registered == 1
    assert (snap.status, snap.output) == ("completed", 10)
