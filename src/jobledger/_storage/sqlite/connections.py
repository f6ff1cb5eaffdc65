"""SQLite connections, one kind per role.

| role      | busy timeout        | used for                                            |
|-----------|---------------------|-----------------------------------------------------|
| writer    | short (default 1 s) | every write, through `tx.with_write_tx`             |
| reader    | long (5 s)          | observers: get/list/count, dashboard, CLI           |
| heartbeat | 0                   | liveness rows; must never stall the event loop      |

Every connection is opened with `isolation_level=None`: Python never begins or commits a
transaction by itself, so `BEGIN IMMEDIATE` in `tx.run_write_transaction` is the only way
a write transaction starts. WAL is switched on once, when the schema is created (under the
lease, see `migrate.py`); here it is only checked. Routine checkpoints stay PASSIVE
(SQLite's automatic checkpoint); `checkpoint_truncate` is the explicit maintenance call.

Connections are never shared across `fork()`: each process opens its own.

The writer also carries a `WriteGate` (`write_gate_path_for(db)`, a side file): every
jobledger write transaction on the file, in any process, holds it from before `BEGIN
IMMEDIATE` to after `COMMIT`, so writers queue in the kernel and the next one starts when
the last one ends. See `WriteGate` for why SQLite's own wait is not enough.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from typing import Literal
from urllib.parse import quote

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writers wait in SQLite's busy handler
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "READER_BUSY_TIMEOUT",
    "Synchronous",
    "WriteGate",
    "WriterConnection",
    "checkpoint_passive",
    "checkpoint_truncate",
    "open_heartbeat",
    "open_reader",
    "open_writer",
    "write_gate_path_for",
]

log = logging.getLogger("jobledger.storage")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
READER_BUSY_TIMEOUT = 5.0
# The automatic checkpoint runs inside the COMMIT that crosses it, on the caller's
# thread, and waits for two fsyncs even at synchronous=NORMAL. A job write dirties ~7
# pages (the row and its indexes), so SQLite's default of 1000 pages checkpointed every
# ~140 enqueues; 4000 pages (a WAL of up to ~16 MB) makes that four times rarer
# (single enqueue +20-40% on the bench machine, see docs/benchmarks.md).
WAL_AUTOCHECKPOINT_PAGES = 4000
# A gated writer checkpoints itself instead, after its gate is released: SQLite's
# automatic checkpoint runs inside COMMIT (50-90 ms on the bench machine), which would
# hold the gate, and so every other writer, through it. Rows changed stand in for pages
# (a single-row commit appends a few pages, a batch far fewer per row): 10,000 single
# enqueues left a WAL of ~20 MB, about the automatic threshold above. Each checkpoint
# ends by holding the gate through two fsyncs (`Checkpointer._tail`), a stall of the
# writer's loop; at 1,000 rows a batched drain paid it every ~12 ms, and 2,000 drained
# ~15% faster (docs/benchmarks.md, twenty-fourth round).
CHECKPOINT_EVERY_CHANGES = 2000


def write_gate_path_for(db_path: str) -> str:
    """The side file whose lock queues jobledger's writers to `db_path`."""
    return db_path + ".gate"


