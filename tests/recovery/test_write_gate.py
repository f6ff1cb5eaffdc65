"""The write gate: a cross-process queue for jobledger's write transactions (a `flock` on
`<db>.gate`), and the claim that reads before it writes.

The other side is a real process holding the real lock file (and, where a test needs it,
SQLite's write lock on the real database), so what is tested is the kernel's and
SQLite's behaviour, not a stand-in. Waits are bounded polls; the timed bounds are
generous for a loaded machine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import jobledger as jl
from jobledger._runtime.engine import DispatchQueue
from jobledger._storage.sqlite import connections
from jobledger._storage.sqlite.connections import (
    CHECKPOINT_EVERY_CHANGES,
    WriteGate,
    WriterConnection,
    open_writer,
    write_gate_path_for,
)
from jobledger._storage.sqlite.store import SqliteStore
from jobledger._storage.tx import write_transaction
from jobledger.errors import DatabaseBusy
from tests.recovery import wait_for

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")

NOOP = jl.JobType("gate.noop", dict)

# A process that holds the gate (and, with `sqlite`, SQLite's write lock too) until its
# stdin closes or it is killed. It says "held" once it holds them.
HOLDER = """
import fcntl, os, sqlite3, sys
db = sys.argv[1]
fd = os.open(db + ".gate", os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
if sys.argv[2] == "sqlite":
    conn = sqlite3.connect(db, isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def holder(db: str, *, sqlite: bool = False) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db, "sqlite" if sqlite else "gate"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(30)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def _store(db: str, busy_timeout: float = 1.0) -> SqliteStore:
    store = SqliteStore(db, busy_timeout=busy_timeout)
    store.write(lambda c: c.execute("SELECT 1"), "warm")  # opens the gate's file
    return store


def _gate(store: SqliteStore) -> WriteGate:
    gate = getattr(store.conn, "write_gate", None)
    assert isinstance(gate, WriteGate)
    return gate


def _held(gate: WriteGate) -> bool:
    return gate.held


# The two ways a write takes the gate: a transaction around work (`write`), and one
# statement in SQLite's autocommit (`write_statement`, a single enqueue's path).
Write = Callable[[SqliteStore, str], object]
WRITES: dict[str, Write] = {
    "transaction": lambda store, sql: store.write(lambda c: c.execute(sql), "t"),
    "statement": lambda store, sql: store.write_statement(sql, (), "t"),
}
each_write = pytest.mark.parametrize("write_sql", list(WRITES.values()), ids=list(WRITES))


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "jobledger-gate"]


def test_the_writer_carries_a_gate_on_a_side_file(db_path: str) -> None:
    store = _store(db_path)
    try:
        gate = _gate(store)
        assert gate.path == write_gate_path_for(db_path) == db_path + ".gate"
        assert os.path.exists(gate.path)
        assert not gate.held, "held only inside a transaction"
    finally:
        store.close()
    memory = open_writer(":memory:")
    try:
        assert getattr(memory, "write_gate", None) is None
    finally:
        memory.close()


@each_write
def test_a_writer_waits_for_another_process_and_starts_when_it_lets_go(
    db_path: str, write_sql: Write
) -> None:
    store = _store(db_path, busy_timeout=20.0)
    try:
        with holder(db_path) as proc:
            done = threading.Event()
            ended: list[float] = []

            def write() -> None:
                write_sql(store, "CREATE TABLE t (x)")
                ended.append(time.monotonic())
                done.set()

            thread = threading.Thread(target=write)
            thread.start()
            assert not done.wait(0.2), "the write went ahead while another process held the gate"
            assert proc.stdin is not None
            released = time.monotonic()
            proc.stdin.close()  # the holder exits: the OS drops its lock
            proc.wait(30)
            assert done.wait(30)
            thread.join(30)
        # Woken by the kernel, not by a growing sleep: well under SQLite's 100 ms steps
        # even on a loaded machine (generous bound).
        assert ended[0] - released < 1.0
    finally:
        store.close()


def test_a_killed_holder_frees_the_gate_at_once(db_path: str) -> None:
    store = _store(db_path, busy_timeout=20.0)
    try:
        with holder(db_path, sqlite=True) as proc:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            started = time.monotonic()
            store.write(lambda c: c.execute("CREATE TABLE t (x)"), "t")
            assert time.monotonic() - started < 5.0
    finally:
        store.close()


def test_a_gate_held_past_the_busy_timeout_is_skipped_and_sqlite_decides(db_path: str) -> None:
    """A gate holder that is not writing (hung before BEGIN, say) costs a waiter its busy
    timeout, then the write goes ahead under SQLite's own lock."""
    store = _store(db_path, busy_timeout=0.2)
    try:
        with holder(db_path):
            started = time.monotonic()
            store.write(lambda c: c.execute("CREATE TABLE t (x)"), "t")
            took = time.monotonic() - started
        assert 0.15 <= took < 5.0
        assert not _gate(store).held
    finally:
        store.close()


@each_write
def test_busy_reaches_the_caller_after_one_busy_timeout_not_two(
    db_path: str, write_sql: Write
) -> None:
    """Gate and SQLite lock both held elsewhere: DB_BUSY after about busy_timeout; the
    gate's wait is taken out of what BEGIN (or the lone statement) may still wait."""
    store = _store(db_path, busy_timeout=0.5)
    try:
        with holder(db_path, sqlite=True):
            started = time.monotonic()
            with pytest.raises(DatabaseBusy) as info:
                write_sql(store, "CREATE TABLE t (x)")
            took = time.monotonic() - started
        assert 0.4 <= took < 0.9, took
        assert info.value.params["attempts"] == 1
        assert not _gate(store).held
        write_sql(store, "CREATE TABLE t (x)")  # and it still works
    finally:
        store.close()


def test_two_gates_in_one_process_exclude_each_other(db_path: str) -> None:
    a = WriteGate(write_gate_path_for(db_path), 0.05)
    b = WriteGate(write_gate_path_for(db_path), 0.05)
    try:
        assert a.acquire() == 0.05  # the fast path: the whole timeout is left
        assert b.acquire() == 0.0
        assert not _held(b)
        with pytest.raises(RuntimeError):
            a.acquire()
        a.release()
        # b's helper may still take and drop the lock it no longer wants; b gets it soon.
        assert wait_for(lambda: b.acquire() > 0.0, timeout=5.0, what="b to take the gate")
        assert _held(b)
        b.release()
    finally:
        a.close()
        b.close()


def test_a_late_grant_is_given_back(db_path: str) -> None:
    """A waiter that gave up must not keep the lock its helper obtains afterwards."""
    a = WriteGate(write_gate_path_for(db_path), 5.0)
    b = WriteGate(write_gate_path_for(db_path), 0.05)
    c = WriteGate(write_gate_path_for(db_path), 5.0)
    try:
        a.acquire()
        assert b.acquire() == 0.0  # its helper still blocks in flock
        a.release()
        assert c.acquire() > 0.0, "the gate stayed with a waiter that had given up"
        c.release()
    finally:
        for gate in (a, b, c):
            gate.close()


def test_closing_the_writer_ends_its_helper_thread(db_path: str) -> None:
    before = set(_helpers())
    store = _store(db_path, busy_timeout=0.05)
    with holder(db_path):
        store.write(lambda c: c.execute("CREATE TABLE t (x)"), "t")  # waits: a helper starts
        mine = [t for t in _helpers() if t not in before]
        assert mine
    store.close()
    for thread in mine:
        thread.join(10)
        assert not thread.is_alive()


def test_a_claim_with_nothing_to_take_does_not_wait_for_the_write_lock(db_path: str) -> None:
    """Caps full or nothing due: the claim answers from a read while another process
    holds the write lock (it used to queue for it)."""
    jobs = jl.JobManager(db_path, startup_delay=0)
    jobs.enqueue_many(NOOP, [{}, {}])
    store = SqliteStore(db_path, busy_timeout=5.0)
    try:
        first = store.claim(
            NOOP.name, queue_cap=1, global_cap=5, limit=5, now_ms=_now(), worker_id="w",
            types=(NOOP.name,),
        )  # fmt: skip
        assert len(first.jobs) == 1
        with holder(db_path, sqlite=True):
            started = time.monotonic()
            full = store.claim(
                NOOP.name, queue_cap=1, global_cap=5, limit=5, now_ms=_now(), worker_id="w",
                types=(NOOP.name,),
            )  # fmt: skip
            blocked = store.claim(
                NOOP.name, queue_cap=5, global_cap=1, limit=5, now_ms=_now(), worker_id="w",
                types=(NOOP.name,),
            )  # fmt: skip
            idle = store.claim(
                "empty", queue_cap=5, global_cap=5, limit=5, now_ms=_now(), worker_id="w",
                types=(NOOP.name,),
            )  # fmt: skip
            assert time.monotonic() - started < 2.0
        assert (full.jobs, full.global_blocked) == ([], False)
        assert (blocked.jobs, blocked.global_blocked) == ([], True)
        assert (idle.jobs, idle.global_blocked) == ([], False)
    finally:
        store.close()
        jobs._store.close()


def test_a_claim_sees_a_job_another_connection_just_committed(db_path: str) -> None:
    """The read before the claim must not answer from an old snapshot."""
    store = SqliteStore(db_path)
    producer = jl.JobManager(db_path, startup_delay=0)
    try:
        empty = store.claim(
            NOOP.name, queue_cap=5, global_cap=5, limit=5, now_ms=_now(), worker_id="w",
            types=(NOOP.name,),
        )  # fmt: skip
        assert empty.jobs == []
        for n in range(1, 6):
            job_id = producer.enqueue(NOOP, {}).id
            got = store.claim(
                NOOP.name, queue_cap=5, global_cap=5, limit=5, now_ms=_now(), worker_id="w",
                types=(NOOP.name,),
            )  # fmt: skip
            assert [j.id for j in got.jobs] == [job_id], n
    finally:
        store.close()
        producer._store.close()


def test_four_processes_share_the_gate_and_the_caps(db_path: str, tmp_path: Path) -> None:
    """Four worker processes and a producer writing at once: every job runs exactly once,
    no write fails, and the gate file is the one they all used."""
    from tests.recovery import read_markers, spawn, status_counts

    producer = jl.JobManager(db_path, startup_delay=0)
    children = [spawn(db_path, "work", tmp_path, f"w{n}", "--concurrency", "8") for n in range(4)]
    try:
        for child in children:
            child.wait_started()
        from tests.recovery.worker_proc import BULK

        ids = [producer.enqueue(BULK, n).id for n in range(300)]
        wait_for(
            lambda: status_counts(db_path).get("completed", 0) == len(ids),
            what="all jobs completed",
        )
        runs = [m for child in children for m in read_markers(child.markers)]
        assert sorted(m[1] for m in runs) == sorted(ids)
        assert os.path.exists(write_gate_path_for(db_path))
    finally:
        for child in children:
            assert child.terminate() == 0, child.output()
        producer._store.close()
    for child in children:
        assert "database is locked" not in child.output()


def _now() -> int:
    return int(time.time() * 1000)


def test_sqlite_connections_without_a_gate_are_unchanged(db_path: str) -> None:
    """A plain connection (another program, an older jobledger) still meets SQLite's lock."""
    store = _store(db_path, busy_timeout=5.0)
    other = sqlite3.connect(db_path, isolation_level=None, timeout=5.0)
    try:
        other.execute("BEGIN IMMEDIATE")
        done = threading.Event()

        def write() -> None:
            store.write(lambda c: c.execute("CREATE TABLE t (x)"), "t")
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert not done.wait(0.2)
        other.execute("COMMIT")
        assert done.wait(30)
        thread.join(30)
    finally:
        other.close()
        store.close()


# -- dispatch next to a busy process ---------------------------------------------------
#
# Two started managers on one file in this process behave as two processes would here:
# each has its own connections and gate descriptor, and sees the other's commits only
# through PRAGMA data_version.

CAP = 2


def _pair(db_path: str) -> tuple[jl.JobManager, jl.JobManager, list[str], asyncio.Event]:
    release = asyncio.Event()
    ran: list[str] = []

    def manager(name: str) -> jl.JobManager:
        jobs = jl.JobManager(db_path, startup_delay=0, poll_interval=0.01)

        @jobs.handler(NOOP, recovery="retry", concurrency=CAP)
        async def hold(ctx: jl.JobContext[dict[str, object]]) -> None:
            ran.append(name)
            await release.wait()

        return jobs

    return manager("a"), manager("b"), ran, release


def test_a_process_turned_away_by_the_queue_cap_claims_once_slots_stay_free(
    db_path: str,
) -> None:
    """The confirming wait is bounded: a worker that was turned away takes the work as
    soon as the busy one leaves it (here: paused), within a few polls."""

    async def main() -> None:
        a, b, ran, release = _pair(db_path)
        async with a:
            handles = [a.enqueue(NOOP, {}) for _ in range(CAP)]
            await _until(lambda: ran.count("a") == CAP)
            async with b:
                extra = b.enqueue(NOOP, {})  # b's own job: b asks at once, the cap says no
                await _until(lambda: _queue(b).turned_away)
                hold = a.pause()  # a will not claim again
                release.set()  # a's jobs finish; their slots stay free
                snap = await asyncio.wait_for(extra.finished, 10)
                assert snap.status == "completed"
                assert ran.count("b") == 1
                hold.dispose()
            for h in handles:
                assert (await h.finished).status == "completed"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_only_a_queue_cap_held_elsewhere_turns_a_queue_away(db_path: str) -> None:
    """An empty queue is not a reason to wait (the next cross-process job would start
    later for nothing); a cap held by another worker is, and a local enqueue clears it."""

    async def main() -> None:
        a, b, ran, release = _pair(db_path)
        async with b:
            release.set()
            await b.enqueue(NOOP, {}).finished
            await _until(lambda: b._engine.queues[NOOP.name].running == 0)
            b._engine.kick(NOOP.name)  # a claim on the empty queue
            await asyncio.sleep(0.05)
            assert not _queue(b).turned_away
            release.clear()
            async with a:
                held = [a.enqueue(NOOP, {}) for _ in range(CAP)]
                await _until(lambda: ran.count("a") == CAP)
                b._engine.kick(NOOP.name)
                await _until(lambda: _queue(b).turned_away)
                mine = b.enqueue(NOOP, {})
                assert not _queue(b).turned_away, "a local enqueue clears it before the kick"
                release.set()
                for h in [*held, mine]:
                    assert (await h.finished).status == "completed"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_global_cap_refusal_is_never_held_back(db_path: str) -> None:
    """The global cap turned the queue away: another queue holds the slots, and this one
    must compete for the next free one at once (passing the turn across processes)."""

    async def main() -> None:
        release = asyncio.Event()
        a = jl.JobManager(db_path, startup_delay=0, poll_interval=0.01, global_max_concurrency=1)
        b = jl.JobManager(db_path, startup_delay=0, poll_interval=0.01, global_max_concurrency=1)
        other = jl.JobType("gate.other", dict)

        @a.handler(NOOP, recovery="retry", concurrency=CAP)
        async def hold(ctx: jl.JobContext[dict[str, object]]) -> None:
            await release.wait()

        @b.handler(other, recovery="retry", concurrency=CAP)
        async def run_other(ctx: jl.JobContext[dict[str, object]]) -> None:
            return None

        async with a, b:
            first = a.enqueue(NOOP, {})
            await _until(lambda: a._engine.inflight)
            waiting = b.enqueue(other, {})
            await _until(lambda: other.name in b._engine.queues and b._engine.global_blocked)
            assert not b._engine.queues[other.name].turned_away
            release.set()
            assert (await asyncio.wait_for(waiting.finished, 10)).status == "completed"
            assert (await first.finished).status == "completed"

    asyncio.run(asyncio.wait_for(main(), 60))


def _queue(jobs: jl.JobManager) -> DispatchQueue:
    return jobs._engine.queues[NOOP.name]


async def _until(pred: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.005)


def _gated_writer(path: str) -> WriterConnection:
    """A gated writer on a fresh WAL file with one table `t (n)`."""
    conn = open_writer(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (n INTEGER)")
    return conn


def test_a_gated_writer_checkpoints_on_its_own_thread_never_inside_commit(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "jobs.db")
    conn = _gated_writer(path)
    checkpointer = conn.checkpointer
    assert checkpointer is not None
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    try:
        for n in range(CHECKPOINT_EVERY_CHANGES - 1):
            with write_transaction(conn, "one row"):
                conn.execute("INSERT INTO t VALUES (?)", (n,))
        assert checkpointer.done == 0
        with write_transaction(conn, "the row that makes it due"):
            conn.execute("INSERT INTO t VALUES (0)")
        wait_for(lambda: checkpointer.done == 1)
        frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1:]
        assert frames == copied > 0  # everything the checkpoint found was copied
    finally:
        conn.close()
    thread = checkpointer._thread
    assert thread is not None
    assert not thread.is_alive()  # close() stopped it


def _wal_frames(path: str) -> int:
    """Frames in the WAL now (a PASSIVE checkpoint reports them; it copies them too)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


def test_a_checkpoint_beside_a_busy_writer_lets_the_wal_start_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite reuses the WAL from its first frame only when a writer finds every frame
    # copied. A checkpoint running beside the writers always missed the frames of the
    # transaction in flight as it ended, so the WAL grew for as long as writes went on.
    # Here another writer's transaction is open while the bulk copy runs; the copy under
    # the gate must take its frames too, so that the next write starts the WAL over.
    path = str(tmp_path / "jobs.db")
    conn = _gated_writer(path)
    other = open_writer(path)
    copies: list[str] = []
    real = connections._checkpoint

    def bulk_beside_a_transaction(ckpt: sqlite3.Connection) -> None:
        copies.append("copy")
        if len(copies) > 1:
            real(ckpt)
            return
        # The bulk copy: a writer's transaction is open while it runs, and commits after.
        with write_transaction(other, "in flight"):
            other.execute("INSERT INTO t VALUES (-1)")
            real(ckpt)

    monkeypatch.setattr(connections, "_checkpoint", bulk_beside_a_transaction)
    checkpointer = conn.checkpointer
    assert checkpointer is not None
    try:
        for n in range(CHECKPOINT_EVERY_CHANGES):
            with write_transaction(conn, "one row"):
                conn.execute("INSERT INTO t VALUES (?)", (n,))
        wait_for(lambda: checkpointer.done == 1)
        assert copies == ["copy", "copy"]  # the bulk, then the tail under the gate
        with write_transaction(conn, "the first write after the checkpoint"):
            conn.execute("INSERT INTO t VALUES (0)")
        assert _wal_frames(path) == 1  # started over: only that write's page
    finally:
        other.close()
        conn.close()


def test_an_unexpected_error_in_a_checkpoint_does_not_end_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "jobs.db")
    conn = _gated_writer(path)
    real = connections._checkpoint
    calls: list[int] = []

    def fails_once(ckpt: sqlite3.Connection) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the checkpoint")
        real(ckpt)

    monkeypatch.setattr(connections, "_checkpoint", fails_once)
    checkpointer = conn.checkpointer
    assert checkpointer is not None
    try:
        checkpointer.request()
        wait_for(lambda: len(calls) == 1)
        checkpointer.request()
        wait_for(lambda: checkpointer.done == 1)
        thread = checkpointer._thread
        assert thread is not None
        assert thread.is_alive()
    finally:
        conn.close()
    assert "a bug in the checkpoint" in caplog.text
