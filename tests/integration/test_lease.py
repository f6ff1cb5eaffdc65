"""The cross-process writer lease, with real processes (spawn) on a real lock file."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from jobledger._storage.lease import (
    WriterLease,
    acquire_writer_lease,
    writer_lease,
    writer_lock_path_for,
)
from tests.integration import _procs

WAIT = _procs.WAIT


@pytest.fixture
def ctx() -> SpawnContext:
    return multiprocessing.get_context("spawn")


@pytest.fixture
def procs() -> Iterator[list[SpawnProcess]]:
    """Children started by a test; any still alive at teardown are killed."""
    started: list[SpawnProcess] = []
    yield started
    for proc in started:
        if proc.is_alive():
            proc.kill()
        proc.join(WAIT)
        proc.close()


@pytest.fixture
def lock_path(tmp_path: Path) -> str:
    return writer_lock_path_for(str(tmp_path / "queue.db"))


def _held(lease: WriterLease) -> bool:
    # A call, not an attribute read, so mypy does not narrow `held` across releases.
    return lease.held


def _run(
    ctx: SpawnContext, procs: list[SpawnProcess], target: Callable[..., object], *args: object
) -> int:
    proc = ctx.Process(target=target, args=args)
    procs.append(proc)
    proc.start()
    proc.join(WAIT)
    assert proc.exitcode is not None, "child did not finish"
    return proc.exitcode


def _start_holder(
    ctx: SpawnContext, procs: list[SpawnProcess], lock_path: str
) -> tuple[SpawnProcess, Event]:
    acquired = ctx.Event()
    release = ctx.Event()
    proc = ctx.Process(target=_procs.hold_lease, args=(lock_path, acquired, release))
    procs.append(proc)
    proc.start()
    assert acquired.wait(WAIT), f"holder did not get the lease (exit {proc.exitcode})"
    return proc, release


def test_lock_path_sits_beside_the_database() -> None:
    assert writer_lock_path_for("/srv/q/queue.db") == "/srv/q/queue.db.lock"


def test_a_held_lease_makes_a_bounded_wait_return_none_until_released(
    ctx: SpawnContext, procs: list[SpawnProcess], lock_path: str
) -> None:
    holder, release = _start_holder(ctx, procs, lock_path)

    started = time.monotonic()
    assert acquire_writer_lease(lock_path, wait=0.1) is None
    waited = time.monotonic() - started
    assert 0.1 <= waited < 5.0, "the wait is bounded and actually waited"
    assert acquire_writer_lease(lock_path) is None  # non-blocking try

    release.set()
    holder.join(WAIT)
    assert holder.exitcode == 0
    lease = acquire_writer_lease(lock_path)
    assert lease is not None
    lease.release()


def test_a_bounded_wait_succeeds_when_the_holder_releases_within_it(
    ctx: SpawnContext, procs: list[SpawnProcess], lock_path: str
) -> None:
    holder, release = _start_holder(ctx, procs, lock_path)
    polls = 0

    def sleep(seconds: float) -> None:
        nonlocal polls
        polls += 1
        release.set()  # the holder finishes while we poll
        time.sleep(seconds)

    lease = acquire_writer_lease(lock_path, wait=WAIT, retry_delay=0.01, sleep=sleep)
    assert lease is not None
    assert polls >= 1
    lease.release()
    holder.join(WAIT)
    assert holder.exitcode == 0


def test_sigkill_of_the_holder_frees_the_lease_at_once(
    ctx: SpawnContext, procs: list[SpawnProcess], lock_path: str
) -> None:
    holder, _ = _start_holder(ctx, procs, lock_path)
    assert acquire_writer_lease(lock_path) is None

    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(WAIT)
    assert holder.exitcode == -signal.SIGKILL

    lease = acquire_writer_lease(lock_path)  # no TTL to wait out: the OS dropped the lock
    assert lease is not None
    lease.release()


def test_a_second_connection_in_the_same_process_is_refused(lock_path: str) -> None:
    first = acquire_writer_lease(lock_path)
    assert first is not None
    try:
        assert acquire_writer_lease(lock_path) is None
    finally:
        first.release()
    second = acquire_writer_lease(lock_path)
    assert second is not None
    second.release()


def test_release_is_idempotent_and_the_lease_is_a_context_manager(lock_path: str) -> None:
    lease = acquire_writer_lease(lock_path)
    assert lease is not None
    with lease as held:
        assert held is lease
        assert _held(lease)
    assert not _held(lease)
    lease.release()  # again: no error
    assert not _held(lease)
    again = acquire_writer_lease(lock_path)
    assert again is not None
    again.release()


def test_release_works_from_another_thread(lock_path: str) -> None:
    lease = acquire_writer_lease(lock_path)
    assert lease is not None
    errors: list[BaseException] = []

    def release() -> None:
        try:
            lease.release()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=release)
    thread.start()
    thread.join(WAIT)
    assert errors == []
    again = acquire_writer_lease(lock_path)
    assert again is not None
    again.release()


def test_the_bounded_wait_polls_every_retry_delay(lock_path: str) -> None:
    holder = acquire_writer_lease(lock_path)
    assert holder is not None
    now = 0.0
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        nonlocal now
        sleeps.append(seconds)
        now += seconds

    try:
        lease = acquire_writer_lease(
            lock_path, wait=0.1, retry_delay=0.025, monotonic=lambda: now, sleep=sleep
        )
    finally:
        holder.release()
    assert lease is None
    assert sleeps == pytest.approx([0.025] * 4)


def test_errors_other_than_busy_propagate(tmp_path: Path) -> None:
    not_a_file = tmp_path / "dir.lock"
    not_a_file.mkdir()
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        acquire_writer_lease(str(not_a_file))


def test_the_lock_file_stays_an_empty_rollback_journal_database(lock_path: str) -> None:
    lease = acquire_writer_lease(lock_path)
    assert lease is not None
    try:
        probe = sqlite3.connect(lock_path, isolation_level=None, timeout=0.0)
        try:
            assert probe.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        finally:
            probe.close()
    finally:
        lease.release()
    assert os.path.getsize(lock_path) == 0


def test_writer_lease_acquire_mode_holds_for_the_block(lock_path: str) -> None:
    with writer_lease(lock_path) as lease:
        assert lease is not None
        assert _held(lease)
        assert acquire_writer_lease(lock_path) is None
    assert not _held(lease)
    after = acquire_writer_lease(lock_path)
    assert after is not None
    after.release()


def test_writer_lease_acquire_mode_yields_none_on_contention(lock_path: str) -> None:
    holder = acquire_writer_lease(lock_path)
    assert holder is not None
    try:
        with writer_lease(lock_path, wait=0.05) as lease:
            assert lease is None
        assert holder.held
    finally:
        holder.release()


def test_caller_held_mode_neither_acquires_nor_releases(lock_path: str) -> None:
    holder = acquire_writer_lease(lock_path)
    assert holder is not None
    try:
        with writer_lease(lock_path, mode="caller-held") as lease:
            assert isinstance(lease, WriterLease)
            assert lease.held
            lease.release()  # a no-op: the caller owns the real lease
            assert lease.held
        assert acquire_writer_lease(lock_path) is None, "the caller's lease is still held"
    finally:
        holder.release()


def test_unknown_lease_modes_are_rejected(lock_path: str) -> None:
    with (
        pytest.raises(ValueError, match="unknown writer lease mode"),
        writer_lease(lock_path, mode="borrowed"),  # type: ignore[arg-type]
    ):
        pass
    assert not os.path.exists(lock_path)


def test_closing_any_plain_descriptor_to_the_lock_file_drops_the_lease(
    ctx: SpawnContext, procs: list[SpawnProcess], lock_path: str
) -> None:
    """Pins the POSIX-lock hazard the module docstring warns about."""
    lease = acquire_writer_lease(lock_path)
    assert lease is not None
    try:
        assert _run(ctx, procs, _procs.try_lease, lock_path) == _procs.EXIT_BUSY
        with open(lock_path, "rb"):
            pass  # the close() silently cancels this process's locks on the file
        assert _run(ctx, procs, _procs.try_lease, lock_path) == 0
    finally:
        lease.release()
