"""The leader lease: terms, expiry, step-down, dead holders, and its lifecycle wiring.

`LeaderLease` runs on both backends (the `store` fixture opens the `db` fixture's
database); the lock file and ":memory:" are SQLite's alone.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger as jl
from jobledger._runtime.leader import LeaderLease
from jobledger._scheduling.hooks import ScheduleHooks
from jobledger._storage.interface import Store
from jobledger._storage.lease import acquire_writer_lease, writer_lock_path_for
from jobledger._storage.open import open_store
from jobledger._storage.sqlite.store import SqliteStore
from tests.conftest import db_rows
from tests.recovery import arun, wait_for_async

HOST = socket.gethostname()
TTL = 10.0


class Clock:
    """Epoch ms that a test moves by hand."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def store(db: str) -> Iterator[Store]:
    s = open_store(db, synchronous="NORMAL", busy_timeout=1.0)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(str(tmp_path / "jobs.db"))
    yield s
    s.close()


def _register(store: Store, worker_id: str, *, host: str = HOST, pid: int = 0) -> None:
    store.register_worker(worker_id, host, pid or os.getpid(), [], 0)


def _lease(store: Store, worker_id: str, clock: Clock) -> LeaderLease:
    return LeaderLease(store, worker_id, HOST, ttl=TTL, renew_every=1.0, now_ms=clock)


def _row(store: Store) -> tuple[str, int, int] | None:
    lease = store.read_lease()
    return None if lease is None else (lease.worker_id, lease.term, lease.expires_at)


def _put_lease(db: str, worker_id: str, term: int, expires_at: int) -> None:
    """A lease row written straight into the table, as another process left it."""
    db_rows(
        db,
        "INSERT INTO leader (id, worker_id, term, expires_at) VALUES (1, ?, ?, ?)",
        (worker_id, term, expires_at),
    )


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_one_holder_at_a_time_and_a_new_term_after_expiry(store: Store) -> None:
    clock = Clock()
    _register(store, "a", host="elsewhere")  # another host: only the ttl can free it
    _register(store, "b")
    a, b = _lease(store, "a", clock), _lease(store, "b", clock)

    assert a.step() is True
    assert b.step() is False
    assert _row(store) == ("a", 1, clock.ms + 10_000)

    clock.ms += 9_999  # a is silent (hung), but its lease still holds
    assert b.step() is False
    clock.ms += 1
    assert b.step() is True
    assert b.term == 2
    assert _row(store) == ("b", 2, clock.ms + 10_000)

    # The old holder wakes up: its renew is a compare-and-set on its term, so it steps down.
    assert a.step() is False
    assert a.term is None
    assert _row(store) == ("b", 2, clock.ms + 10_000)


def test_the_leader_renews_and_keeps_its_term(store: Store) -> None:
    clock = Clock()
    _register(store, "a")
    _register(store, "b")
    a, b = _lease(store, "a", clock), _lease(store, "b", clock)
    assert a.step()
    for _ in range(30):  # 30 s, three times the ttl
        clock.ms += 1_000
        assert a.step()
        assert not b.step()
    row = _row(store)
    assert row is not None
    assert row[:2] == ("a", 1)
    assert row[2] > clock.ms


def test_resign_hands_over_at_once_with_a_new_term(store: Store) -> None:
    clock = Clock()
    _register(store, "a")
    _register(store, "b")
    a, b = _lease(store, "a", clock), _lease(store, "b", clock)
    assert a.step()
    assert not b.step()
    a.resign()
    a.resign()  # idempotent
    assert not a.is_leader
    assert b.step()
    assert b.term == 2


@pytest.mark.parametrize("how", ["pid gone on this host", "stopped", "unregistered"])
def test_a_dead_holder_is_replaced_before_its_lease_expires(
    store: Store, db: str, how: str
) -> None:
    clock = Clock()
    if how == "pid gone on this host":
        _register(store, "a", pid=_dead_pid())
    elif how == "stopped":
        _register(store, "a")
        store.stop_worker("a", 1)
    else:
        pass  # "a" never had a worker row (or recovery already deleted it)
    _register(store, "b")
    _put_lease(db, "a", 7, clock.ms + 600_000)
    b = _lease(store, "b", clock)
    assert b.step()
    assert _row(store) == ("b", 8, clock.ms + 10_000)


def test_a_live_holder_on_this_host_is_not_replaced(store: Store, db: str) -> None:
    clock = Clock()
    _register(store, "a")  # our own pid: alive
    _register(store, "b")
    _put_lease(db, "a", 3, clock.ms + 5_000)
    assert not _lease(store, "b", clock).step()


def test_a_busy_lock_file_defers_the_takeover_to_the_next_tick(sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    clock = Clock()
    _register(store, "b")
    held = acquire_writer_lease(writer_lock_path_for(store.path))
    assert held is not None
    b = _lease(store, "b", clock)
    try:
        assert not b.step()
        assert _row(store) is None
    finally:
        held.release()
    assert b.step()
    assert _row(store) == ("b", 1, clock.ms + 10_000)


def _leads(jobs: jl.JobManager) -> bool:
    # A call, not the property, so the type checker does not narrow across start()/stop().
    return jobs.is_leader


class RecordingHooks(ScheduleHooks):
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def on_leadership(self, leader: bool) -> None:
        self.calls.append(leader)


def test_managers_on_one_file_elect_one_leader_and_hand_over_at_stop(db: str) -> None:
    async def body() -> None:
        first = jl.JobManager(db, startup_delay=0, poll_interval=0.02)
        second = jl.JobManager(db, startup_delay=0, poll_interval=0.02)
        first_hooks, second_hooks = RecordingHooks(), RecordingHooks()
        first._lifecycle.schedules = first_hooks
        second._lifecycle.schedules = second_hooks
        assert not _leads(first), "a manager that never started never leads"

        await first.start()
        assert _leads(first), "a lone manager leads from start() on"
        await second.start()
        assert not _leads(second)
        assert first_hooks.calls == [True]
        assert second_hooks.calls == [False]

        await first.stop()
        assert not _leads(first)
        assert first_hooks.calls == [True, False]
        await wait_for_async(lambda: second.is_leader, timeout=5.0, what="the handover")
        assert second_hooks.calls == [False, True]
        await second.stop()
        assert second_hooks.calls == [False, True, False]

    arun(body)


def test_an_in_memory_manager_always_leads(tmp_path: Path) -> None:
    async def body() -> None:
        jobs = jl.JobManager(":memory:", startup_delay=0)
        async with jobs:
            assert _leads(jobs)
            await asyncio.sleep(0)
        assert not _leads(jobs)

    arun(body)
    assert not list(tmp_path.iterdir())
    assert not Path(":memory:.lock").exists()