class WriteGate:
    """A cross-process mutex for the write transactions on one database file.

    Why: SQLite's wait for its write lock is the busy handler, which sleeps 1, 2, 5, 10,
    15, 20, 25, ... ms between tries. A jobledger write holds the lock for ~1 ms, so a
    writer that finds it taken usually sleeps well past its release, and while it sleeps
    its event loop is blocked and its running jobs cannot finalize; with several worker
    processes that lost time grew with every process added, and a user's `enqueue` next
    to busy workers waited several ms per call. Here a waiter is woken by the kernel the
    moment the holder lets go.

    Mechanism: `flock` on the side file (the OS drops it when its holder dies, even by
    SIGKILL). The first try never blocks. On contention a helper thread blocks in `flock`
    on a second descriptor of its own, and the caller waits for it at most `timeout`
    (the connection's busy timeout); a grant that arrives after the caller gave up is
    released at once. The gate only orders writers that take it; SQLite's lock stays
    what keeps writes exclusive (writers that do not take the gate, such as heartbeats,
    another program or an older jobledger, still meet SQLite's busy handler), so a gate
    that cannot be opened or used is skipped, never an error.

    `flock` locks belong to an open file description: two gates on one file exclude each
    other even inside one process, and the gate's own files are never opened by anything
    else, so the POSIX-lock hazard of `lease.py` cannot reach SQLite's locks through it.
    Callers serialise their use of one gate (one transaction at a time per connection).
    """

    # A helper that had nothing to do for this long exits (a gate dropped without close()
    # leaves no thread behind); the next contended acquire starts a new one.
    HELPER_IDLE_EXIT = 1.0

    def __init__(self, path: str, timeout: float) -> None:
        if fcntl is None:
            raise OSError("no flock on this platform")
        self.path = path
        self.timeout = timeout
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._close_fd = weakref.finalize(self, _close_quietly, self._fd)
        self._held = -1  # the descriptor whose lock this gate holds now, -1 when free
        self._cond = threading.Condition(threading.Lock())
        self._want = False  # a caller waits in acquire()
        self._granted = False  # the helper's descriptor took the lock for that caller
        self._helper: threading.Thread | None = None
        self._helper_fd = -1
        self._closed = False

    @property
    def held(self) -> bool:
        return self._held != -1

    def acquire(self) -> float:
        """Take the gate; returns the seconds left of `timeout` for SQLite's own wait.

        Not taken (`held` is False) with 0.0 left: another writer kept it all along. Not
        taken with the whole timeout left: the gate cannot wait (closed or broken).
        """
        if self._held != -1:
            raise RuntimeError(f"write gate {self.path!r} is already held by this connection")
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            self._held = self._fd
            return self.timeout
        started = time.monotonic()
        granted = self._wait()
        if granted is None:
            return self.timeout  # no helper to wait with: SQLite's busy handler waits
        if not granted:
            return 0.0
        return max(self.timeout - (time.monotonic() - started), 0.0)

    def _wait(self) -> bool | None:
        """True: granted; False: not within `timeout`; None: the gate cannot wait."""
        with self._cond:
            if self._closed:
                return None
            if self._helper is None:
                self._helper_fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
                self._helper = threading.Thread(
                    target=self._serve, args=(self._helper_fd,), name="jobledger-gate", daemon=True
                )
                self._helper.start()
            self._want = True
            self._cond.notify_all()
            granted = self._cond.wait_for(lambda: self._granted, self.timeout)
            self._want = False
            if granted:
                self._granted = False
                self._held = self._helper_fd
            return granted

    def _serve(self, fd: int) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    busy = cond.wait_for(self._helper_needed, self.HELPER_IDLE_EXIT)
                    # Idle: exit, unless a caller still holds the lock by this descriptor
                    # (closing it would drop the lock). Closed: the connection is gone.
                    if self._closed or (not busy and self._held != fd):
                        self._helper = None
                        os.close(fd)
                        return
                    if not busy:
                        continue
                fcntl.flock(fd, fcntl.LOCK_EX)  # blocks, without the GIL
                with cond:
                    if self._want and not self._closed:
                        self._granted = True
                        cond.notify_all()
                        continue
                fcntl.flock(fd, fcntl.LOCK_UN)  # the caller gave up meanwhile
        except Exception:  # pragma: no cover - a broken gate only costs the fast wake-up
            log.debug("write gate helper for %s failed", self.path, exc_info=True)
            with cond:
                self._helper = None
                self._closed = True
                _close_quietly(fd)

    def _helper_needed(self) -> bool:
        return self._closed or (self._want and not self._granted)

    def busy(self) -> bool:
        """Whether a writer (this one or any other) is inside a transaction right now.

        A hint, read by taking and dropping the lock at once; callers serialise it with
        their transactions on this gate, like `acquire`.
        """
        if self._held != -1:
            return True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        return False

    def release(self) -> None:
        fd, self._held = self._held, -1
        if fd != -1:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release and close (the helper closes its own descriptor as it exits)."""
        if self._held != -1:
            try:
                self.release()
            except OSError:
                pass
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._close_fd()


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Checkpointer:
    """PASSIVE checkpoints of one file on a thread and a connection of their own.

    A checkpoint waits for two fsyncs even at `synchronous=NORMAL` (about 45 ms on the
    bench machine, once per `CHECKPOINT_EVERY_CHANGES` rows); run by the writer, the
    caller whose write made it due paid for it, and its event loop stood still meanwhile.
    sqlite3 lets the GIL go while SQLite works, so here the wait overlaps the writer's
    next transactions. The thread starts on the first request and again in a forked child
    (threads do not survive `fork`); its connection is opened and closed on that thread.

    Invariant: a checkpoint ends with the whole WAL copied back. SQLite starts the WAL
    over from its first frame only when a writer finds every frame copied; under steady
    writes a checkpoint beside the writers nearly always missed the frames of the
    transaction in flight as it ended, so the WAL grew without bound (44 MB after 3,000
    enqueues), and every commit appended to a growing file, whose fdatasync must also
    write the file's size (single enqueue at FULL ran at 0.64x huey's). So the bulk is
    copied beside the writers, and then the few frames they added are copied under the
    write gate, which holds writers back for that short tail only. PASSIVE never waits
    for readers.
    """

    def __init__(
        self, path: str, synchronous: Synchronous, busy_timeout: float, gate_path: str
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.gate_path = gate_path
        self.done = 0  # checkpoints run, for tests and diagnostics
        self._due = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = 0

    def request(self) -> None:
        if self._closed:
            return
        if self._thread is None or self._pid != os.getpid():
            self._pid = os.getpid()
            self._due = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._due,), name="jobledger-checkpoint", daemon=True
            )
            self._thread.start()
        self._due.set()

    def _run(self, due: threading.Event) -> None:
        conn: sqlite3.Connection | None = None
        gate: WriteGate | None = None
        try:
            while True:
                due.wait()
                due.clear()
                if self._closed:
                    return
                try:
                    if conn is None:
                        conn = _connect(self.path, busy_timeout=self.busy_timeout)
                        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                    if gate is None:
                        gate = WriteGate(self.gate_path, self.busy_timeout)
                    _checkpoint(conn)  # the bulk, beside the writers
                    self._tail(conn, gate)
                    self.done += 1
                except (sqlite3.Error, OSError):
                    log.debug("checkpoint failed; the next one will catch up", exc_info=True)
                except Exception:  # a bug must not end the thread: the WAL would grow
                    log.warning("checkpoint failed; the next one will try again", exc_info=True)
        finally:
            if gate is not None:
                gate.close()
            if conn is not None:
                conn.close()

    def _tail(self, conn: sqlite3.Connection, gate: WriteGate) -> None:
        """Copy what the writers appended during the bulk copy, with them held back.

        Always under the gate: a bulk copy that found every frame copied may have ended
        while a writer was inside a transaction, whose frames came after it.
        """
        gate.acquire()
        if not gate.held:
            return  # the writers kept the gate all along; the next checkpoint catches up
        try:
            _checkpoint(conn)
        finally:
            gate.release()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread, after the checkpoint it may be running."""
        self._closed = True
        thread = self._thread
        if thread is not None and self._pid == os.getpid():
            self._due.set()
            thread.join(timeout)


