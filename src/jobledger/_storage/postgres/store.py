"""The PostgreSQL backend: the `Store` operations of `SqliteStore`, on a server.

Same public methods, signatures and semantics as `sqlite.store.SqliteStore` (the
conformance suite in `tests/conformance/` runs both), so the engine can use either. Row
tuples are column-for-column those of SQLite (`queries.JOB_COLUMNS`).

Connections (psycopg 3, all in autocommit mode; transactions are explicit):

| role     | what                                       | used for                          |
|----------|--------------------------------------------|-----------------------------------|
| writer   | one connection, serialised by `self.lock`  | every write, `user_transaction`   |
| readers  | `psycopg_pool.ConnectionPool`, lazy        | get/list/count and other reads    |
| listener | one connection, lazy, `LISTEN`             | `data_version()`                  |

The writer waits at most `busy_timeout` for any lock (`lock_timeout`), past it the caller
gets `DatabaseBusy`, as with SQLite's busy timeout. A reader waits at most
`READER_LOCK_TIMEOUT` (SQLite's readers' busy timeout): a session holding `ACCESS
EXCLUSIVE` on a table (an `ALTER TABLE`, a `VACUUM FULL`) blocks even reads, and a read
made on a worker's event loop held the loop, its heartbeat with it, for as long as the
lock lasted; past `worker_timeout`, every worker would be declared dead.

Concurrency, where SQLite relied on its single writer:

* Claim: one transaction takes `pg_advisory_xact_lock` on the queue's key, then on the
  schema's global claim key, and only then (a new statement, so a new READ COMMITTED
  snapshot that sees every committed claim) counts `running` rows and claims with
  `FOR UPDATE SKIP LOCKED`. Both caps are therefore exact across hosts. The global lock
  serialises claims of one schema cluster-wide (a claim is one short pipelined
  transaction); with `exact_global_cap=False` it is skipped, the queue cap stays exact
  and the global cap becomes best-effort, for deployments that value claim throughput
  over an exact global ceiling.
* Enqueue: `INSERT ... ON CONFLICT (idempotency_key) WHERE <live> DO NOTHING` on the
  partial unique index, so two hosts enqueueing one key concurrently get one row (the
  loser waits for the winner's COMMIT, then returns its row).
* Unique and debounced enqueues (`enqueue_keyed`) first take a transaction-scoped
  advisory lock on their key, so two hosts with one key take turns; every statement after
  it re-checks what a plain enqueue of the key (which takes no lock) may have committed.
  A debounce locks the waiting row it updates, so a claim skips it or wins it first. A
  job debounced while a running job holds its key is written under a successor key
  (`interface.successor_key`), as on SQLite.
* Multi-row updates (promote, cancel_many, recovery) lock their rows in id order, so they
  never deadlock each other. Durable locks re-check their holder after locking its row.
* A whole transaction is retried (3 attempts within 1 s) only for serialization failures
  and deadlocks, after PostgreSQL rolled it back; all operations here are idempotent as
  whole transactions. Other errors map onto the `StorageError` tree.

Cross-process wake-ups: every write other processes care about (enqueue, finalize,
cancel, promote, recovery) calls `<schema>.note_change()` inside its transaction: a
`NOTIFY jobledger_<schema>` delivered at COMMIT, and a bump of a sequence for pollers.
`data_version()` counts notifications from other connections, drained without blocking
from the listener; when LISTEN is unavailable (`listen=False`, or it failed) it polls
`change_version()`, which reports a change until no write is left in flight (see the
migration for why that is exact).

Hot operations are pipelined (psycopg pipeline mode): BEGIN, the statements and COMMIT
travel together, so a claim or a finalize costs one network round trip. A batch is one
statement where its entries allow: a finalize's outcomes that end their jobs
(`FINISH_MANY`) and an enqueue's entries without a key or a parent (`ENQUEUE_PLAIN`)
travel as one jsonb array, parsed once, so the statement-level count triggers run once a
batch, not once an entry. Their rows are matched back by id. One such entry to a queue
already registered (`enqueue`'s usual call) is one autocommit statement that also notes
the change (`ENQUEUE_SOLO`).
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from jobledger._core import ids
from jobledger._core.search import Search, SearchField
from jobledger._storage import layout as L
from jobledger._storage import rate, settings
from jobledger._storage.attempts import with_final_attempt
from jobledger._storage.equality import equal_to
from jobledger._storage.interface import (
    APPLIED,
    SUCCESSOR_END,
    TERMINAL,
    ClaimedJob,
    ClaimRequest,
    ClaimResult,
    JobFilter,
    JobRow,
    KeyRule,
    NewJob,
    NewWorkflow,
    Outcome,
    RetryFilter,
    SpreadRequest,
    WorkflowHead,
    batchable,
    latest_versions,
    retry_row,
    retry_rows,
    successor_key,
)
from jobledger._storage.observe import (
    MINUTES_KEPT,
    STATUSES,
    AuditRecord,
    JobMetrics,
    LeaderLease,
    QueueCounts,
    QueueSettingsRecord,
    ScheduleRecord,
    SearchIndexRecord,
    StorageFacts,
    WorkerRecord,
    WorkflowRecord,
)
from jobledger._storage.postgres import audit, observe, search_index
from jobledger._storage.postgres.migrate import migrate, schema_version
from jobledger._storage.postgres.queries import Queries, check_schema_name, quote_ident
from jobledger._storage.records import AttemptRow
from jobledger._storage.schedule_ops import ScheduleOps
from jobledger._storage.search_names import index_name
from jobledger._storage.worker_ops import WorkerOps
from jobledger._storage.workflow_retry import plan_workflow_retry
from jobledger.errors import (
    DatabaseBusy,
    DatabaseFull,
    JobNotFound,
    StorageError,
    WriteTransactionFailed,
)

__all__ = ["Conn", "PostgresStore", "SynchronousCommit"]

log = logging.getLogger("jobledger.storage")

T = TypeVar("T")
Conn = psycopg.Connection[Any]
# The writer's `synchronous_commit`; None keeps the server's setting. "off" is the analog
# of SQLite's synchronous=NORMAL in WAL mode: a crash (of the server or the OS) may lose
# the last fraction of a second of commits, never corrupt anything; it saves the WAL
# flush (an fsync) that dominates every write's latency.
SynchronousCommit = Literal["on", "off", "local", "remote_write", "remote_apply"]
_SYNC_COMMIT = frozenset({"on", "off", "local", "remote_write", "remote_apply"})
# Every session of ours runs without JIT compilation. The planner's row estimates for the
# spread claim over one deep queue reach a cost past the server's `jit_above_cost`
# (100,000 by default), and compiling the statement then took 40-55 ms of a claim that
# runs in 2: a process whose own limit binds below its queue's cap claimed at that pace
# (about 150 jobs/s where it drains 2,000; docs/benchmarks.md, twenty-first round).
# Nothing jobledger runs is long enough to win the compile back.
_NO_JIT = "set_config('jit', 'off', false)"

# SQLSTATEs: whole-transaction retry, then DB_BUSY.
_RETRY_STATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected
# lock_not_available (lock_timeout), query_canceled (statement_timeout),
# too_many_connections, cannot_connect_now.
_BUSY_STATES = frozenset({"55P03", "57014", "53300", "57P03"}) | _RETRY_STATES
_FULL_STATES = frozenset({"53100"})  # disk_full
# Seconds a pooled reader waits for a lock (see the module docstring).
READER_LOCK_TIMEOUT = 5.0
_RETRY_ATTEMPTS = 3
_RETRY_BUDGET = 1.0
_TERMINAL_CHUNK = 1000
_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"
# Around the claim that rides in a finalize's transaction (`finalize_and_claim`).
_SAVEPOINT = b"SAVEPOINT refill"
_RELEASE = b"RELEASE SAVEPOINT refill"
_ROLLBACK_TO = b"ROLLBACK TO SAVEPOINT refill"
# Raised by `<schema>.enqueue_missed()` inside the one-round-trip enqueue when an entry
# neither inserted nor found a live row (a missing parent, or a key race): the whole
# transaction is rolled back and the batch is redone on the careful path.
_ENQUEUE_MISSED = "JLMIS"
# invalid_sql_statement_name: psycopg's cache of prepared statements names one the server
# does not have (a pipeline that aborted, say at a lock timeout, between a statement's
# PREPARE and its use; a DEALLOCATE of one). Every later use of it fails alike, so the
# writer is opened again, with an empty cache (`_with_retry`).
_STALE_PREPARED = "26000"


class _EnqueueMissed(Exception):
    pass


def rate_sql(schema: str) -> rate.RateSql:
    """The rate log's statements in `schema` (the read-only store's `explain` reads them too)."""
    return rate.RateSql.for_placeholder(
        "%s", f"{quote_ident(schema)}.rate_log", listed="unnest(%s::text[]) AS k(value)"
    )


class PostgresStore(ScheduleOps, WorkerOps):
    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "jobledger",
        busy_timeout: float = 1.0,
        pool_size: int = 4,
        listen: bool = True,
        exact_global_cap: bool = True,
        connect_timeout: float = 10.0,
        synchronous_commit: SynchronousCommit | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self.q = Queries(self.schema)
        self._rate_sql = rate_sql(self.schema)
        # Queues whose last claim found a rate limit in `queue_settings`: their claims go
        # the rate path at once (`_claim_rated`, `_spread_rated`).
        self._rated: set[str] = set()
        # What the runtime needs to know of this backend, the same names on every store.
        from jobledger._storage.postgres import leader as leader_ops
        from jobledger._storage.postgres import workers

        self.kind = "postgres"
        self.path = dsn
        self._worker_statements = workers
        self._lease_statements = leader_ops
        self.memory = False  # the runtime's ":memory:" special cases never apply
        self.exact_global_cap = exact_global_cap
        self._busy_timeout = busy_timeout
        self._connect_timeout = connect_timeout
        if synchronous_commit is not None and synchronous_commit not in _SYNC_COMMIT:
            raise ValueError(f"synchronous_commit must be one of {sorted(_SYNC_COMMIT)}")
        self._synchronous_commit = synchronous_commit
        self._pool_size = max(1, pool_size)
        self._listen_wanted = listen
        self.lock = threading.RLock()
        self._closed = False
        self._known_queues: set[str] = set()
        self._pool: ConnectionPool[Conn] | None = None
        self._pool_lock = threading.Lock()
        self._listener: Conn | None = None
        self._listen_failed = False
        self._listen_lock = threading.Lock()
        self._version = 0
        self._poll_seen: int | None = None
        self._own_pids: set[int] = set()
        conn = self._connect("migrate")
        try:
            migrate(conn, self.schema)
        except psycopg.Error as exc:
            conn.close()
            raise _storage_error(exc, "migrate", None) from exc
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self._configure_writer(conn)

    # -- connections ----------------------------------------------------------------

    def _connect(self, label: str) -> Conn:
        try:
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, int(self._connect_timeout)),
                application_name="jobledger",
            )
        except psycopg.Error as exc:
            raise _storage_error(exc, label, None) from exc

    def _configure_writer(self, conn: Conn) -> None:
        ms = max(1, int(self._busy_timeout * 1000))
        conn.execute("SELECT set_config('lock_timeout', %s, false), " + _NO_JIT, (f"{ms}ms",))
        if self._synchronous_commit is not None:
            conn.execute(
                "SELECT set_config('synchronous_commit', %s, false)", (self._synchronous_commit,)
            )
        self._own_pids.add(conn.info.backend_pid)

    def _writer(self) -> Conn:
        """The writer connection, reopened after close() or a lost connection.

        Call with `self.lock` held. A stopped manager stays a producer and an observer
        (docs/reference/api.md: enqueue after stop() writes the row), as with SqliteStore.
        """
        conn = self.conn
        if self._closed or conn.closed or conn.broken:
            if not conn.closed:
                conn.close()
            conn = self._connect("reconnect")
            self._configure_writer(conn)
            self.conn = conn
            self._closed = False
        return conn

    _reader_name = "jobledger-reader"

    def _configure_reader(self, conn: Conn) -> None:
        """A new reader connection's session setup (the read-only store's refuses writes)."""
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false), " + _NO_JIT,
            (reader_lock_timeout(),),
        )

    def _readers(self) -> ConnectionPool[Conn]:
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self._pool is None:
                self._pool = ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs={"autocommit": True, "application_name": self._reader_name},
                    configure=self._configure_reader,
                    name=f"{self._reader_name}-{self.schema}",
                    timeout=max(5.0, self._busy_timeout),
                    open=True,
                )
            return self._pool

    # -- plumbing -------------------------------------------------------------------

    def write(self, work: Callable[[Conn], T], label: str) -> T:
        """Run `work(conn)` in one write transaction (retried whole on deadlocks).

        Its commit wakes other processes' `data_version()`, as every commit does on
        SQLite: the runtime's generic writes include schedule changes, which a leader
        elsewhere must follow.
        """

        def announced(conn: Conn) -> T:
            result = work(conn)
            conn.execute(self.q.NOTE_CHANGE)
            return result

        return self._tx(announced, label)

    def _tx(self, work: Callable[[Conn], T], label: str, *, piped: bool = False) -> T:
        """One transaction on the writer. `piped`: in pipeline mode, so statements are
        sent without waiting; a fetch inside `work` syncs, COMMIT goes at the end."""

        def once(conn: Conn) -> T:
            if not piped:
                with conn.transaction():
                    return work(conn)
            # BEGIN/COMMIT are sent by hand: psycopg's transaction() syncs the pipeline
            # on entry and exit, which costs round trips the pipeline is there to save.
            try:
                with conn.pipeline():
                    conn.execute(_BEGIN)
                    result = work(conn)
                    conn.execute(_COMMIT)
            except BaseException:
                _rollback(conn)
                raise
            return result

        return self._with_retry(once, label)

    def _tx_then(self, send: Callable[[Conn], Callable[[], T]], label: str) -> T:
        """One pipelined transaction whose results are read after COMMIT.

        `send` only queues statements and returns how to read their results; BEGIN, the
        statements and COMMIT travel in one round trip.
        """
        return self._tx(send, label, piped=True)()

    def _stmt(self, work: Callable[[Conn], T], label: str) -> T:
        """One autocommit statement (atomic on its own): no BEGIN/COMMIT round trips."""
        return self._with_retry(work, label)

    def _with_retry(self, once: Callable[[Conn], T], label: str) -> T:
        with self.lock:
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                conn = self._writer()
                try:
                    return once(conn)
                except psycopg.Error as exc:
                    if exc.sqlstate == _ENQUEUE_MISSED:
                        raise _EnqueueMissed from exc
                    if exc.sqlstate == _STALE_PREPARED:
                        conn.close()  # the server refused the statement: nothing written
                        if attempt < _RETRY_ATTEMPTS:
                            continue
                    status = _tx_status(conn)
                    retryable = (
                        exc.sqlstate in _RETRY_STATES
                        and status == TransactionStatus.IDLE
                        and attempt < _RETRY_ATTEMPTS
                        and time.monotonic() - started < _RETRY_BUDGET
                    )
                    if retryable:
                        time.sleep(0.005 * attempt)
                        continue
                    raise _storage_error(exc, label, conn, attempts=attempt) from exc

    @contextmanager
    def user_transaction(self) -> Iterator[Conn]:
        """A caller-driven write transaction (`jobs.write_tx()`); no automatic retry.

        The caller's SQL uses psycopg placeholders (`%s`); jobledger's tables live in
        `self.schema`.
        """
        with self.lock:
            conn = self._writer()
            try:
                with conn.transaction():
                    yield conn
                    # Announced like `write()`: a `*_tx` schedule change must reach the
                    # leader in another process.
                    conn.execute(self.q.NOTE_CHANGE)
            except psycopg.Error as exc:
                if exc.sqlstate == _STALE_PREPARED:
                    conn.close()  # as in `_with_retry`; the caller's work is not replayed
                raise _storage_error(exc, "write_tx", conn) from exc

    def read(self, work: Callable[[Conn], T]) -> T:
        """`work` on a pooled reader connection. A connection the server ended while it
        sat idle in the pool (`pg_terminate_backend`, a restart) fails at its first use:
        the pool's idle connections are then checked and `work`, a read, runs once more."""
        pool = self._readers()
        for last in (False, True):
            conn: Conn | None = None
            try:
                with pool.connection() as conn:
                    return work(conn)
            except PoolTimeout as exc:
                raise DatabaseBusy(
                    f"read: no reader connection within the pool timeout ({exc})",
                    params={"label": "read", "pg_error": str(exc)},
                ) from exc
            except psycopg.Error as exc:
                if last or conn is None or not conn.broken:
                    raise _storage_error(exc, "read", None) from exc
                log.debug("a pooled reader connection was lost; reading again", exc_info=True)
                try:
                    pool.check()  # drops the other idle connections that are gone too
                except psycopg.Error:
                    log.debug("checking the reader pool failed", exc_info=True)
        raise AssertionError("unreachable")  # pragma: no cover

    def report_file_replaced(self) -> bool:
        return False  # no file: the server owns its storage

    def close(self) -> None:
        # No early return on `_closed`: a use after close() reopens what it needs (the
        # reader pool, the listener), and a later close() must close that too.
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        with self._listen_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self.lock:
            self.conn.close()

    def data_version(self) -> int:
        """Changes whenever *another* connection commits a change; cheap enough to poll."""
        with self._listen_lock:
            if self._listen_wanted and not self._listen_failed:
                version = self._drain_notifications()
                if version is not None:
                    return version
            try:
                seen = self.read(lambda c: _scalar(c.execute(self.q.CHANGE_VERSION).fetchone()))
            except StorageError:
                seen = None
            # None: a write may still be committing; count it as a change every time
            # until it is settled, so the caller's next look finds the committed rows.
            if seen is None or seen != self._poll_seen:
                self._version += 1
            self._poll_seen = None if seen is None else int(seen)
            return self._version

    def _drain_notifications(self) -> int | None:
        """The LISTEN path; None when LISTEN is unavailable (use the poll fallback)."""
        listener = self._listener
        if listener is None or listener.closed or listener.broken:
            if listener is not None and not listener.closed:
                listener.close()
            self._listener = None
            try:
                listener = psycopg.connect(
                    self.dsn,
                    autocommit=True,
                    connect_timeout=max(1, int(self._connect_timeout)),
                    application_name="jobledger-listener",
                )
            except psycopg.Error:
                return None  # poll this time; try to listen again at the next call
            try:
                listener.execute(f"LISTEN {self.q.channel}")
            except psycopg.Error:
                listener.close()
                self._listen_failed = True  # e.g. a pooler that cannot LISTEN: poll for good
                return None
            self._listener = listener
            self._version += 1  # whatever happened while nobody listened
            return self._version
        try:
            for note in listener.notifies(timeout=0):
                if note.pid not in self._own_pids:
                    self._version += 1
        except psycopg.Error:
            listener.close()
            self._listener = None
            self._version += 1  # notifications may have been lost with the connection
        return self._version

    # -- enqueue --------------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], conn: Conn | None = None) -> list[JobRow]:
        """Insert `jobs`; an entry whose key is live returns the existing row instead.

        Returns, per entry, the row as stored (the existing one on an idempotency hit).
        With `conn` (from `user_transaction`), runs inside the caller's open transaction.
        """
        if conn is not None:
            return self._enqueue_in(conn, jobs)
        if not jobs:
            return []
        if len(jobs) == 1:
            job = jobs[0]
            if (
                job.idempotency_key is None
                and job.parent_id is None
                and job.queue in self._known_queues
            ):
                return [self._stmt(lambda c: _solo(c, self.q, job), "enqueue")]
        try:
            return self._tx_then(lambda c: self._send_enqueue(c, jobs), "enqueue")
        except _EnqueueMissed:
            return self._tx(lambda c: self._enqueue_in(c, jobs), "enqueue", piped=True)

    def enqueue_rows(
        self,
        rows: Sequence[JobRow],
        conn: Conn | None = None,
        rate_keys: Sequence[str | None] | None = None,
    ) -> list[JobRow]:
        """`enqueue` of entries in `fresh_row` form (the runtime's path on both backends).
        `rate_keys`: each entry's keyed rate limit key, written in the same transaction."""
        jobs = [_job_of(row) for row in rows]
        if rate_keys is None:
            return self.enqueue(jobs, conn)
        keys = rate_keys

        def work(c: Conn) -> list[JobRow]:
            out = self._enqueue_in(c, jobs)
            marks = rate.rate_key_marks(rows, out, keys)
            if marks:
                c.cursor().executemany(self.q.SET_RATE_KEY, marks)
            return out

        if conn is not None:
            return work(conn)
        return self._tx(work, "enqueue")

    def _send_enqueue(self, conn: Conn, jobs: Sequence[NewJob]) -> Callable[[], list[JobRow]]:
        """The common case in one round trip: every entry inserts or hits a live key."""
        q = self.q
        first_of_key: dict[str, int] = {}
        duplicate_of: dict[int, int] = {}
        sent: list[tuple[int, psycopg.Cursor[Any]]] = []
        new_queues: dict[str, tuple[str, int, list[str]]] = {}
        plain, rows = _plain_batch(jobs)
        batch = None if rows is None else conn.execute(q.ENQUEUE_PLAIN, (rows,))
        for i, job in enumerate(jobs):
            if job.queue not in self._known_queues:
                new_queues.setdefault(job.queue, (job.type, job.created_at, []))[2].append(job.id)
            if i in plain:
                continue
            key = job.idempotency_key
            if key is not None:
                if key in first_of_key:
                    duplicate_of[i] = first_of_key[key]
                    continue
                first_of_key[key] = i
            sent.append((i, conn.execute(q.ENQUEUE_STRICT, _enqueue_params(job))))
        if new_queues:
            conn.execute(q.ADVISORY_XACT_LOCK, (q.queues_lock_key,))
            for name, (type_name, created_at, ids) in new_queues.items():
                # Planned at each run, never prepared: a plan cached while `jobs` was
                # small scans the table for the ids (nothing invalidates it as the table
                # grows until an ANALYZE), one scan per new queue; planned now, the ids
                # are probes of the primary key. A new queue is rare, its planning cheap.
                conn.execute(
                    q.REGISTER_QUEUE_IF_INSERTED,
                    (name, type_name, created_at, ids),
                    prepare=False,
                )
        conn.execute(q.NOTE_CHANGE)

        def fetch() -> list[JobRow]:
            out: list[JobRow] = [()] * len(jobs)
            if batch is not None:
                _fill_plain(out, batch, plain)
            for i, cur in sent:
                row = cur.fetchone()
                if row is None:  # enqueue_missed() aborts before COMMIT; never here
                    raise WriteTransactionFailed("enqueue: an entry returned no row")
                out[i] = tuple(row[1:])
            for i, first in duplicate_of.items():
                out[i] = out[first]
            return out

        return fetch

    def _enqueue_in(self, conn: Conn, jobs: Sequence[NewJob]) -> list[JobRow]:
        q = self.q
        first_of_key: dict[str, int] = {}
        duplicate_of: dict[int, int] = {}
        sent: list[tuple[int, psycopg.Cursor[Any]]] = []
        plain, rows = _plain_batch(jobs)
        with conn.pipeline():
            batch = None if rows is None else conn.execute(q.ENQUEUE_PLAIN, (rows,))
            for i, job in enumerate(jobs):
                if i in plain:
                    continue
                key = job.idempotency_key
                if key is not None:
                    if key in first_of_key:
                        duplicate_of[i] = first_of_key[key]
                        continue
                    first_of_key[key] = i
                sent.append((i, conn.execute(q.ENQUEUE_ONE, _enqueue_params(job))))
            if sent or batch is not None:
                conn.execute(q.NOTE_CHANGE)
        out: list[JobRow | None] = [None] * len(jobs)
        inserted = set(plain)
        if batch is not None:
            _fill_plain(out, batch, plain)
        for i, cur in sent:
            row = cur.fetchone()
            if row is None:
                row = self._enqueue_slow(conn, jobs[i])
            out[i] = tuple(row[1:])
            if row[0]:
                inserted.add(i)
        for i, first in duplicate_of.items():
            out[i] = out[first]
        # In entry order: a new queue is registered with its first inserted entry's type.
        self._register_queues(conn, [jobs[i] for i in sorted(inserted)])
        return [row for row in out if row is not None]

    def _enqueue_slow(self, conn: Conn, job: NewJob) -> tuple[Any, ...]:
        """The entry inserted nothing and saw no live row: a missing parent, or a live row
        that committed (or ended) while the statement ran. Decide with fresh snapshots."""
        q = self.q
        for _ in range(5):
            key = job.idempotency_key
            if key is not None:
                hit = conn.execute(q.FIND_LIVE_BY_KEY, (key,)).fetchone()
                if hit is not None:
                    return (False, *hit)
            self._check_parent(conn, job)
            row = conn.execute(q.ENQUEUE_ONE, _enqueue_params(job)).fetchone()
            if row is not None:
                return tuple(row)
        raise _key_kept_changing(job)

    def _check_parent(self, conn: Conn, job: NewJob) -> None:
        if (
            job.parent_id is not None
            and conn.execute(self.q.PARENT_EXISTS, (job.parent_id,)).fetchone() is None
        ):
            raise JobNotFound(
                f"parent job {job.parent_id!r} does not exist",
                params={"parent_id": job.parent_id},
            )

    def enqueue_keyed(
        self,
        rows: Sequence[JobRow],
        rules: Sequence[KeyRule | None],
        conn: Conn | None = None,
        rate_keys: Sequence[str | None] | None = None,
    ) -> list[JobRow]:
        """`enqueue_rows` with a `KeyRule` per entry (see the protocol).

        Every entry with a rule first takes its key's transaction-scoped advisory lock
        (all of them, in key order, so two batches cannot deadlock), so keyed enqueues of
        one key run one at a time across hosts, each seeing what the one before committed.
        A plain enqueue of the key takes no lock: the statements below re-check what it
        may have committed meanwhile (the unique index still allows one live row per
        stored key) and look again when it did.
        """
        jobs = [_job_of(row) for row in rows]

        def work(c: Conn) -> list[JobRow]:
            out = self._enqueue_keyed_in(c, jobs, rules)
            if rate_keys is not None:
                marks = rate.rate_key_marks(rows, out, rate_keys)
                if marks:
                    c.cursor().executemany(self.q.SET_RATE_KEY, marks)
            return out

        if conn is not None:
            return work(conn)
        return self.write(work, "enqueue")

    def _enqueue_keyed_in(
        self, conn: Conn, jobs: Sequence[NewJob], rules: Sequence[KeyRule | None]
    ) -> list[JobRow]:
        q = self.q
        keys = sorted(
            {str(j.idempotency_key) for j, r in zip(jobs, rules, strict=True) if r is not None}
        )
        with conn.pipeline():
            for key in keys:
                conn.execute(q.ADVISORY_XACT_LOCK, (q.key_lock_key(key),))
        out: list[JobRow] = []
        for job, rule in zip(jobs, rules, strict=True):
            if rule is None:
                out.append(self._enqueue_in(conn, [job])[0])
            elif rule.kind == "unique_for":
                out.append(self._unique_for(conn, job, job.created_at - rule.ms))
            else:
                out.append(self._debounce(conn, job))
        return latest_versions(out)

    def _unique_for(self, conn: Conn, job: NewJob, since: int) -> JobRow:
        q = self.q
        params = {**_enqueue_params(job), "since": since}
        for _ in range(5):
            # The live job, else a new one, unless one ended since `since`.
            row = conn.execute(q.ENQUEUE_UNLESS_ENDED, params).fetchone()
            if row is not None:
                if row[0]:
                    # The statement's snapshot may show the key's job running, and its
                    # ON CONFLICT arbiter (the live rows as of the insert) no longer:
                    # a job that ended in between is in neither. A fresh snapshot shows
                    # it; the insert is then taken back, and that job is the answer.
                    hit = conn.execute(q.FIND_ENDED_BY_KEY, (job.idempotency_key, since)).fetchone()
                    if hit is not None:
                        conn.execute(q.DELETE_INSERTED, (job.id,))
                        return tuple(hit)
                    self._register_queues(conn, [job])
                return tuple(row[1:])
            ended = conn.execute(q.FIND_ENDED_BY_KEY, (job.idempotency_key, since)).fetchone()
            if ended is not None:
                return tuple(ended)
            self._check_parent(conn, job)
        raise _key_kept_changing(job)

    def _debounce(self, conn: Conn, job: NewJob) -> JobRow:
        q = self.q
        key = str(job.idempotency_key)
        params = _enqueue_params(job)
        update = {**params, "end": key + SUCCESSOR_END}
        for _ in range(5):
            with conn.pipeline():
                updated = conn.execute(q.DEBOUNCE_WAITING, update)
                live = conn.execute(q.FIND_LIVE_BY_KEY, (key,))
            hit = updated.fetchone()
            if hit is not None:
                return tuple(hit)
            holder = live.fetchone()
            if holder is not None and holder[L.C_STATUS] != "running":
                continue  # a plain enqueue wrote it after the update looked: update it
            # Running: the new job waits beside it, under a successor key.
            target = params if holder is None else {**params, "key": successor_key(key, job.id)}
            row = conn.execute(q.ENQUEUE_ONE, target).fetchone()
            if row is not None and row[0]:
                self._register_queues(conn, [job])
                return tuple(row[1:])
            if row is None:
                self._check_parent(conn, job)
        raise _key_kept_changing(job)

    def _register_queues(self, conn: Conn, inserted: Sequence[NewJob]) -> None:
        new: dict[str, NewJob] = {}
        for job in inserted:
            if job.queue not in self._known_queues and job.queue not in new:
                new[job.queue] = job
        if not new:
            return
        with conn.pipeline():
            conn.execute(self.q.ADVISORY_XACT_LOCK, (self.q.queues_lock_key,))
            for name, job in new.items():
                conn.execute(self.q.REGISTER_QUEUE, (name, job.type, job.created_at))

    def remember_queues(self, names: Iterator[str] | Sequence[str]) -> None:
        """Called after COMMIT: these queues are registered and need no further INSERT."""
        self._known_queues.update(names)

    def queues_since(self, seq: int) -> list[tuple[int, str, str]]:
        rows = self.read(lambda c: c.execute(self.q.QUEUES_SINCE, (seq,)).fetchall())
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    # -- dispatch -------------------------------------------------------------------

    def claim(
        self,
        queue: str,
        *,
        queue_cap: int,
        global_cap: int,
        limit: int,
        now_ms: int,
        worker_id: str,
        types: tuple[str, ...],
        exclude_owners: tuple[str, ...] = (),
        registered: bool = False,
        rate: tuple[int, int] | None = None,
        rate_keyed: bool = False,
    ) -> ClaimResult:
        req = ClaimRequest(
            queue,
            queue_cap,
            global_cap,
            limit,
            worker_id,
            types,
            exclude_owners,
            registered,
            rate,
            rate_keyed,
        )
        parts = self._claim_parts(req, now_ms)
        if parts is None:
            return self._claim_rated(req, now_ms)
        send, answer = parts
        return answer(self._tx_then(send, "claim"))

    def _claim_parts(self, req: ClaimRequest, now_ms: int) -> _ClaimParts | None:
        """`claim`'s statements (sent on a connection inside a transaction) and how to
        read their rows once it committed; None when the claim counts a rate window
        (`_claim_rated`, statements that read before they write)."""
        if req.rate is not None or req.queue in self._rated:
            return None
        sql = self._claim_sql(req, raw=False)
        q = self.q

        def send(conn: Conn) -> Callable[[], list[Any]]:
            conn.execute(q.ADVISORY_XACT_LOCK, (q.queue_claim_key(req.queue),))
            if self.exact_global_cap:
                conn.execute(q.ADVISORY_XACT_LOCK, (q.global_claim_key,))
            cur = conn.execute(sql, _claim_params(req, req.queue_cap, req.limit, now_ms))
            return cur.fetchall

        def answer(rows: list[Any]) -> ClaimResult:
            in_queue, running = int(rows[0][0]), int(rows[0][1])
            s_cap, paused, s_rate = rows[0][2], bool(rows[0][3]), rows[0][4]
            if running < 0:
                return ClaimResult([], False, unregistered=True)
            if paused:
                return ClaimResult([], False)  # claims wait for resume_queue
            if s_rate is not None:
                # A rate limit set for the queue: nothing was taken; claim it counting
                # the window.
                self._rated.add(req.queue)
                return self._claim_rated(req, now_ms)
            cap = req.queue_cap if s_cap is None else int(s_cap)
            return _claim_answer(rows, cap, in_queue, running, req.global_cap, req.limit, None)

        return send, answer

    def _claim_sql(self, req: ClaimRequest, *, raw: bool) -> str:
        q = self.q
        if req.registered:
            sql = q.CLAIM_REGISTERED_EXCLUDING if req.exclude_owners else q.CLAIM_REGISTERED
        else:
            sql = q.CLAIM_EXCLUDING if req.exclude_owners else q.CLAIM
        if raw:  # the caller counted the settings and the window: the asked cap and limit
            sql = sql.replace("WHEN qs.paused OR qs.rl IS NOT NULL THEN 0", "WHEN false THEN 0")
            sql = sql.replace("coalesce(qs.cap, %(qcap)s)", "%(qcap)s")
        return sql

    def _claim_rated(self, req: ClaimRequest, now_ms: int) -> ClaimResult:
        """A claim that counts a rate limit's window (`_storage/rate.py`) under the queue's
        advisory lock, which every claim of the queue takes: the window cannot move
        between the count and the claim."""
        q = self.q
        sql = self._claim_sql(req, raw=True)

        def work(conn: Conn) -> ClaimResult:
            conn.execute(q.ADVISORY_XACT_LOCK, (q.queue_claim_key(req.queue),))
            if self.exact_global_cap:
                conn.execute(q.ADVISORY_XACT_LOCK, (q.global_claim_key,))
            ex = _executor(conn)
            found = ex(q.QUEUE_SETTINGS_ROW, (req.queue,))
            s_cap, paused, s_rate, s_per = found[0] if found else (None, False, None, 0)
            if s_rate is None:
                self._rated.discard(req.queue)
            if paused:
                return ClaimResult([], False)
            cap = req.queue_cap if s_cap is None else int(s_cap)
            limits = req.rate if s_rate is None else (int(s_rate), int(s_per))
            if limits is not None and req.rate_keyed and s_rate is None:
                return self._keyed_take(conn, req, cap, limits, now_ms)
            limit, win = req.limit, None
            if limits is not None:
                win = rate.window(ex, self._rate_sql, req.queue, *limits, now_ms)
                if win.room <= 0:
                    return ClaimResult([], False, rate_wait=win.wait_until, cap=cap)
                limit = min(limit, win.room)
            rows = ex(sql, _claim_params(req, cap, limit, now_ms))  # type: ignore[arg-type]
            in_queue, running = int(rows[0][0]), int(rows[0][1])
            if running < 0:
                return ClaimResult([], False, unregistered=True)
            taken = sum(1 for r in rows if r[5] is not None)
            wait = None
            if win is not None and limits is not None:
                rate.record(ex, self._rate_sql, req.queue, win, taken, now_ms)
                if taken and taken >= win.room:
                    wait = rate.window(ex, self._rate_sql, req.queue, *limits, now_ms).wait_until
            return _claim_answer(rows, cap, in_queue, running, req.global_cap, limit, wait)

        return self._tx(work, "claim")

    def _keyed_take(
        self, conn: Conn, req: ClaimRequest, cap: int, limits: tuple[int, int], now_ms: int
    ) -> ClaimResult:
        """A keyed rate limit's claim, as on SQLite (`SqliteStore`'s `_keyed_take`):
        the queue's head while the queue's own bucket has room for all it may take,
        otherwise rows in claim order, each while its key's window has room, keys found
        spent left out of the next round; under the queue's advisory lock."""
        q = self.q
        ex = _executor(conn)
        in_queue, running, registered = ex(q.KEYED_COUNTS, (req.queue, req.worker_id))[0]
        if req.registered and not registered:
            return ClaimResult([], False, unregistered=True)
        free = cap - int(in_queue)
        if free <= 0:
            return ClaimResult([], False, cap=cap)
        global_free = req.global_cap - int(running)
        if global_free <= 0:
            return ClaimResult([], True, cap=cap)
        n = min(free, global_free, req.limit)

        def candidates(spent: list[str], want: int) -> list[Any]:
            params = (req.queue, now_ms, list(req.types), list(req.exclude_owners), spent, want)
            return ex(q.KEYED_CANDIDATES, params)

        def read_windows(keys: list[str]) -> dict[str, rate.Window]:
            buckets = {rate.bucket_of(req.queue, k): k for k in keys}
            found = rate.windows(ex, self._rate_sql, list(buckets), *limits, now_ms, list(buckets))
            return {buckets[b]: w for b, w in found.items()}

        sql = self._rate_sql
        total = rate.window(ex, sql, req.queue, *limits, now_ms, wait=False)
        wait = None
        if total.room >= n:  # as on SQLite: no key can have less room than the queue
            head = dict(candidates([], n))
            rows = ex(q.CLAIM_IDS, (req.worker_id, now_ms, now_ms, list(head))) if head else []
            rate.record_total(ex, sql, req.queue, total, [head[r[0]] for r in rows], now_ms)
        else:
            exmany = conn.cursor().executemany
            rate.fold(ex, exmany, sql, req.queue, limits[1], now_ms, lambda b: b)
            pick = rate.pick_keyed(candidates, read_windows, n)
            rows = ex(q.CLAIM_IDS, (req.worker_id, now_ms, now_ms, pick.ids)) if pick.ids else []
            rate.record_many(
                exmany,
                sql,
                {rate.bucket_of(req.queue, k): (pick.wins[k], c) for k, c in pick.taken.items()},
                now_ms,
            )
            rate.record(ex, sql, req.queue, total, len(rows), now_ms)
            wait = rate.keyed_wait(ex, sql, req.queue, pick, limits, now_ms)
        jobs = [ClaimedJob(*r) for r in rows]
        jobs.sort(key=lambda j: (j.priority, j.scheduled_at, j.id))
        limited_by_global = global_free < min(free, req.limit)
        return ClaimResult(
            jobs,
            limited_by_global and len(jobs) == n,
            rate_wait=wait,
            cap=cap,
        )

    def claim_spread(self, request: SpreadRequest, now_ms: int) -> ClaimResult:
        parts = self._spread_parts(request, now_ms)
        if parts is None:
            return self._spread_rated(request, now_ms)
        send, answer = parts
        return answer(self._tx_then(send, "claim"))

    def _spread_parts(self, request: SpreadRequest, now_ms: int) -> _ClaimParts | None:
        """`claim_spread`'s statements and how to read their rows, as `_claim_parts`."""
        names = [name for name, _ in request.queues]
        if request.rates or self._rated.intersection(names):
            return None
        sql = self._spread_sql(request, raw=False)
        caps = [cap for _, cap in request.queues]

        def send(conn: Conn) -> Callable[[], list[Any]]:
            self._spread_locks(conn, names)
            cur = conn.execute(sql, _spread_params(request, names, caps, now_ms))
            return cur.fetchall

        def answer(rows: list[Any]) -> ClaimResult:
            result = _spread_answer(rows, request.global_cap)
            for r in rows:
                if r[5] is not None:  # a rate limit set for the queue: its claims count it
                    self._rated.add(str(r[1]))
            if result.rate_waits:
                # Nothing taken there; kicked again at once, its claim goes the rate path.
                for name in result.rate_waits:
                    result.rate_waits[name] = now_ms + 1
            return result

        return send, answer

    def _spread_sql(self, request: SpreadRequest, *, raw: bool) -> str:
        q = self.q
        if request.registered:
            sql = (
                q.CLAIM_SPREAD_REGISTERED_EXCLUDING
                if request.exclude_owners
                else q.CLAIM_SPREAD_REGISTERED
            )
        else:
            sql = q.CLAIM_SPREAD_EXCLUDING if request.exclude_owners else q.CLAIM_SPREAD
        if raw:
            sql = sql.replace(
                "CASE WHEN qs.paused OR qs.rate_limit IS NOT NULL THEN -1000000000 ELSE "
                "coalesce(qs.concurrency, c.cap) END",
                "c.cap",
            )
        return sql

    def _spread_locks(self, conn: Conn, names: Sequence[str]) -> None:
        q = self.q
        if self.exact_global_cap:
            # Every claim takes the global key last, so holding it serialises this claim
            # with every other: both caps are exact without the queue keys.
            conn.execute(q.ADVISORY_XACT_LOCK, (q.global_claim_key,))
        else:
            # The queue keys, in one order for every spread claim (a single-queue claim
            # holds only one), so two claims never wait on each other in a cycle.
            for name in sorted(set(names)):
                conn.execute(q.ADVISORY_XACT_LOCK, (q.queue_claim_key(name),))

    def _spread_rated(self, request: SpreadRequest, now_ms: int) -> ClaimResult:
        """A spread claim over queues of which some are rate-limited: the settings, the
        counts and the windows read first under the claim's locks, then the statement
        asked for caps that leave each queue exactly what it may take."""
        q = self.q
        names = [name for name, _ in request.queues]
        sql = self._spread_sql(request, raw=True)
        handler_rates = {name: (limit, per) for name, limit, per in request.rates}

        def work(conn: Conn) -> ClaimResult:
            # The queue keys, sorted, then the global key: the order every claim takes
            # them in, so no two wait on each other in a cycle. A rate window is per
            # queue, and every claim of a queue holds its key while it counts.
            for name in sorted(set(names)):
                conn.execute(q.ADVISORY_XACT_LOCK, (q.queue_claim_key(name),))
            if self.exact_global_cap:
                conn.execute(q.ADVISORY_XACT_LOCK, (q.global_claim_key,))
            ex = _executor(conn)
            caps = dict(request.queues)
            rates = dict(handler_rates)
            paused = settings.overlay(caps, rates, ex(q.QUEUE_SETTINGS_MANY, (names,)))
            for name in names:
                if name not in rates:
                    self._rated.discard(name)
            running = dict(ex(q.RUNNING_BY_QUEUE, (names,)))
            in_q = {name: int(running.get(name, 0)) for name in names}
            free = {name: caps[name] - in_q[name] for name in names}
            plan = rate.spread_windows(ex, self._rate_sql, free, paused, rates, now_ms)
            # Caps that leave each queue exactly what it may take.
            asked_caps = [in_q[name] + plan.may[name] for name in names]
            rows = ex(sql, _spread_params(request, names, asked_caps, now_ms))  # type: ignore[arg-type]
            taken = Counter(str(r[6 + 2]) for r in rows if r[6] is not None)
            rate.record_spread(ex, self._rate_sql, plan, taken, now_ms)
            result = _spread_answer(rows, request.global_cap, counted=True)
            result.caps = caps
            result.rate_waits = plan.waits
            return result

        return self._tx(work, "claim")

    def finalize_and_claim(
        self, outcomes: Sequence[Outcome], now_ms: int, claim: ClaimRequest | SpreadRequest
    ) -> tuple[list[JobRow | None], ClaimResult | None]:
        """The outcomes, then the claim of the slots they free, in one transaction and one
        round trip, as on SQLite: one commit a flush, not two. The claim runs under a
        savepoint: when it fails, the outcomes still commit and the claim answers None.
        Its advisory locks are taken while the finished rows are locked, which cannot
        close a cycle: a claim never waits for a row lock (it reads its rows SKIP
        LOCKED) and takes its advisory keys in one order. A claim that counts a rate
        window reads before it writes: it goes in a transaction of its own after the
        outcomes'."""
        parts = (
            self._spread_parts(claim, now_ms)
            if isinstance(claim, SpreadRequest)
            else self._claim_parts(claim, now_ms)
        )
        if parts is None:
            rows = self.finalize(outcomes, now_ms)
            claimed = None
        else:
            claim_send, answer = parts
            rows, claimed = self._finalize_then_claim(
                self._finalize_send(outcomes, now_ms), claim_send
            )
            if claimed is None:
                return rows, None  # the claim failed; the outcomes committed
        try:
            if claimed is not None:
                return rows, answer(claimed)  # a rate limit found there claims on its own
            if isinstance(claim, SpreadRequest):
                return rows, self._spread_rated(claim, now_ms)
            return rows, self._claim_rated(claim, now_ms)
        except Exception:
            what = "several queues" if isinstance(claim, SpreadRequest) else repr(claim.queue)
            log.warning("claim on %s failed; retrying shortly", what, exc_info=True)
            return rows, None

    def _finalize_then_claim(
        self,
        finalize_send: Callable[[Conn], Callable[[], list[JobRow | None]]],
        claim_send: Callable[[Conn], Callable[[], list[Any]]],
    ) -> tuple[list[JobRow | None], list[Any] | None]:
        """One pipelined transaction: the outcomes, then the claim under a savepoint.
        The claim's rows are None when it failed and the outcomes committed without it
        (the savepoint's own statement completed, so the failure came after it)."""

        def once(conn: Conn) -> tuple[list[JobRow | None], list[Any] | None]:
            mark: psycopg.Cursor[Any] | None = None
            try:
                with conn.pipeline():
                    conn.execute(_BEGIN)
                    written = finalize_send(conn)
                    mark = conn.execute(_SAVEPOINT)
                    taken = claim_send(conn)
                    conn.execute(_RELEASE)
                    conn.execute(_COMMIT)
            except psycopg.Error:
                kept = mark is not None and mark.statusmessage == "SAVEPOINT"
                if not kept or _tx_status(conn) != TransactionStatus.INERROR:
                    _rollback(conn)
                    raise
                log.warning("claim after a finalize failed; retrying shortly", exc_info=True)
                try:
                    conn.execute(_ROLLBACK_TO)
                    conn.execute(_COMMIT)
                except BaseException:
                    _rollback(conn)
                    raise
                return written(), None
            except BaseException:
                _rollback(conn)
                raise
            return written(), taken()

        return self._with_retry(once, "finalize")

    def finalize(
        self, outcomes: Sequence[Outcome], now_ms: int, *, label: str = "finalize"
    ) -> list[JobRow | None]:
        """Write every outcome in one transaction; None where the fence did not match.

        An outcome with `want_row=False` that applied answers `APPLIED` (its row unread).
        """
        return self._tx_then(self._finalize_send(outcomes, now_ms), label)

    def finalize_in(self, conn: Conn, outcome: Outcome, now_ms: int) -> JobRow | None:
        return self._finalize_send([outcome], now_ms)(conn)()[0]

    def _finalize_send(
        self, outcomes: Sequence[Outcome], now_ms: int
    ) -> Callable[[Conn], Callable[[], list[JobRow | None]]]:
        """`finalize`'s statements: sent on `conn`, then read by the answer's call."""
        q = self.q

        # The outcomes `batchable` admits go in one statement per group: those nobody
        # reads back, and those a handle waits on (rows whole). The others one by one,
        # in the same pipeline.
        batch = batchable(outcomes)
        batched = {o.job_id for o in batch}
        groups = [g for g in ([o for o in batch if not o.want_row],
                              [o for o in batch if o.want_row]) if g]  # fmt: skip

        def send(conn: Conn) -> Callable[[], list[JobRow | None]]:
            fetches: list[Callable[[], JobRow | None]] = []
            matched: dict[str, JobRow] = {}
            reads: list[Callable[[], None]] = []
            for group in groups:
                rows = group[0].want_row
                cur = conn.execute(
                    q.FINISH_MANY_ROWS if rows else q.FINISH_MANY,
                    (_outcomes_json(group), now_ms, now_ms, now_ms),
                )
                reads.append(functools.partial(_note_matched, cur, matched, rows))
            for o in outcomes:
                if o.job_id in batched:
                    fetches.append(functools.partial(matched.get, o.job_id))
                    continue
                locks = (o.release_locks, o.job_id, o.worker_id)
                fence = (o.job_id, o.worker_id, o.attempt)
                # What the row cannot tell is stored with it (_storage/attempts.py):
                # (job id, n, ATTEMPT_COLUMNS) of a record that ends the attempt.
                ended = (o.job_id, o.attempt, o.attempt, o.worker_id, o.started_at, now_ms,
                         o.kind, o.error, o.logs)  # fmt: skip
                logged = o.logs is not None
                if o.kind == "retry" or o.kind == "requeue":
                    if o.kind == "retry":
                        retry_params: tuple[Any, ...] = (o.error, o.retry_at, now_ms)
                        retried = conn.execute(
                            q.RETRY, (*retry_params, *fence, *locks, *ended, True)
                        )
                    else:
                        retry_params = (now_ms, o.progress, o.progress_detail)
                        unspent = (*ended[2:6], "interrupted", o.error, o.logs, o.job_id)
                        retried = conn.execute(q.REQUEUE, (*retry_params, *fence, *locks, *unspent))
                    # The row holds the cancel's error; a retry ended in its own.
                    cancelled_record = (*ended[:6], "cancelled", *ended[7:])
                    cancelled = conn.execute(
                        q.CANCEL_INSTEAD_OF_RETRY,
                        (now_ms, now_ms, o.progress, o.progress_detail, *fence, *locks,
                         *cancelled_record, o.kind == "retry" or logged),
                    )  # fmt: skip
                    fetches.append(functools.partial(_first_row, retried, cancelled))
                    continue
                params = (
                    o.kind,
                    o.output,
                    o.error,
                    now_ms,
                    now_ms,
                    o.progress,
                    o.progress_detail,
                    *fence,
                    *locks,
                    *ended,
                    logged,
                )
                if o.want_row:
                    cur = conn.execute(q.FINISH, params)
                    fetches.append(functools.partial(_first_row, cur))
                else:
                    cur = conn.execute(q.FINISH_NO_ROW, params)
                    fetches.append(functools.partial(_applied, cur))
            if fetches:
                conn.execute(q.NOTE_CHANGE)

            def answer() -> list[JobRow | None]:
                for read in reads:
                    read()
                return [fetch() for fetch in fetches]

            return answer

        return send

    def attempts(self, job_id: str) -> list[AttemptRow]:
        def read(conn: Conn) -> list[AttemptRow]:
            row = _row_or_none(conn.execute(self.q.GET_JOB, (job_id,)).fetchone())
            stored = [] if row is None else conn.execute(self.q.ATTEMPTS_OF, (job_id,)).fetchall()
            return with_final_attempt(row, stored)

        return self.read(read)

    def promote_due(self, now_ms: int) -> list[str]:
        q = self.q

        def send(conn: Conn) -> Callable[[], list[Any]]:
            cur = conn.execute(q.PROMOTE_DUE, (now_ms, now_ms))
            conn.execute(q.NOTE_CHANGE)
            return cur.fetchall

        rows = self._tx_then(send, "promote")
        return sorted({str(r[0]) for r in rows})

    def next_delayed_at(self) -> int | None:
        row = self.read(lambda c: c.execute(self.q.NEXT_DELAYED_AT).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    # -- progress and metadata (fenced) ---------------------------------------------

    def set_progress(
        self,
        job_id: str,
        worker_id: str,
        attempt: int,
        progress: float,
        detail: str | None,
        now_ms: int,
    ) -> bool:
        params = (progress, detail, now_ms, job_id, worker_id, attempt)
        return self._stmt(
            lambda c: c.execute(self.q.SET_PROGRESS, params).rowcount == 1, "progress"
        )

    def patch_metadata(
        self, job_id: str, worker_id: str, attempt: int, patch: dict[str, Any], now_ms: int
    ) -> dict[str, Any] | None:
        """Shallow-merge `patch` into the stored metadata; None if the claim was lost."""
        q = self.q

        def work(conn: Conn) -> dict[str, Any] | None:
            row = conn.execute(q.GET_METADATA_FENCED, (job_id, worker_id, attempt)).fetchone()
            if row is None:
                return None
            merged: dict[str, Any] = {**json.loads(row[0]), **patch}
            conn.execute(
                q.SET_METADATA_FENCED,
                (
                    json.dumps(merged, separators=(",", ":"), allow_nan=False),
                    now_ms,
                    job_id,
                    worker_id,
                    attempt,
                ),
            )
            return merged

        return self._tx(work, "patch_metadata", piped=True)

    # -- durable locks (layer 3) ----------------------------------------------------

    def try_lock(self, name: str, job_id: str, worker_id: str, now_ms: int) -> bool:
        q = self.q
        # Fast path: a free lock is one autocommit INSERT.
        if self._stmt(
            lambda c: c.execute(q.LOCK_INSERT, (name, job_id, worker_id, now_ms)).fetchone(),
            "lock",
        ):
            return True

        def work(conn: Conn) -> bool:
            for _ in range(5):
                holder = conn.execute(q.LOCK_HOLDER, (name,)).fetchone()
                if holder is None:  # released since; take it like a free lock
                    if conn.execute(q.LOCK_INSERT, (name, job_id, worker_id, now_ms)).fetchone():
                        return True
                    continue
                if (holder[0], holder[1]) != (job_id, worker_id) and conn.execute(
                    q.LOCK_HOLDER_RUNNING, (holder[0], holder[1])
                ).fetchone():
                    return False
                conn.execute(q.LOCK_TAKE_OVER, (job_id, worker_id, now_ms, name))
                return True
            return False

        return self._tx(work, "lock", piped=True)

    def release_lock(self, name: str, job_id: str, worker_id: str, attempt: int) -> None:
        self._stmt(
            lambda c: c.execute(self.q.RELEASE_LOCK, (name, job_id, worker_id, attempt)),
            "unlock",
        )

    def writer_busy(self) -> bool:
        return False  # no cheap cross-host probe; dispatch treats it as "not busy"

    def unregistered_claimers(self) -> list[str]:
        return [
            str(r[0])
            for r in self.read(lambda c: c.execute(self.q.UNREGISTERED_CLAIMERS).fetchall())
        ]

    def release_unconfirmed_claims(self, worker_id: str, keep: Sequence[str], now_ms: int) -> int:
        q = self.q

        def work(conn: Conn) -> int:
            cur = conn.execute(q.RELEASE_UNCONFIRMED, (now_ms, worker_id, list(keep), worker_id))
            if cur.rowcount:
                conn.execute(q.NOTE_CHANGE)
            return int(cur.rowcount)

        return self._tx(work, "reconcile_claims")

    # -- cancellation ---------------------------------------------------------------

    def request_cancel(
        self, job_id: str, reason: str | None, error: str, now_ms: int
    ) -> tuple[str | None, str | None, JobRow | None]:
        """Flag the row; cancel it at once if it is waiting.

        Returns (status before, worker id, terminal row if it was cancelled here).
        """
        q = self.q

        def send(conn: Conn) -> Callable[[], tuple[str | None, str | None, JobRow | None]]:
            flagged = conn.execute(q.REQUEST_CANCEL, (reason, now_ms, job_id))
            # A compare-and-set on a row this transaction has just locked: it matches
            # exactly when the row was waiting.
            waiting = conn.execute(q.CANCEL_WAITING, (error, now_ms, now_ms, job_id))
            conn.execute(q.NOTE_CHANGE)

            def fetch() -> tuple[str | None, str | None, JobRow | None]:
                row = flagged.fetchone()
                if row is None:
                    return None, None, None
                return row[0], row[1], _row_or_none(waiting.fetchone())

            return fetch

        return self._tx_then(send, "cancel")

    def force_cancel(
        self, job_id: str, worker_id: str, attempt: int, error: str, now_ms: int
    ) -> JobRow | None:
        q = self.q

        def send(conn: Conn) -> Callable[[], JobRow | None]:
            cur = conn.execute(
                q.FORCE_CANCEL_RUNNING,
                (error, now_ms, now_ms, job_id, worker_id, attempt, job_id, worker_id),
            )
            conn.execute(q.NOTE_CHANGE)
            return lambda: _row_or_none(cur.fetchone())

        return self._tx_then(send, "force_cancel")

    def cancel_many(
        self, queue: str | None, type_name: str | None, reason: str | None, error: str, now_ms: int
    ) -> tuple[list[tuple[str, str | None]], list[JobRow]]:
        where, params = _where_queue_type(queue, type_name)
        q = self.q

        def send(conn: Conn) -> Callable[[], tuple[list[tuple[str, str | None]], list[JobRow]]]:
            running = conn.execute(
                q.CANCEL_MANY_REQUEST.replace("{where}", where), (reason, now_ms, *params)
            )
            cancelled = [
                conn.execute(
                    q.CANCEL_MANY_WAITING.replace("{where}", where).replace("{statuses}", st),
                    (error, now_ms, now_ms, *params),
                )
                for st in _NOT_RUNNING_YET
            ]
            conn.execute(q.NOTE_CHANGE)
            return lambda: (
                [(r[0], r[1]) for r in running.fetchall()],
                [tuple(r) for cur in cancelled for r in cur.fetchall()],
            )

        return self._tx_then(send, "cancel_many")

    def cancel_requested_among(self, ids: Sequence[str]) -> list[tuple[str, str | None]]:
        if not ids:
            return []
        rows = self.read(
            lambda c: c.execute(self.q.CANCEL_REQUESTED_AMONG, (list(ids),)).fetchall()
        )
        return [(r[0], r[1]) for r in rows]

    # -- re-runs --------------------------------------------------------------------

    def retry_job(
        self, job_id: str, payload: str | None, *, enqueued_by: str, now_ms: int
    ) -> tuple[str | None, JobRow | None]:
        q = self.q

        def work(conn: Conn) -> tuple[str | None, JobRow | None]:
            conn.execute(q.ADVISORY_XACT_LOCK, (q.retry_lock_key,))
            old = conn.execute(q.RETRY_SOURCE, (job_id,)).fetchone()
            if old is None:
                return None, None
            if old[L.C_STATUS] not in TERMINAL:
                return old[L.C_STATUS], None
            new = retry_row(old, ids.new_id(now_ms), payload, enqueued_by, now_ms)
            return old[L.C_STATUS], self._insert_retries(conn, [new])[0]

        return self.write(work, "retry")

    def retry_matching(
        self, flt: RetryFilter, limit: int, *, enqueued_by: str, now_ms: int
    ) -> builtins.list[JobRow]:
        q = self.q

        def run(safe: bool) -> builtins.list[JobRow]:
            where, queue_type = _where_queue_type(flt.queue, flt.type)
            params: tuple[Any, ...] = queue_type
            if flt.search is not None:
                term, term_params = _search_where(flt.search, self._ident, safe)
                where = f"{where} AND {term}" if where else term
                params = (*params, *term_params)
            status, status_params = _status_in(flt.status)
            sql = q.RETRY_MATCHING.replace("{status}", status)
            sql = sql.replace("{where}", f" AND {where}" if where else "")

            def work(conn: Conn) -> builtins.list[JobRow]:
                conn.execute(q.ADVISORY_XACT_LOCK, (q.retry_lock_key,))
                old = conn.execute(sql, (*status_params, *params, limit)).fetchall()
                return self._insert_retries(conn, retry_rows(old, enqueued_by, now_ms))

            return self.write(work, "retry_many")

        return self._json_search(flt.search, run)

    def _insert_retries(self, conn: Conn, rows: builtins.list[JobRow]) -> builtins.list[JobRow]:
        q = self.q
        new_queues = {r[L.C_QUEUE]: r for r in rows if r[L.C_QUEUE] not in self._known_queues}
        sent: builtins.list[psycopg.Cursor[Any]] = []
        with conn.pipeline():
            if new_queues:
                conn.execute(q.ADVISORY_XACT_LOCK, (q.queues_lock_key,))
                for name, r in new_queues.items():
                    conn.execute(q.REGISTER_QUEUE, (name, r[L.C_TYPE], r[L.C_CREATED_AT]))
            for r in rows:
                sent.append(conn.execute(q.INSERT_RETRY, _retry_params(r)))
                if r[L.C_STEP] is not None:
                    conn.execute(q.COPY_DEPS, (r[L.C_ID], r[L.C_RETRY_OF]))
        out: builtins.list[JobRow] = []
        for cur in sent:
            row = cur.fetchone()
            if row is None:  # an INSERT ... VALUES always returns its row
                raise WriteTransactionFailed("retry: an insert returned no row")
            out.append(tuple(row))
        return out

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> JobRow | None:
        return _row_or_none(self.read(lambda c: c.execute(self.q.GET_JOB, (job_id,)).fetchone()))

    # -- workflows --------------------------------------------------------------------

    def enqueue_workflow(self, wf: NewWorkflow, conn: Conn | None = None) -> bool:
        q = self.q

        def work(c: Conn) -> bool:
            new_queues = {
                r[L.C_QUEUE]: r for r in wf.rows if r[L.C_QUEUE] not in self._known_queues
            }
            head = (wf.id, wf.name, wf.created_at, wf.retry_of)
            if wf.exists_ok and c.execute(q.INSERT_WORKFLOW_ONCE, head).fetchone() is None:
                return False  # written already (the id's row is taken, or being taken)
            with c.pipeline():
                if not wf.exists_ok:
                    c.execute(q.INSERT_WORKFLOW, head)
                if new_queues:
                    c.execute(q.ADVISORY_XACT_LOCK, (q.queues_lock_key,))
                    for name, r in new_queues.items():
                        c.execute(q.REGISTER_QUEUE, (name, r[L.C_TYPE], r[L.C_CREATED_AT]))
                for row, left in zip(wf.rows, wf.left, strict=True):
                    c.execute(q.INSERT_WORKFLOW_JOB, _workflow_job_params(row, left))
                for edge in wf.edges:
                    c.execute(q.INSERT_JOB_DEP, edge)
            return True

        if conn is not None:
            written = work(conn)
            conn.execute(q.NOTE_CHANGE)
            return written
        return self.write(work, "enqueue_workflow")

    def get_workflow(self, workflow_id: str) -> WorkflowHead | None:
        row = self.read(lambda c: c.execute(self.q.GET_WORKFLOW, (workflow_id,)).fetchone())
        return None if row is None else WorkflowHead(*row)

    def retry_workflow(
        self, workflow_id: str, *, enqueued_by: str, now_ms: int
    ) -> NewWorkflow | str | None:
        q = self.q

        def work(c: Conn) -> NewWorkflow | str | None:
            c.execute(q.ADVISORY_XACT_LOCK, (q.retry_lock_key,))
            head = c.execute(q.GET_WORKFLOW, (workflow_id,)).fetchone()
            if head is None:
                return None
            rows = [tuple(r) for r in c.execute(q.WORKFLOW_JOBS, (workflow_id,)).fetchall()]
            edges = observe.workflow_edges(c, self._ident, workflow_id)
            plan = plan_workflow_retry(
                WorkflowHead(*head), rows, edges, enqueued_by=enqueued_by, now_ms=now_ms
            )
            if isinstance(plan, NewWorkflow):
                self.enqueue_workflow(plan, conn=c)
            return plan

        return self.write(work, "retry_workflow")

    def rate_room(
        self, bucket: str, limit: int, per_ms: int, now_ms: int
    ) -> tuple[int, int | None]:
        win = self.read(
            lambda c: rate.window(_executor(c), self._rate_sql, bucket, limit, per_ms, now_ms)
        )
        return win.room, win.wait_until

    def stranded_waiting(self, limit: int) -> builtins.list[str]:
        def read(c: Conn) -> builtins.list[str]:
            has = c.execute(self.q.HAS_JOB_DEPS).fetchone()
            if has is None or not has[0]:
                return []  # a schema older than workflows
            return [r[0] for r in c.execute(self.q.STRANDED_WAITING, (limit,)).fetchall()]

        return self.read(read)

    def workflow_jobs(self, workflow_id: str) -> builtins.list[JobRow]:
        return self._rows(self.q.WORKFLOW_JOBS, (workflow_id,))

    def downstream_jobs(self, job_ids: Sequence[str]) -> builtins.list[JobRow]:
        return self._rows(self.q.DOWNSTREAM_JOBS, (list(job_ids),))

    def upstream_outputs(self, job_id: str) -> builtins.list[tuple[str | None, str | None, bool]]:
        rows = self.read(lambda c: c.execute(self.q.UPSTREAM_OUTPUTS, (job_id,)).fetchall())
        return [(r[0], r[1], bool(r[2])) for r in rows]

    def cancel_workflow(self, workflow_id: str, error: str, now_ms: int) -> builtins.list[JobRow]:
        def work(c: Conn) -> builtins.list[JobRow]:
            out: builtins.list[JobRow] = []
            for status in ("waiting", "delayed", "pending"):
                cur = c.execute(
                    self.q.CANCEL_WORKFLOW_STATUS, (now_ms, now_ms, error, workflow_id, status)
                )
                out += [tuple(r) for r in cur.fetchall()]
            return out

        return self.write(work, "cancel_workflow")

    def terminal_among(self, ids: Sequence[str]) -> list[JobRow]:
        if not ids:
            return []
        out: list[JobRow] = []
        for start in range(0, len(ids), _TERMINAL_CHUNK):
            out.extend(
                self._rows(self.q.TERMINAL_AMONG, (list(ids[start : start + _TERMINAL_CHUNK]),))
            )
        return out

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[JobRow]:
        return [tuple(r) for r in self.read(lambda c: c.execute(sql, params).fetchall())]

    def list(self, flt: JobFilter, *, limit: int, offset: int) -> list[JobRow]:
        def run(safe: bool) -> list[JobRow]:
            where, params = _where(flt, self._ident, safe)
            sql = self.q.LIST_JOBS.replace("{where}", where)
            return self._rows(sql, (*params, limit, offset))

        return self._json_search(flt.search, run)

    def count(self, flt: JobFilter, *, cap: int | None = None) -> int:
        if flt.kept_countable:
            kept = self.read(lambda c: observe.kept_count(c, self._ident, flt.status, flt.queue))
            if kept is not None:
                return kept if cap is None else min(kept, cap)

        def run(safe: bool) -> int:
            where, params = _where(flt, self._ident, safe)
            if cap is not None:
                sql = self.q.COUNT_JOBS_UP_TO.replace("{where}", where)
                params = (*params, cap)
            else:
                sql = self.q.COUNT_JOBS.replace("{where}", where)
            return int(self.read(lambda c: _scalar(c.execute(sql, params).fetchone())) or 0)

        return self._json_search(flt.search, run)

    def _json_search(self, search: Search | None, run: Callable[[bool], T]) -> T:
        """`run(safe)`: a statement holding `search`, its JSON field read with the plain
        `::jsonb` cast (`safe` False: a third of the time of the exception-guarded
        `json_field` over a million rows), unless the field has a search index, whose
        expression the statement must spell to use it, or the cast met a row that is not
        JSON (SQLSTATE 22P02; a hand-written row), when it runs again with `safe`."""
        field = None if search is None else search.field
        if field is None:
            return run(False)
        if self.read(lambda c: search_index.has_index(c, self._ident, field)):
            return run(True)
        try:
            return run(False)
        except StorageError as exc:
            if exc.params.get("sqlstate") != "22P02":
                raise
            return run(True)

    def gc(self, before_ms: int, *, batch: int = 1000) -> int:
        total = 0
        while True:
            n = self.write(functools.partial(self._gc_batch, before_ms, batch), "gc")
            total += n
            if n < batch:
                if total:
                    self._stmt(lambda c: c.execute(self.q.GC_WORKFLOWS), "gc")
                self.write(functools.partial(self._fold_counts, before_ms), "gc")
                return total

    def _fold_counts(self, before_ms: int, conn: Conn) -> None:
        """The kept counts' tidying (migration 12): rows of gone sessions into slot 0,
        and the chart's minutes a day older than `before_ms` dropped."""
        found = conn.execute(self.q.HAS_JOB_COUNTS).fetchone()
        if found is None or not found[0]:
            return
        conn.execute(self.q.FOLD_COUNTS)
        conn.execute(self.q.FOLD_MINUTES)
        conn.execute(self.q.GC_MINUTES, (before_ms // 60_000 - MINUTES_KEPT,))

    def _gc_batch(self, before_ms: int, batch: int, conn: Conn) -> int:
        # Serialised with re-runs, which write edges to old jobs (Queries.GC_TERMINAL).
        conn.execute(self.q.ADVISORY_XACT_LOCK, (self.q.retry_lock_key,))
        return int(conn.execute(self.q.GC_TERMINAL, (before_ms, batch)).rowcount)

    # -- observers (read-only) ------------------------------------------------------
    # The statements are in postgres/observe.py; every one is a single read.

    @functools.cached_property
    def _ident(self) -> str:
        return quote_ident(self.schema)

    def schema_version(self) -> int:
        return self.read(lambda c: schema_version(c, self.schema))

    def queue_counts(self) -> builtins.list[QueueCounts]:
        return self.read(lambda c: observe.queue_counts(c, self._ident))

    def queue_settings(self) -> builtins.list[QueueSettingsRecord]:
        return self.read(lambda c: observe.queue_settings(c, self._ident))

    def update_queue_settings(
        self, queue: str, changes: Mapping[str, Any], now_ms: int
    ) -> QueueSettingsRecord | None:
        q = self.q

        def work(conn: Conn) -> QueueSettingsRecord | None:
            conn.execute(q.ADVISORY_XACT_LOCK, (f"{q.queues_lock_key}:settings:{queue}",))
            row = conn.execute(q.QUEUE_SETTINGS_FULL, (queue,)).fetchone()
            current = None if row is None else settings.record_of(queue, row)
            new = settings.merged(queue, current, changes, now_ms)
            if new is None:
                conn.execute(q.DELETE_QUEUE_SETTINGS, (queue,))
            else:
                conn.execute(
                    q.UPSERT_QUEUE_SETTINGS,
                    (queue, new.concurrency, new.rate_limit, new.rate_per_ms, new.paused, now_ms),
                )
            return new

        return self.write(work, "queue settings")

    def worker_records(self) -> builtins.list[WorkerRecord]:
        return self.read(lambda c: observe.worker_records(c, self._ident))

    def leader_lease(self) -> LeaderLease | None:
        return self.read(lambda c: observe.leader_lease(c, self._ident))

    def schedule_records(self) -> builtins.list[ScheduleRecord]:
        return self.read(lambda c: observe.schedule_records(c, self._ident))

    def job_metrics(self, bounds_ms: tuple[int, ...]) -> JobMetrics:
        return self.read(lambda c: observe.job_metrics(c, self._ident, bounds_ms))

    def throughput(self, first_minute: int, end_minute: int) -> dict[int, tuple[int, int]]:
        return self.read(lambda c: observe.throughput(c, self._ident, first_minute, end_minute))

    def count_finished_before(self, before_ms: int) -> int:
        return self.read(lambda c: observe.count_finished_before(c, self._ident, before_ms))

    def has_job_of_type(self, type_name: str) -> bool:
        return self.read(lambda c: observe.has_job_of_type(c, self._ident, type_name))

    def storage_facts(self) -> StorageFacts:
        return self.read(observe.storage_facts)

    # -- the audit log ------------------------------------------------------------------

    def record_audit(
        self, at_ms: int, actor: str, action: str, target: str, detail: str
    ) -> AuditRecord:
        return self.write(
            lambda c: audit.insert_audit(c, self._ident, at_ms, actor, action, target, detail),
            "audit",
        )

    def audit_records(
        self, *, limit: int, offset: int = 0, actor: str | None = None, action: str | None = None
    ) -> builtins.list[AuditRecord]:
        return self.read(
            lambda c: audit.audit_records(c, self._ident, limit, offset, actor, action)
        )

    def count_audit(self, *, actor: str | None = None, action: str | None = None) -> int:
        return self.read(lambda c: audit.count_audit(c, self._ident, actor, action))

    # -- search indexes (DESIGN.md §8.9) -------------------------------------------------

    def add_search_index(self, field: SearchField, now_ms: int) -> bool:
        s = self._ident
        registered = self._stmt(
            lambda c: c.execute(search_index.REGISTERED.format(s=s), (field.name,)).fetchone(),
            "search_index",
        )
        if registered is not None:
            return False
        self._on_own_connection(lambda c: search_index.build_index(c, s, field))
        row = (field.name, index_name(field), now_ms)
        return self._stmt(
            lambda c: c.execute(search_index.INSERT.format(s=s), row).fetchone() is not None,
            "search_index",
        )

    def drop_search_index(self, field: SearchField) -> bool:
        s = self._ident
        gone = self._stmt(
            lambda c: c.execute(search_index.DELETE.format(s=s), (field.name,)).fetchone(),
            "search_index",
        )
        if gone is None:
            return False
        self._on_own_connection(lambda c: search_index.drop_index(c, s, str(gone[0])))
        return True

    def _on_own_connection(self, work: Callable[[Conn], None]) -> None:
        """`work` on an autocommit connection of its own: `CREATE/DROP INDEX CONCURRENTLY`
        cannot run in a transaction, and must not hold the writer while it reads every
        row."""
        conn = self._connect("search_index")
        try:
            work(conn)
        except psycopg.Error as exc:
            raise _storage_error(exc, "search_index", None) from exc
        finally:
            conn.close()

    def search_indexes(self) -> builtins.list[SearchIndexRecord]:
        return self.read(lambda c: search_index.search_indexes(c, self._ident))

    # -- workflows, observed (the console's reads, DESIGN.md §8.9) ---------------------
    # Kept apart from the workflow writes above: these only read, in one statement each.

    def list_workflows(
        self, *, limit: int, offset: int = 0, name: str | None = None
    ) -> builtins.list[WorkflowRecord]:
        return self.read(lambda c: observe.workflow_records(c, self._ident, name, limit, offset))

    def count_workflows(self, *, name: str | None = None) -> int:
        return self.read(lambda c: observe.count_workflows(c, self._ident, name))

    def workflow_edges(self, workflow_id: str) -> builtins.list[tuple[str, str, str, bool]]:
        return self.read(lambda c: observe.workflow_edges(c, self._ident, workflow_id))


def _key_kept_changing(job: NewJob) -> WriteTransactionFailed:
    return WriteTransactionFailed(
        f"enqueue: idempotency key {job.idempotency_key!r} kept changing owner",
        params={"label": "enqueue", "idempotency_key": job.idempotency_key},
    )


def _job_of(row: JobRow) -> NewJob:
    return NewJob(
        id=row[L.C_ID],
        type=row[L.C_TYPE],
        status=row[L.C_STATUS],
        queue=row[L.C_QUEUE],
        priority=row[L.C_PRIORITY],
        payload=row[L.C_PAYLOAD],
        max_attempts=row[L.C_MAX_ATTEMPTS],
        timeout_ms=row[L.C_TIMEOUT],
        idempotency_key=row[L.C_KEY],
        parent_id=row[L.C_PARENT],
        schedule_id=row[L.C_SCHEDULE],
        metadata=row[L.C_METADATA],
        enqueued_by=row[L.C_ENQUEUED_BY],
        scheduled_at=row[L.C_SCHEDULED_AT],
        created_at=row[L.C_CREATED_AT],
    )


def _solo(conn: Conn, q: Queries, job: NewJob) -> JobRow:
    row = conn.execute(q.ENQUEUE_SOLO, _enqueue_params(job)).fetchone()
    if row is None:
        raise WriteTransactionFailed("enqueue: the entry returned no row")
    return tuple(row)


def _plain_batch(jobs: Sequence[NewJob]) -> tuple[dict[int, str], str | None]:
    """The entries `ENQUEUE_PLAIN` inserts (no key, no parent), by position with their
    ids, and its parameter; none (and None) for fewer than two, where one statement
    each costs no more."""
    plain = {
        i: job.id
        for i, job in enumerate(jobs)
        if job.idempotency_key is None and job.parent_id is None
    }
    if len(plain) < 2:
        return {}, None
    rows = [
        (job.id, job.type, job.status, job.queue, job.priority, job.payload,
         job.max_attempts, job.timeout_ms, job.schedule_id, job.metadata,
         job.enqueued_by, job.scheduled_at, job.created_at)
        for job in (jobs[i] for i in plain)
    ]  # fmt: skip
    return plain, json.dumps(rows, separators=(",", ":"), ensure_ascii=False)


def _fill_plain(
    out: list[JobRow] | list[JobRow | None],
    cur: psycopg.Cursor[Any],
    plain: Mapping[int, str],
) -> None:
    """`ENQUEUE_PLAIN`'s rows into their entries' places (RETURNING names rows, in no
    promised order)."""
    by_id = {row[L.C_ID]: tuple(row) for row in cur.fetchall()}
    for i, job_id in plain.items():
        row = by_id.get(job_id)
        if row is None:
            raise WriteTransactionFailed("enqueue: an entry returned no row")
        out[i] = row


def _enqueue_params(job: NewJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "type": job.type,
        "status": job.status,
        "queue": job.queue,
        "priority": job.priority,
        "payload": job.payload,
        "max_attempts": job.max_attempts,
        "timeout_ms": job.timeout_ms,
        "key": job.idempotency_key,
        "parent": job.parent_id,
        "schedule": job.schedule_id,
        "metadata": job.metadata,
        "enqueued_by": job.enqueued_by,
        "scheduled_at": job.scheduled_at,
        "created_at": job.created_at,
    }


# The columns a fresh row's INSERT writes, in the order `INSERT_WORKFLOW_JOB` and
# `INSERT_RETRY` both list them before their own last ones.
_FRESH_COLUMNS = (
    L.C_ID,
    L.C_TYPE,
    L.C_STATUS,
    L.C_QUEUE,
    L.C_PRIORITY,
    L.C_PAYLOAD,
    L.C_MAX_ATTEMPTS,
    L.C_TIMEOUT,
    L.C_KEY,
    L.C_PARENT,
    L.C_SCHEDULE,
    L.C_METADATA,
    L.C_ENQUEUED_BY,
    L.C_SCHEDULED_AT,
    L.C_CREATED_AT,
    L.C_UPDATED_AT,
)


# Cancelled in this order, as `cancel_workflow` does: a waiting row before any upstream
# row whose cancel would release it.
_NOT_RUNNING_YET = ("'waiting'", "'pending', 'delayed'")


def _workflow_job_params(row: JobRow, left: int) -> tuple[Any, ...]:
    """`Queries.INSERT_WORKFLOW_JOB`'s parameters for a workflow's fresh row."""
    return (
        *(row[c] for c in _FRESH_COLUMNS),
        row[L.C_WORKFLOW],
        row[L.C_STEP],
        left,
        row[L.C_RETRY_OF],
    )


def _retry_params(row: JobRow) -> tuple[Any, ...]:
    """`Queries.INSERT_RETRY`'s parameters for a `retry_row`."""
    return (*(row[c] for c in _FRESH_COLUMNS), row[L.C_RETRY_OF], row[L.C_STEP])


def _first_row(*cursors: psycopg.Cursor[Any]) -> JobRow | None:
    """The row of the first statement that returned one (they are mutually exclusive)."""
    for cur in cursors:
        row = cur.fetchone()
        if row is not None:
            return tuple(row)
    return None


def _applied(cur: psycopg.Cursor[Any]) -> JobRow | None:
    return None if cur.fetchone() is None else APPLIED


def _outcomes_json(outcomes: Sequence[Outcome]) -> str:
    """FINISH_MANY's outcomes: a JSON array of one array each (its column order)."""
    return json.dumps(
        [
            (
                o.job_id,
                o.worker_id,
                o.attempt,
                o.kind,
                o.output,
                o.error,
                o.progress,
                o.progress_detail,
                o.started_at,
                o.logs,
            )
            for o in outcomes
        ],
        separators=(",", ":"),
        allow_nan=False,  # progress is checked finite when reported (`check_progress`)
    )


def _note_matched(cur: psycopg.Cursor[Any], matched: dict[str, JobRow], rows: bool) -> None:
    """The batch's answer: each row whose fence matched, whole or as APPLIED."""
    for row in cur.fetchall():
        matched[row[0]] = tuple(row) if rows else APPLIED


def _row_or_none(row: Any) -> JobRow | None:
    return None if row is None else tuple(row)


def _scalar(row: Any) -> Any:
    return None if row is None else row[0]


def _rollback(conn: Conn) -> None:
    """Close a transaction a failed pipeline left open; never masks the primary error."""
    if _tx_status(conn) in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        try:
            conn.execute(b"ROLLBACK")
        except psycopg.Error:
            pass


def _tx_status(conn: Conn) -> TransactionStatus | None:
    try:
        return conn.info.transaction_status
    except Exception:
        return None


def reader_lock_timeout() -> str:
    """`READER_LOCK_TIMEOUT` as a `lock_timeout` setting, read when a reader is set up."""
    return f"{int(READER_LOCK_TIMEOUT * 1000)}ms"


def _storage_error(
    exc: psycopg.Error, label: str, conn: Conn | None, *, attempts: int = 1
) -> StorageError:
    """Map a psycopg error onto the public `StorageError` tree (DB_BUSY, DB_FULL, ...)."""
    state = exc.sqlstate
    status = None if conn is None else _tx_status(conn)
    params: dict[str, object] = {
        "label": label,
        "sqlstate": state,
        "pg_error": str(exc),
        "attempts": attempts,
        "transaction_status": None if status is None else status.name,
    }
    if conn is not None and status not in (TransactionStatus.IDLE, None):
        return WriteTransactionFailed(
            f"{label}: the transaction could not be closed cleanly ({exc})", params=params
        )
    if state in _BUSY_STATES:
        return DatabaseBusy(f"{label}: the database is busy; try again later", params=params)
    if state in _FULL_STATES:
        return DatabaseFull(f"{label}: the database disk is full", params=params)
    if isinstance(exc, psycopg.OperationalError) and state is None:
        return DatabaseBusy(f"{label}: the database is unreachable ({exc})", params=params)
    return WriteTransactionFailed(f"{label}: {exc}", params=params)


def _where_queue_type(queue: str | None, type_name: str | None) -> tuple[str, tuple[str, ...]]:
    return equal_to((("queue", queue), ("type", type_name)), "%s")


_KNOWN_STATUSES = frozenset(STATUSES)


def _status_in(statuses: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    """`status` among `statuses`, known ones as literals: a partial index by status
    (migration 15) serves only a condition that names its status, which a parameter
    does not in a prepared (generic) plan."""
    if _KNOWN_STATUSES.issuperset(statuses):
        named = ", ".join(sorted("'" + x + "'" for x in set(statuses)))
        return f"status IN ({named})", ()
    return "status = ANY(%s)", (list(statuses),)


def _where(flt: JobFilter, s: str, safe: bool = False) -> tuple[str, tuple[Any, ...]]:
    """The WHERE of a listing; `s` is the quoted schema (for its functions)."""
    parts: list[str] = []
    params: list[Any] = []
    if flt.status:
        status, status_params = _status_in(flt.status)
        parts.append(status)
        params += status_params
    for column, value in (
        ("queue", flt.queue),
        ("type", flt.type),
        ("schedule_id", flt.schedule_id),
        ("parent_id", flt.parent_id),
        ("workflow_id", flt.workflow_id),
    ):
        if value is not None:
            parts.append(f"{column} = %s")
            params.append(value)
    if flt.search is not None:
        term, term_params = _search_where(flt.search, s, safe)
        parts.append(term)
        params += term_params
    return (" WHERE " + " AND ".join(parts) if parts else ""), tuple(params)


def _search_where(term: Search, s: str, safe: bool) -> tuple[str, list[Any]]:
    """The condition of a console search, as SQLite's `queries.search_sql`; `s` is the
    quoted schema (for its functions). `safe`: a JSON field read by `json_field`, which
    a row that is not JSON cannot fail, and which a search index serves
    (`PostgresStore._json_search` says when)."""
    if term.kind == "id":
        return "id LIKE %s", [term.like_prefix()]  # backslash is PostgreSQL's default escape
    if term.kind == "error":
        # jobs_error_code_idx's expression (migration 12): NULL for a non-JSON error.
        return f"(error IS NOT NULL AND {s}.error_code(error) = %s)", [term.value]
    # The JSON value as text, as SQLite's `queries.search_sql`.
    assert term.field is not None
    if safe:
        return f"{search_index.field_expr(term.field, s)} = %s", [term.value]
    return f"{term.kind}::jsonb #>> %s = %s", [list(term.path), term.value]


def _executor(conn: Conn) -> rate.Execute:
    def ex(sql: str, params: Sequence[Any]) -> list[Any]:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description is not None else []

    return ex


def _claim_params(req: ClaimRequest, cap: int, limit: int, now_ms: int) -> dict[str, Any]:
    return {
        "excluded": list(req.exclude_owners),
        "queue": req.queue,
        "now": now_ms,
        "types": list(req.types),
        "qcap": cap,
        "gcap": req.global_cap,
        "limit": limit,
        "worker": req.worker_id,
    }


def _claim_answer(
    rows: list[Any],
    cap: int,
    in_queue: int,
    running: int,
    global_cap: int,
    limit: int,
    wait: int | None,
) -> ClaimResult:
    free = cap - in_queue
    if free <= 0:
        # `queue_full` stays False here: the confirm delay it triggers in dispatch
        # (`engine.py`) answers SQLite's refill gaps, which this backend does not have.
        return ClaimResult([], False, cap=cap)
    global_free = global_cap - running
    if global_free <= 0:
        return ClaimResult([], True, cap=cap)
    n = min(free, global_free, limit)
    jobs = [ClaimedJob(*r[5:]) for r in rows if r[5] is not None]
    # RETURNING order is unspecified; run them in claim order.
    jobs.sort(key=lambda j: (j.priority, j.scheduled_at, j.id))
    limited_by_global = global_free < min(free, limit)
    return ClaimResult(jobs, limited_by_global and len(jobs) == n, rate_wait=wait, cap=cap)


# A claim's statements, sent inside a transaction (they answer how to fetch their rows),
# and how to read those rows once it committed.
_ClaimParts = tuple[Callable[[Conn], Callable[[], list[Any]]], Callable[[list[Any]], ClaimResult]]


def _spread_params(
    request: SpreadRequest, names: list[str], caps: list[int], now_ms: int
) -> dict[str, Any]:
    return {
        "names": names,
        "caps": caps,
        "excluded": list(request.exclude_owners),
        "now": now_ms,
        "types": list(request.types),
        "gcap": request.global_cap,
        "limit": request.limit,
        "worker": request.worker_id,
        "turn": max(1, request.turn),
    }


def _spread_answer(rows: list[Any], global_cap: int, *, counted: bool = False) -> ClaimResult:
    """Rows of CLAIM_SPREAD: total, queue, free, cap shown, paused, rate limit, claimed.
    `counted`: the caller counted the settings and windows (`_spread_rated`), so the
    statement's free slots stand as they are."""
    if not rows:
        return ClaimResult([], False, free={})
    running = int(rows[0][0])
    if running < 0:
        return ClaimResult([], False, unregistered=True)
    free: dict[str, int] = {}
    caps: dict[str, int] = {}
    waits: dict[str, int] = {}
    for r in rows:
        name = str(r[1])
        caps[name] = int(r[3])
        if not counted and (r[4] or r[5] is not None):
            free[name] = 0
            if r[5] is not None and not r[4]:
                waits[name] = 0
        else:
            free[name] = int(r[2])
    jobs = [ClaimedJob(*r[6:]) for r in rows if r[6] is not None]
    global_free = global_cap - running
    return ClaimResult(
        jobs,
        global_free <= 0 or len(jobs) >= global_free,
        free=free,
        caps=caps,
        rate_waits=waits,
    )
