"""Work that arrives around a fault is done even when nothing is written afterwards.

The drain tests of `test_transient_faults.py` keep the workers busy, and each later
write wakes them again, which hid a lost wake-up. Found by `bench/chaos.py --backend
postgres` with terminates and no kills: once the producer stopped, 65 pending and
delayed jobs were never run by four live workers. Two loops lost what a failed read
was for:

* the watcher marked a change seen before applying it, so a change whose apply failed
  (its read met a connection the server had ended) never kicked the queues, and no
  later change came to do it;
* the promoter's read of the next delayed row was unguarded: one failure ended its
  loop, and no delayed row was promoted by that process again.

Faults here are real: `pg_terminate_backend` of every connection of a database of the
test's own, and a table the loop reads renamed away for a moment by another connection
(its reads fail for as long as it is away).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import jobledger as jl
from tests.conftest import db_rows, is_postgres
from tests.recovery import arun, wait_for_async

WORK = jl.JobType("quiet.work", int)


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


@contextmanager
def _warnings_of(name: str) -> Iterator[list[str]]:
    """The messages logged at WARNING or above by logger `name` inside the block: what
    the test waits for instead of a sleep."""
    handler = _Messages()
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield handler.seen
    finally:
        logger.removeHandler(handler)


async def _away_until(db: str, table: str, seen: list[str], logged: str) -> None:
    """Rename `table` away (from a connection of our own) until a message containing
    `logged` is in `seen`, then put it back."""
    db_rows(db, f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        await wait_for_async(
            lambda: any(logged in m for m in seen), timeout=10.0, what=f"{logged!r} logged"
        )
    finally:
        db_rows(db, f"ALTER TABLE {table}_away RENAME TO {table}")


def _worker(url: str) -> tuple[jl.JobManager, list[int]]:
    jobs = jl.JobManager(url, startup_delay=0, poll_interval=0.02)
    ran: list[int] = []

    @jobs.handler(WORK, recovery="retry")
    async def work(ctx: jl.JobContext[int]) -> int:
        ran.append(ctx.payload)
        return ctx.payload

    return jobs, ran


@contextmanager
def _own_database() -> Iterator[tuple[str, Any]]:
    """A database of this test's own (so ending every connection to it touches nothing
    else), its URL and an admin connection to it; dropped afterwards."""
    import psycopg

    from tests.conformance.conftest import PG_DSN, require_postgres

    require_postgres()
    name = f"jl_quiet_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as server:
        server.execute(f'CREATE DATABASE "{name}"')
        try:
            url = urlunsplit(urlsplit(PG_DSN)._replace(path=f"/{name}"))
            with psycopg.connect(url, autocommit=True) as admin:
                yield url, admin
        finally:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _end_every_other_connection(admin: Any) -> int:
    """`pg_terminate_backend` of every other connection to the admin's database, and
    wait until they are gone (a terminated backend exits asynchronously)."""
    others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ended = len(admin.execute(f"SELECT pg_terminate_backend(pid) {others}").fetchall())
    deadline = time.monotonic() + 10
    while admin.execute(f"SELECT count(*) {others}").fetchone()[0]:
        assert time.monotonic() < deadline, "terminated backends still listed after 10 s"
        time.sleep(0.01)
    return ended


@pytest.mark.postgres
def test_a_job_enqueued_while_an_idle_workers_connections_were_ended_runs() -> None:
    """Every connection of an idle worker is ended (its listener, its writer, its pooled
    readers); a job is enqueued then, its NOTIFY reaching no listener; nothing else is
    ever written. The worker notices its lost listener, reads what changed, and runs it."""
    with _own_database() as (url, admin):

        async def body() -> tuple[jl.JobSnapshot, list[int], int]:
            jobs, ran = _worker(url)
            async with jobs:
                first = jobs.enqueue(WORK, 1)
                await asyncio.wait_for(first.finished, 10)
                # No await from here to the enqueue: the worker's loop cannot run between.
                ended = _end_every_other_connection(admin)
                producer = jl.JobManager(url)  # opened after the fault: its own connections
                try:
                    late = producer.enqueue(WORK, 2)

                    def done() -> jl.JobSnapshot | None:
                        snap = producer.get(late.id)
                        return snap if snap is not None and snap.status == "completed" else None

                    snap = await wait_for_async(done, timeout=10.0, what="the late job to run")
                finally:
                    await producer.stop()
            return snap, ran, ended

        snap, ran, ended = arun(body, timeout=60.0)
    assert ended >= 3  # the worker's listener, writer and at least one pooled reader
    assert (snap.status, snap.output) == ("completed", 2)
    assert ran == [1, 2]


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_change_whose_apply_failed_is_applied_again_with_nothing_else_written(
    db: str,
) -> None:
    """A job is enqueued (its NOTIFY reaches the worker) while the table the watcher
    reads first (`queues`) is away: every apply fails until it is back, and putting it
    back writes no change anyone is notified of. The worker still runs the job."""
    assert is_postgres(db)

    async def body() -> tuple[jl.JobSnapshot, list[int]]:
        jobs, ran = _worker(db)
        producer = jl.JobManager(db)
        try:
            async with jobs:
                await asyncio.wait_for(jobs.enqueue(WORK, 1).finished, 10)
                # No await between: the worker sees the enqueue's notification only
                # once the table is away.
                with _warnings_of("jobledger.watcher") as seen:
                    late = producer.enqueue(WORK, 2)
                    await _away_until(db, "queues", seen, "failed to apply a change")
                snap = await asyncio.wait_for(late.finished, 10)
        finally:
            await producer.stop()
        return snap, ran

    snap, ran = arun(body, timeout=60.0)
    assert (snap.status, snap.output) == ("completed", 2)
    assert ran == [1, 2]


def test_the_promoter_outlives_a_failed_read_of_the_next_delayed_row(db: str) -> None:
    """A delayed job falls due while the job table is away (every read of it fails);
    once it is back the job is promoted and run, by the same live worker."""

    async def body() -> tuple[jl.JobSnapshot, list[int]]:
        jobs, ran = _worker(db)
        async with jobs:
            with _warnings_of("jobledger.promoter") as seen:
                handle = jobs.enqueue(WORK, 7, delay=0.2)  # wakes the promoter
                assert handle.snapshot.status == "delayed"
                # Before the fix the loop ended without a word: this wait failed.
                await _away_until(db, "jobs", seen, "next delayed row failed")
            snap = await asyncio.wait_for(handle.finished, 10)
        return snap, ran

    snap, ran = arun(body, timeout=60.0)
    assert (snap.status, snap.output) == ("completed", 7)
    assert ran == [7]