class WriterConnection(sqlite3.Connection):
    """The writer's connection: a plain connection that also carries its `WriteGate`."""

    write_gate: WriteGate | None = None
    checkpointer: Checkpointer | None = None  # set together with write_gate
    _checkpointed_at = 0  # total_changes at the last checkpoint_if_due

    def checkpoint_if_due(self) -> None:
        """Ask for a PASSIVE checkpoint once CHECKPOINT_EVERY_CHANGES rows changed since
        the last request. Called outside any transaction and outside the gate."""
        changes = self.total_changes
        checkpointer = self.checkpointer
        if checkpointer is None or changes - self._checkpointed_at < CHECKPOINT_EVERY_CHANGES:
            return
        self._checkpointed_at = changes
        checkpointer.request()

    def close(self) -> None:
        checkpointer, self.checkpointer = self.checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        try:
            super().close()
        finally:
            gate, self.write_gate = self.write_gate, None
            if gate is not None:
                gate.close()


def _connect(
    path: str,
    *,
    busy_timeout: float,
    read_only: bool = False,
    same_thread: bool = False,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
) -> sqlite3.Connection:
    if read_only and path != ":memory:":
        # Percent-encode the path: a raw `#` or `?` in it would end the URI's path, drop
        # `mode=ro` and silently open (or create) a different file read-write.
        conn = sqlite3.connect(
            f"file:{quote(path)}?mode=ro",
            uri=True,
            isolation_level=None,
            timeout=busy_timeout,
            check_same_thread=same_thread,
            cached_statements=256,
            factory=factory,
        )
    else:
        conn = sqlite3.connect(
            path,
            isolation_level=None,
            timeout=busy_timeout,
            check_same_thread=same_thread,
            cached_statements=256,
            factory=factory,
        )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    return conn


def open_writer(
    path: str,
    *,
    busy_timeout: float = 1.0,
    synchronous: Synchronous = "NORMAL",
    gate: bool = True,
) -> WriterConnection:
    """The write connection. Usable from any thread; callers serialise access to it.

    With `gate` (and a file), it carries the file's `WriteGate`, which
    `tx.write_transaction` holds around each transaction.
    """
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"synchronous must be NORMAL, FULL, EXTRA or OFF, not {synchronous!r}")
    conn = _connect(path, busy_timeout=busy_timeout, factory=WriterConnection)
    assert isinstance(conn, WriterConnection)
    try:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    except BaseException:
        conn.close()
        raise
    if gate and path not in ("", ":memory:") and not path.startswith("file:"):
        try:
            conn.write_gate = WriteGate(write_gate_path_for(path), busy_timeout)
        except OSError:
            log.debug("no write gate for %s; writers wait in SQLite", path, exc_info=True)
        else:
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # see CHECKPOINT_EVERY_CHANGES
            conn.checkpointer = Checkpointer(
                path, synchronous, busy_timeout, write_gate_path_for(path)
            )
    return conn


def open_reader(
    path: str,
    *,
    busy_timeout: float = READER_BUSY_TIMEOUT,
    read_only: bool = False,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
) -> sqlite3.Connection:
    """A reader. `read_only=True` opens the file with `mode=ro`, so it cannot write at all."""
    conn = _connect(path, busy_timeout=busy_timeout, read_only=read_only, factory=factory)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def open_heartbeat(path: str) -> sqlite3.Connection:
    """The heartbeat connection: a zero busy timeout, so a beat is skipped, never waited for."""
    return _connect(path, busy_timeout=0.0)


def checkpoint_passive(conn: sqlite3.Connection) -> tuple[int, int, int]:
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def checkpoint_truncate(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """Maintenance only: waits for readers (up to the busy timeout), then empties the WAL."""
    row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return int(row[0]), int(row[1]), int(row[2])
