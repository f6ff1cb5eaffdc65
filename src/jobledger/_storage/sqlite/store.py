"""The SQLite backend: the `Store` operations over one database file.

Connections: one writer (all writes, serialised by `self.lock`, an RLock, so producers
on any thread can enqueue), and one reader per thread for observers. A ":memory:"
database cannot be shared between connections, so there the writer also serves reads,
under the same lock.

Every write goes through `tx.with_write_tx` (BEGIN IMMEDIATE, guarded rollback, whole-
transaction retry on BUSY). All operations here are idempotent as whole transactions —
each re-reads what it needs inside the transaction and is a compare-and-set — so they
are safe to replay.

Unique and debounced enqueues (`enqueue_keyed`; `interface.KeyRule`) are lookups and
writes in one such transaction, so the write lock makes them atomic across processes. The
live-key index stays what it was (one live row per stored key): a job debounced while a
running job holds its key is written under a successor key (`interface.successor_key`),
which the debounce lookup finds in the same index range as the key itself.
"""

from __future__ import annotations

import builtins
import itertools
import json
import logging
import operator
import os
import sqlite3
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, cast

from jobledger._core import ids
from jobledger._core.search import SearchField
from jobledger._storage import layout as L
from jobledger._storage import rate, settings, tx
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
    Reissued,
    RetryFilter,
    SpreadRequest,
    WorkflowHead,
    batchable,
    fresh_row,
    latest_versions,
    retry_row,
    retry_rows,
    successor_key,
)
from jobledger._storage.observe import (
    MINUTES_KEPT,
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
from jobledger._storage.records import AttemptRow
from jobledger._storage.schedule_ops import ScheduleOps
from jobledger._storage.sqlite import audit, observe, search_index
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.connections import (
    Synchronous,
    WriteGate,
    open_reader,
    open_writer,
)
from jobledger._storage.sqlite.counts import EndCounts
from jobledger._storage.sqlite.files import FileIdentity
from jobledger._storage.sqlite.group import EPOCHS, GroupTx, WriterLock
from jobledger._storage.sqlite.keys import key_of, keys_of
from jobledger._storage.sqlite.migrate import migrate, migrate_connection
from jobledger._storage.worker_ops import WorkerOps
from jobledger._storage.workflow_retry import plan_workflow_retry
from jobledger.errors import JobNotFound, StorageError

__all__ = ["SqliteStore"]

log = logging.getLogger("jobledger.storage")

# `write` labels of the engine's claims and finalizes: they take only waiting rows and
# end only the rows of attempts that ended, so they never move a row an attempt still
# runs, and leave `WriterLock.epoch` as it is (`group.py`, the fence's proof). Every
# other write moves it.
_KEEPS_FENCES = frozenset(("claim", "finalize"))

T = TypeVar("T")
MIN_SQLITE = (3, 35, 0)
_LIVE = ("pending", "delayed", "running")
# Inside the claim: the running rows of its queue and of all queues, in one statement.
# The claim's two counts and the queue's settings (DESIGN.md §8.7), one snapshot.
_RUNNING_COUNTS = (
    f"SELECT ({q.COUNT_RUNNING_IN_QUEUE}), ({q.COUNT_RUNNING}), s.concurrency, s.paused, "
    "s.rate_limit, s.rate_per_ms FROM (SELECT 1) LEFT JOIN queue_settings s ON s.queue = ?"
)
# One statement, so one snapshot: the claim's two counts, whether anything is due, and
# the queue's cap override and pause.
_CLAIM_PRECHECK = (
    f"SELECT ({q.COUNT_RUNNING_IN_QUEUE}), ({q.COUNT_RUNNING}), EXISTS (SELECT 1 FROM jobs "
    "WHERE status = 'pending' AND cancel_requested = 0 AND queue = ? AND scheduled_at <= ?), "
    "s.concurrency, s.paused FROM (SELECT 1) LEFT JOIN queue_settings s ON s.queue = ?"
)
_SPREAD_SETTINGS = (
    "SELECT queue, concurrency, paused, rate_limit, rate_per_ms FROM queue_settings "
    "WHERE queue IN (SELECT value FROM json_each(?))"
)
# Without statistics the planner would walk a fold's rows by the primary key, over every
# row of the queue's window, folded or not: the partial index holds the unfolded alone.
RATE_SQL = rate.RateSql.for_placeholder(
    "?", listed="json_each(?) k", unfolded_hint="INDEXED BY rate_log_unfolded_idx"
)
_SETTINGS_ROW = (
    "SELECT concurrency, rate_limit, rate_per_ms, paused, updated_at FROM queue_settings "
    "WHERE queue = ?"
)
_SETTINGS_UPSERT = (
    "INSERT INTO queue_settings (queue, concurrency, rate_limit, rate_per_ms, paused, "
    "updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (queue) DO UPDATE SET "
    "concurrency = excluded.concurrency, rate_limit = excluded.rate_limit, "
    "rate_per_ms = excluded.rate_per_ms, paused = excluded.paused, "
    "updated_at = excluded.updated_at"
)
_TYPE, _QUEUE, _KEY, _PARENT, _CREATED = L.C_TYPE, L.C_QUEUE, L.C_KEY, L.C_PARENT, L.C_CREATED_AT
_TIMEOUT, _SCHEDULE = L.C_TIMEOUT, L.C_SCHEDULE
_ID, _PAYLOAD, _STATUS, _SCHEDULED_AT = L.C_ID, L.C_PAYLOAD, L.C_STATUS, L.C_SCHEDULED_AT
# A fresh row's values in `q.INSERT_JOB`'s parameter order after its key, picked in C;
# all but the id and payload, in `q.insert_shared_sql`'s.
_insert_params = operator.itemgetter(L.C_ID, L.C_PAYLOAD, *q.SHARED_COLUMNS)
_shared_params = operator.itemgetter(*q.SHARED_COLUMNS)
# `q.INSERT_PLAIN`'s parameters after the key, up to its last two.
_plain_params = operator.itemgetter(
    L.C_ID, L.C_PAYLOAD, L.C_TYPE, L.C_STATUS, L.C_QUEUE, L.C_PRIORITY, L.C_MAX_ATTEMPTS,
    L.C_METADATA, L.C_ENQUEUED_BY, L.C_SCHEDULED_AT, L.C_CREATED_AT, L.C_UPDATED_AT,
)  # fmt: skip
_id_of = operator.itemgetter(L.C_ID)
# Rows per statement of a shared batch (14 + 300 parameters); 100 to 200 measured best.
SHARED_CHUNK = 100
# 32 rows of 17 parameters: within SQLite's oldest bound-parameter limit (999).
_CHUNK = 32
_INSERT_HEAD, _INSERT_VALUES = q.INSERT_JOB.rsplit(" VALUES ", 1)
_INSERT_CHUNK = f"{_INSERT_HEAD} VALUES {', '.join([_INSERT_VALUES] * _CHUNK)}"
# How often one statement's rows get fresh ids after finding a row key taken.
_REISSUES = 8


class SqliteStore(ScheduleOps, WorkerOps):
    def __init__(
        self,
        path: str,
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 1.0,
    ) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            # RETURNING (3.35) is on every write path; UPDATE ... FROM (3.33) in finalize.
            raise StorageError(
                f"jobledger needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer; this "
                f"Python uses {sqlite3.sqlite_version}",
                code="DB_SQLITE_TOO_OLD",
                params={"sqlite_version": sqlite3.sqlite_version},
            )
        self.path = path
        # What the runtime needs to know of this backend, the same names on every store.
        from jobledger._storage.sqlite import leader as leader_ops
        from jobledger._storage.sqlite import workers

        self.kind = "sqlite"
        self.q = q
        self._worker_statements = workers
        self._lease_statements = leader_ops
        self.memory = path == ":memory:" or path == ""
        self._busy_timeout = busy_timeout
        self._synchronous: Synchronous = synchronous
        if not self.memory:
            migrate(path)
        self.conn = open_writer(
            ":memory:" if self.memory else path,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
        )
        if self.memory:
            migrate_connection(self.conn)
        self._file = FileIdentity(os.path.abspath(path))
        if not self.memory:
            self._file.record()
        self._told_replaced = False
        self.lock = WriterLock()
        self._group: GroupTx | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._known_queues: set[str] = set()
        self._closed = False
        self._generation = 0  # bumped by close(): thread-local readers of older ones are stale
        # SQLite connections must never cross fork() (a preloading server, multiprocessing
        # "fork"): the child drops the parent's and opens its own on first use.
        self._inherited: list[sqlite3.Connection] = []
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forked(ref))

    # -- plumbing -------------------------------------------------------------------

    def _after_fork(self) -> None:
        """In a forked child: abandon (never use, never close) the parent's connections.

        Closing them here could run SQLite's last-connection cleanup against files the
        parent still uses; they stay referenced until this process exits.
        """
        if self.memory:
            return  # a private copy of the parent's memory: nothing is shared
        self._inherited.append(self.conn)
        self._inherited.extend(self._readers)
        self.lock = WriterLock()
        self._group = None
        self._readers_lock = threading.Lock()
        self._readers = []
        self._local = threading.local()
        self._generation += 1
        self._closed = True  # the next use opens a fresh writer

    def _reopen_if_closed(self) -> None:
        # A stopped manager stays a producer and an observer (docs/reference/api.md: enqueue after
        # stop() writes the row): a use after close() opens fresh connections. Call with
        # self.lock held. A closed ":memory:" database is gone, so it stays closed.
        if self._closed and not self.memory:
            self.conn = open_writer(
                self.path, busy_timeout=self._busy_timeout, synchronous=self._synchronous
            )
            # A new connection counts its data_version afresh (`group.py`).
            self.lock.version = None
            self.lock.disturb()
            self._closed = False
            self._file.record()
            self._told_replaced = False

    def write(self, work: Callable[[sqlite3.Connection], T], label: str) -> T:
        with self.lock as lock:
            if label not in _KEEPS_FENCES:
                lock.epoch = next(EPOCHS)  # `lock.disturb()`, inline: every enqueue passes here
            self._reopen_if_closed()
            conn = self.conn
            return tx.with_write_tx(conn, lambda: work(conn), label)

    def write_statement(self, sql: str, params: Sequence[Any], label: str) -> None:
        """A write that is one statement, committed on return.

        Not replayed on BUSY (see `tx.run_write_statement`), like a transaction whose
        BEGIN found the database busy.
        """
        with self.lock:
            self.lock.disturb()
            self._reopen_if_closed()
            try:
                tx.run_write_statement(self.conn, sql, params, label)
            except sqlite3.Error as exc:
                raise tx.storage_error(exc, label) from exc

    def group_tx(self) -> GroupTx:
        """The group that `async with ctx.transaction()` blocks share a commit through
        (`group.py`); one per store."""
        if self._group is None:
            group = GroupTx(
                self.lock,
                self._writer_conn,
                lambda conn, outcomes, now_ms: self._finalize_work(outcomes, now_ms)(conn),
            )
            self.lock.group = group
            self._group = group
        return self._group

    def _writer_conn(self) -> sqlite3.Connection:
        self._reopen_if_closed()
        return self.conn

    @contextmanager
    def user_transaction(self) -> Iterator[sqlite3.Connection]:
        """A caller-driven write transaction (`jobs.write_tx()`); no automatic retry."""
        with self.lock:
            self.lock.disturb()  # the caller's SQL may move any row
            self._reopen_if_closed()
            try:
                with tx.write_transaction(self.conn, "write_tx") as conn:
                    yield conn
            except sqlite3.Error as exc:
                raise tx.storage_error(exc, "write_tx") from exc

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self.memory:
            with self.lock:
                return work(self.conn)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "generation", None) != self._generation:
            conn = open_reader(self.path)
            self._local.conn = conn
            self._local.generation = self._generation
            with self._readers_lock:
                self._readers.append(conn)
        return work(conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._readers_lock:
            self._generation += 1
            readers, self._readers = self._readers, []
        for conn in readers:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        with self.lock:  # commits an open group first (it belongs to this thread, the loop's)
            self.conn.close()

    def report_file_replaced(self) -> bool:
        """Whether `path` no longer names the file the writer has open (deleted, or
        another file moved into place). Logs an ERROR the first time it is seen: the
        heartbeat asks every beat, and one loud line is what an operator needs."""
        if self.memory or not self._file.replaced():
            return False
        if not self._told_replaced:
            self._told_replaced = True
            log.error(
                "the database file %s was deleted or replaced; this worker is writing to an "
                "unlinked file that no other process sees (stop it and start it again on "
                "the right file)",
                self.path,
            )
        return True

    def data_version(self) -> int:
        """Changes whenever *another* connection commits; cheap enough to poll."""
        with self.lock:
            self._reopen_if_closed()
            return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    # -- enqueue --------------------------------------------------------------------

    def enqueue(
        self, jobs: Sequence[NewJob], conn: sqlite3.Connection | None = None
    ) -> list[JobRow]:
        """Insert `jobs`; an entry whose key is live returns the existing row instead.

        Returns, per entry, the row as stored (the existing one on an idempotency hit; a
        row built from the entry otherwise, without reading it back). With `conn`, runs
        inside the caller's open transaction.
        """
        return self.enqueue_rows([fresh_row(job) for job in jobs], conn)

    def enqueue_rows(
        self,
        rows: Sequence[JobRow],
        conn: sqlite3.Connection | None = None,
        rate_keys: Sequence[str | None] | None = None,
    ) -> list[JobRow]:
        """`enqueue` of entries already in row form; returns the entry itself when inserted.
        `rate_keys`: each entry's keyed rate limit key, written in the same transaction."""
        if rate_keys is not None:
            keys = rate_keys

            def work(c: sqlite3.Connection) -> list[JobRow]:
                out = self._enqueue_in(c, rows)
                c.executemany(_SET_RATE_KEY, rate.rate_key_marks(rows, out, keys))
                return out

            return work(conn) if conn is not None else self.write(work, "enqueue")
        if conn is not None:
            return self._enqueue_in(conn, rows)
        if len(rows) == 1:
            row = rows[0]
            key = ids.row_key(row[_ID])
            if (
                key is not None
                and row[_KEY] is None
                and row[_PARENT] is None
                and row[_QUEUE] in self._known_queues
            ):
                # Nothing to look up or register first: the INSERT is the transaction.
                nv, timeout, schedule = q.no_value(), row[_TIMEOUT], row[_SCHEDULE]
                params = (key, *_plain_params(row), nv if timeout is None else timeout,
                          nv if schedule is None else schedule)  # fmt: skip
                try:
                    self.write_statement(q.INSERT_PLAIN, params, "enqueue")
                    return [row]
                except StorageError as exc:
                    if not _key_taken(exc.__cause__):
                        raise
                    # Another process made this row key: the general path reissues it.
        return self.write(lambda c: self._enqueue_in(c, rows), "enqueue")

    def _enqueue_in(self, conn: sqlite3.Connection, rows: Sequence[JobRow]) -> list[JobRow]:
        known = self._known_queues
        new_queues: dict[str, tuple[str, str, int]] = {}
        for row in rows:
            if row[_KEY] is not None or row[_PARENT] is not None:
                return self._enqueue_checked(conn, rows)
            queue = row[_QUEUE]
            if queue not in known and queue not in new_queues:
                new_queues[queue] = (queue, row[_TYPE], row[_CREATED])
        # No keys, no parents: every entry inserts, as given.
        if new_queues:
            conn.executemany(q.REGISTER_QUEUE, new_queues.values())
        return _insert(conn, rows)

    def _enqueue_checked(self, conn: sqlite3.Connection, rows: Sequence[JobRow]) -> list[JobRow]:
        # The lookups (live keys, parents) only ever concern rows written before this
        # batch (a sibling's key is answered from `batch_keys`; a parent cannot be a
        # sibling), so the inserts can all go together at the end.
        out: list[JobRow] = []
        inserts: list[JobRow] = []
        new_queues: dict[str, tuple[str, str, int]] = {}
        batch_keys: dict[str, JobRow] = {}
        parents_seen: set[str] = set()
        for row in rows:
            key = row[_KEY]
            if key is not None:
                hit = batch_keys.get(key)
                if hit is None:
                    hit = conn.execute(q.FIND_LIVE_BY_KEY, (key,)).fetchone()
                if hit is not None:
                    out.append(hit)
                    continue
            parent = row[_PARENT]
            if parent is not None and parent not in parents_seen:
                found = conn.execute(q.PARENT_EXISTS, (key_of(conn, parent), parent))
                if found.fetchone() is None:
                    raise JobNotFound(
                        f"parent job {parent!r} does not exist", params={"parent_id": parent}
                    )
                parents_seen.add(parent)
            queue = row[_QUEUE]
            if queue not in self._known_queues and queue not in new_queues:
                new_queues[queue] = (queue, row[_TYPE], row[_CREATED])
            inserts.append(row)
            if key is not None:
                batch_keys[key] = row
            out.append(row)
        if new_queues:
            conn.executemany(q.REGISTER_QUEUE, new_queues.values())
        inserted = _insert(conn, inserts)
        if any(type(row) is Reissued for row in inserted):
            as_inserted = {id(entry): row for entry, row in zip(inserts, inserted, strict=True)}
            out = [as_inserted.get(id(row), row) for row in out]
        return out

    def enqueue_keyed(
        self,
        rows: Sequence[JobRow],
        rules: Sequence[KeyRule | None],
        conn: sqlite3.Connection | None = None,
        rate_keys: Sequence[str | None] | None = None,
    ) -> list[JobRow]:
        """`enqueue_rows` with a `KeyRule` per entry (see the protocol). One write
        transaction holds the database's only write lock, so its lookups and writes are
        one atomic step against every other process."""

        def work(c: sqlite3.Connection) -> list[JobRow]:
            out = self._enqueue_keyed_in(c, rows, rules)
            if rate_keys is not None:
                c.executemany(_SET_RATE_KEY, rate.rate_key_marks(rows, out, rate_keys))
            return out

        if conn is not None:
            return work(conn)
        return self.write(work, "enqueue")

    def _enqueue_keyed_in(
        self, conn: sqlite3.Connection, rows: Sequence[JobRow], rules: Sequence[KeyRule | None]
    ) -> list[JobRow]:
        out: list[JobRow] = []
        for row, rule in zip(rows, rules, strict=True):
            if rule is None:
                out.append(self._enqueue_checked(conn, [row])[0])
            elif rule.kind == "unique_for":
                key = row[_KEY]
                hit = conn.execute(q.FIND_LIVE_BY_KEY, (key,)).fetchone()
                if hit is None:
                    since = row[_CREATED] - rule.ms
                    hit = conn.execute(q.FIND_ENDED_BY_KEY, (key, since)).fetchone()
                out.append(self._enqueue_checked(conn, [row])[0] if hit is None else hit)
            else:
                out.append(self._debounce(conn, row))
        return latest_versions(out)

    def _debounce(self, conn: sqlite3.Connection, row: JobRow) -> JobRow:
        key = row[_KEY]
        params = (row[_PAYLOAD], row[_STATUS], row[_SCHEDULED_AT], row[_CREATED])
        hit = conn.execute(q.DEBOUNCE_WAITING, (*params, key, key + SUCCESSOR_END)).fetchone()
        if hit is not None:
            return cast(JobRow, hit)
        if conn.execute(q.FIND_LIVE_BY_KEY, (key,)).fetchone() is not None:
            # Running, since no waiting job holds it: the new job waits beside it.
            row = (*row[:_KEY], successor_key(key, row[_ID]), *row[_KEY + 1 :])
        return self._enqueue_checked(conn, [row])[0]

    def remember_queues(self, names: Iterator[str] | Sequence[str]) -> None:
        """Called after COMMIT: these queues are registered and need no further INSERT."""
        self._known_queues.update(names)

    def queues_since(self, seq: int) -> list[tuple[int, str, str]]:
        return self.read(lambda c: c.execute(q.QUEUES_SINCE, (seq,)).fetchall())

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
        mark = self.lock.mark()  # before the claim's transaction (`group.py`)
        if not self.memory:
            # Decided from a WAL read, without the write lock, when the claim would take
            # nothing (caps full, nothing due): idle processes woken by every commit
            # elsewhere would otherwise queue for the lock behind the busy ones. Taking
            # nothing on a committed state is what the transaction would have answered
            # then; a claim that may take rows re-counts everything inside it.
            nothing = self._nothing_to_claim(queue, queue_cap, global_cap, now_ms)
            if nothing is not None:
                return nothing
        request = ClaimRequest(
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
        # The claimed rows become objects after COMMIT: every process waits for the
        # write gate while a transaction is open.
        result = _claim_result(self.write(_claim_work(request, now_ms), "claim"))
        result.mark = mark
        return result

    def claim_spread(self, request: SpreadRequest, now_ms: int) -> ClaimResult:
        mark = self.lock.mark()
        if not self.memory:
            # As in `claim`: a global cap found full on a WAL read takes no write lock, so
            # processes that cannot win a slot do not queue behind those that can.
            running = self.read(lambda c: c.execute(q.COUNT_RUNNING).fetchone()[0])
            if running >= request.global_cap:
                return ClaimResult([], True)
        result = _claim_result(self.write(_spread_work(request, now_ms), "claim"))
        result.mark = mark
        return result

    def finalize_and_claim(
        self, outcomes: Sequence[Outcome], now_ms: int, claim: ClaimRequest | SpreadRequest
    ) -> tuple[list[JobRow | None], ClaimResult | None]:
        """One transaction: the outcomes, then the claim, which counts the slots they
        freed. Other processes never see those slots free, so a busy process keeps its
        share of a shared cap, and a batch costs one commit instead of two.

        The claim runs under a savepoint: when it fails, the outcomes still commit and
        the claim answers None, as if it had been a transaction of its own.
        """
        finish = self._finalize_work(outcomes, now_ms)
        take = (
            _claim_work(claim, now_ms)
            if isinstance(claim, ClaimRequest)
            else _spread_work(claim, now_ms)
        )
        what = claim.queue if isinstance(claim, ClaimRequest) else "several queues"

        def work(conn: sqlite3.Connection) -> tuple[list[JobRow | None], Any]:
            rows = finish(conn)
            conn.execute("SAVEPOINT refill")
            try:
                return rows, take(conn)
            except sqlite3.Error:
                if not conn.in_transaction:  # SQLite rolled the whole transaction back
                    raise
                log.warning("claim on %s failed; retrying shortly", what, exc_info=True)
                conn.execute("ROLLBACK TO refill")
                return rows, None
            finally:
                if conn.in_transaction:
                    conn.execute("RELEASE refill")

        mark = self.lock.mark()
        rows, taken = self.write(work, "finalize")
        if taken is None:
            return rows, None
        result = _claim_result(taken)
        result.mark = mark
        return rows, result

    def writer_busy(self) -> bool:
        """Whether a jobledger writer, in any process, is inside a write transaction on
        this file now (a hint for dispatch; False when it cannot tell)."""
        with self.lock:
            gate: WriteGate | None = (
                None if self._closed else getattr(self.conn, "write_gate", None)
            )
            return gate is not None and gate.busy()

    def _nothing_to_claim(
        self, queue: str, queue_cap: int, global_cap: int, now_ms: int
    ) -> ClaimResult | None:
        """None if a claim may take rows, else the empty answer the claim would give."""
        in_queue, running, due, cap, paused = self.read(
            lambda c: c.execute(_CLAIM_PRECHECK, (queue, queue, now_ms, queue)).fetchone()
        )
        if paused:
            return ClaimResult([], False)
        if cap is not None:
            queue_cap = int(cap)
        if in_queue >= queue_cap:
            return ClaimResult([], False, queue_full=True, cap=queue_cap)
        if running >= global_cap:
            return ClaimResult([], True)
        return None if due else ClaimResult([], False)

    def finalize(
        self, outcomes: Sequence[Outcome], now_ms: int, *, label: str = "finalize"
    ) -> list[JobRow | None]:
        """Write every outcome in one transaction; None where the fence did not match.

        An outcome with `want_row=False` that applied answers `APPLIED` (its row unread).
        """
        return self.write(self._finalize_work(outcomes, now_ms), label)

    def finalize_in(self, conn: sqlite3.Connection, outcome: Outcome, now_ms: int) -> JobRow | None:
        return self._finalize_work([outcome], now_ms)(conn)[0]

    def _finalize_work(
        self, outcomes: Sequence[Outcome], now_ms: int
    ) -> Callable[[sqlite3.Connection], list[JobRow | None]]:
        """`finalize`'s statements, to run in a write transaction of the caller's."""
        # Outcomes that end a job and hold no locks (the common case) go in few
        # statements: one per chunk of those nobody reads back, one per chunk of those a
        # handle waits on (their rows returned whole); the others one by one, in the same
        # transaction. (A job listed twice, e.g. a stale attempt beside its re-claim, goes
        # one by one: RETURNING names rows, not outcomes.)
        batch = batchable(outcomes)
        batched = {o.job_id for o in batch}
        # Three kinds of group: nobody reads the row back; a handle waits and the claim
        # is known, so the row is built from it and the few columns it lacks
        # (`terminal_row`); a handle waits on an outcome without its claim: read whole.
        modes: list[tuple[bool | Literal["parts"], list[Outcome]]] = [
            (False, [o for o in batch if not o.want_row]),
            ("parts", [o for o in batch if o.want_row and o.claimed is not None]),
            (True, [o for o in batch if o.want_row and o.claimed is None]),
        ]

        def work(conn: sqlite3.Connection) -> list[JobRow | None]:
            matched: dict[str, JobRow] = {}
            keys = _outcome_keys(conn, batch)
            counts = EndCounts()
            for rows, group in modes:
                for start in range(0, len(group), q.FINISH_CHUNK):
                    chunk = group[start : start + q.FINISH_CHUNK]
                    bound: list[Any] = [now_ms]
                    nv = q.no_value()  # None, bound cheaply
                    for o in chunk:
                        c, out, err = o.claimed, o.output, o.error
                        prog, detail = o.progress, o.progress_detail
                        bound += (keys[o.job_id], o.job_id, o.worker_id, o.attempt, o.kind,
                                  nv if out is None else out, nv if err is None else err,
                                  nv if prog is None else prog,
                                  nv if detail is None else detail,
                                  nv if c is None else c.queue,
                                  nv if c is None else c.scheduled_at)  # fmt: skip
                    sql = q.finish_many_sql(len(chunk), rows)
                    ended = {o.job_id: o for o in chunk}
                    # Each row's last column: its started_at where this statement counts
                    # the row's end itself (`sqlite/counts.py`), else NULL.
                    for r in conn.execute(sql, bound):
                        o = ended[r[0]]
                        if r[-1] is not None:
                            counts.ended(o, r[-1], now_ms)
                        if rows == "parts":
                            matched[r[0]] = terminal_row(o, r[:-1], now_ms)
                        else:
                            matched[r[0]] = r[:-1] if rows else APPLIED
            counts.write(conn)
            # The row tells the attempt it ended (_storage/attempts.py); only log lines,
            # which it does not hold, make a record (where the fence matched).
            for o in batch:
                if o.logs is not None and o.job_id in matched:
                    conn.execute(q.INSERT_ENDED_ATTEMPT, _record(keys[o.job_id], o, o.kind, now_ms))
            results: list[JobRow | None] = []
            for o in outcomes:
                row: JobRow | None
                if o.job_id in batched:
                    results.append(matched.get(o.job_id))
                    continue
                key = _outcome_key(conn, o)
                fence = (key, o.job_id, o.worker_id, o.attempt)
                record: str | None = None  # what to store beyond the row (attempts.py)
                if o.kind == "retry" or o.kind == "requeue":
                    if o.kind == "retry":
                        params_r: tuple[Any, ...] = (o.error, o.retry_at, now_ms, *fence)
                        row = conn.execute(q.RETRY, params_r).fetchone()
                        if row is not None and o.logs is not None:
                            # The retry's trigger stored the record; it lacks the lines.
                            conn.execute(q.SET_ATTEMPT_LOGS, (o.logs, key, o.attempt))
                    else:
                        params_r = (now_ms, o.progress, o.progress_detail, *fence)
                        row = conn.execute(q.REQUEUE, params_r).fetchone()
                        if row is not None:
                            record = "interrupted"
                    if row is None:
                        row = conn.execute(
                            q.CANCEL_INSTEAD_OF_RETRY,
                            (now_ms, now_ms, o.progress, o.progress_detail, *fence),
                        ).fetchone()
                        # The row holds the cancel's error; a retry ended in its own.
                        if row is not None and (o.kind == "retry" or o.logs is not None):
                            record = "cancelled"
                else:
                    nv, out, err = q.no_value(), o.output, o.error
                    prog, detail = o.progress, o.progress_detail
                    params = (
                        o.kind,
                        nv if out is None else out,
                        nv if err is None else err,
                        now_ms,
                        now_ms,
                        nv if prog is None else prog,
                        nv if detail is None else detail,
                        *fence,
                    )
                    if o.want_row:
                        row = conn.execute(q.FINISH, params).fetchone()
                    else:
                        applied = conn.execute(q.FINISH_NO_ROW, params).rowcount == 1
                        row = APPLIED if applied else None
                    if row is not None and o.logs is not None:
                        record = o.kind
                if record == "interrupted":
                    write_attempts(conn, [_record(key, o, record, now_ms)])
                elif record is not None:
                    conn.execute(q.INSERT_ENDED_ATTEMPT, _record(key, o, record, now_ms))
                if o.release_locks and row is not None:
                    # Only under a matched fence: a stale attempt must not free the
                    # locks a re-claim of the same job holds now.
                    conn.execute(q.RELEASE_JOB_LOCKS, (o.job_id, o.worker_id))
                results.append(row)
            return results

        return work

    def attempts(self, job_id: str) -> list[AttemptRow]:
        def read(conn: sqlite3.Connection) -> list[AttemptRow]:
            key = key_of(conn, job_id)
            row = conn.execute(q.GET_JOB, (key, job_id)).fetchone()
            stored = [] if row is None else conn.execute(q.ATTEMPTS_OF, (key,)).fetchall()
            return with_final_attempt(row, stored)

        return self.read(read)

    def promote_due(self, now_ms: int) -> list[str]:
        rows = self.write(
            lambda c: c.execute(q.PROMOTE_DUE, (now_ms, now_ms)).fetchall(), "promote"
        )
        return sorted({r[0] for r in rows})

    def next_delayed_at(self) -> int | None:
        row = self.read(lambda c: c.execute(q.NEXT_DELAYED_AT).fetchone())
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
        def work(conn: sqlite3.Connection) -> bool:
            fence = (key_of(conn, job_id), job_id, worker_id, attempt)
            return conn.execute(q.SET_PROGRESS, (progress, detail, now_ms, *fence)).rowcount == 1

        return self.write(work, "progress")

    def patch_metadata(
        self, job_id: str, worker_id: str, attempt: int, patch: dict[str, Any], now_ms: int
    ) -> dict[str, Any] | None:
        """Shallow-merge `patch` into the stored metadata; None if the claim was lost."""

        def work(conn: sqlite3.Connection) -> dict[str, Any] | None:
            fence = (key_of(conn, job_id), job_id, worker_id, attempt)
            row = conn.execute(q.GET_METADATA_FENCED, fence).fetchone()
            if row is None:
                return None
            merged = {**json.loads(row[0]), **patch}
            text = json.dumps(merged, separators=(",", ":"), allow_nan=False)
            conn.execute(q.SET_METADATA_FENCED, (text, now_ms, *fence))
            return merged

        return self.write(work, "patch_metadata")

    # -- durable locks (layer 3) ----------------------------------------------------

    def try_lock(self, name: str, job_id: str, worker_id: str, now_ms: int) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            params = (name, job_id, key_of(conn, job_id), worker_id, now_ms)
            return bool(conn.execute(q.TRY_LOCK, params).rowcount)

        return self.write(work, "lock")

    def release_lock(self, name: str, job_id: str, worker_id: str, attempt: int) -> None:
        self.write(
            lambda c: c.execute(q.RELEASE_LOCK, (name, job_id, worker_id, attempt)), "unlock"
        )

    def unregistered_claimers(self) -> list[str]:
        return [r[0] for r in self.read(lambda c: c.execute(q.UNREGISTERED_CLAIMERS).fetchall())]

    def release_unconfirmed_claims(self, worker_id: str, keep: Sequence[str], now_ms: int) -> int:
        keep_json = json.dumps(list(keep))

        def work(conn: sqlite3.Connection) -> int:
            return int(conn.execute(q.RELEASE_UNCONFIRMED, (now_ms, worker_id, keep_json)).rowcount)

        return self.write(work, "reconcile_claims")

    # -- cancellation ---------------------------------------------------------------

    def request_cancel(
        self, job_id: str, reason: str | None, error: str, now_ms: int
    ) -> tuple[str | None, str | None, JobRow | None]:
        """Flag the row; cancel it at once if it is waiting.

        Returns (status before, worker id, terminal row if it was cancelled here).
        """

        def work(conn: sqlite3.Connection) -> tuple[str | None, str | None, JobRow | None]:
            at = (key_of(conn, job_id), job_id)
            flagged = conn.execute(q.REQUEST_CANCEL, (reason, now_ms, *at)).fetchone()
            if flagged is None:
                return None, None, None
            status, worker = flagged
            row = None
            if status in ("pending", "delayed", "waiting"):
                row = conn.execute(q.CANCEL_WAITING, (error, now_ms, now_ms, *at)).fetchone()
            return status, worker, row

        return self.write(work, "cancel")

    def force_cancel(
        self, job_id: str, worker_id: str, attempt: int, error: str, now_ms: int
    ) -> JobRow | None:
        def work(conn: sqlite3.Connection) -> JobRow | None:
            fence = (key_of(conn, job_id), job_id, worker_id, attempt)
            row: JobRow | None = conn.execute(
                q.FORCE_CANCEL_RUNNING, (error, now_ms, now_ms, *fence)
            ).fetchone()
            if row is not None:
                conn.execute(q.RELEASE_JOB_LOCKS, (job_id, worker_id))
            return row

        return self.write(work, "force_cancel")

    def cancel_many(
        self, queue: str | None, type_name: str | None, reason: str | None, error: str, now_ms: int
    ) -> tuple[list[tuple[str, str | None]], list[JobRow]]:
        where, params = _where_queue_type(queue, type_name)

        def work(conn: sqlite3.Connection) -> tuple[list[tuple[str, str | None]], list[JobRow]]:
            running = conn.execute(
                q.CANCEL_MANY_REQUEST.format(where=where), (reason, now_ms, *params)
            ).fetchall()
            waiting: list[JobRow] = []
            for statuses in q.NOT_RUNNING_YET:
                sql = q.CANCEL_MANY_WAITING.format(where=where, statuses=statuses)
                waiting += conn.execute(sql, (error, now_ms, now_ms, *params)).fetchall()
            return [(r[0], r[1]) for r in running], waiting

        return self.write(work, "cancel_many")

    def cancel_requested_among(self, ids: Sequence[str]) -> list[tuple[str, str | None]]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        sql = q.CANCEL_REQUESTED_AMONG.format(keys=marks, ids=marks)
        return self.read(lambda c: [(r[0], r[1]) for r in c.execute(sql, (*keys_of(c, ids), *ids))])

    # -- re-runs --------------------------------------------------------------------

    def retry_job(
        self, job_id: str, payload: str | None, *, enqueued_by: str, now_ms: int
    ) -> tuple[str | None, JobRow | None]:
        def work(conn: sqlite3.Connection) -> tuple[str | None, JobRow | None]:
            old = conn.execute(q.GET_JOB, (key_of(conn, job_id), job_id)).fetchone()
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
        term, term_params = (None, []) if flt.search is None else q.search_sql(flt.search)
        sql = q.retry_matching_sql(flt.status, flt.queue is not None, flt.type is not None, term)
        params = (*(v for v in (flt.queue, flt.type) if v is not None), *term_params)

        def work(conn: sqlite3.Connection) -> builtins.list[JobRow]:
            old = conn.execute(sql, (*params, limit)).fetchall()
            return self._insert_retries(conn, retry_rows(old, enqueued_by, now_ms))

        return self.write(work, "retry_many")

    def _insert_retries(
        self, conn: sqlite3.Connection, rows: builtins.list[JobRow]
    ) -> builtins.list[JobRow]:
        """INSERT re-runs one statement each (an operator's action, not a hot path), with
        the fresh ids `_insert_keyed` gives a row whose key another process took."""
        new_queues = {
            r[_QUEUE]: (r[_QUEUE], r[_TYPE], r[_CREATED])
            for r in rows
            if r[_QUEUE] not in self._known_queues
        }
        if new_queues:
            conn.executemany(q.REGISTER_QUEUE, new_queues.values())
        reissued: dict[int, JobRow] = {}
        for row in rows:
            key = ids.row_key(row[_ID])
            assert key is not None  # made by ids.new_ids
            _insert_keyed(conn, [(key, row)], _retry_insert, reissued)
        out = [reissued.get(id(row), row) for row in rows]
        for row in out:
            if row[L.C_STEP] is not None:
                conn.execute(q.COPY_DEPS, (key_of(conn, row[_ID]), key_of(conn, row[L.C_RETRY_OF])))
        return out

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> JobRow | None:
        row: JobRow | None = self.read(
            lambda c: c.execute(q.GET_JOB, (key_of(c, job_id), job_id)).fetchone()
        )
        return row

    # -- workflows --------------------------------------------------------------------

    def enqueue_workflow(self, wf: NewWorkflow, conn: sqlite3.Connection | None = None) -> bool:
        def work(c: sqlite3.Connection) -> bool:
            # Under the write lock, so no other writer can add the id in between.
            if wf.exists_ok and c.execute(q.GET_WORKFLOW, (wf.id,)).fetchone() is not None:
                return False
            c.execute(q.INSERT_WORKFLOW, (wf.id, wf.name, wf.created_at, wf.retry_of))
            new_queues = {
                r[_QUEUE]: (r[_QUEUE], r[_TYPE], r[_CREATED])
                for r in wf.rows
                if r[_QUEUE] not in self._known_queues
            }
            if new_queues:
                c.executemany(q.REGISTER_QUEUE, new_queues.values())
            keys: dict[str, int] = {}
            params = []
            for row, left in zip(wf.rows, wf.left, strict=True):
                key = ids.row_key(row[_ID])
                # The runtime's ids are all made by ids.new_id, which names a row key; a
                # taken key (another process's id of the same instant) fails the whole
                # workflow, which writes nothing, rather than renumber rows mid-graph.
                if key is None:
                    raise ValueError(f"workflow job id {row[_ID]!r} names no row key")
                keys[row[_ID]] = key
                params.append(
                    (
                        key,
                        *_insert_params(row),
                        row[L.C_WORKFLOW],
                        row[L.C_STEP],
                        left,
                        row[L.C_RETRY_OF],
                    )
                )
            c.executemany(q.INSERT_WORKFLOW_JOB, params)
            # An upstream job outside `keys` is a completed one of the workflow this one
            # re-runs (`retry_workflow`).
            c.executemany(
                q.INSERT_JOB_DEP,
                [
                    (keys[up] if up in keys else key_of(c, up), keys[down], policy, int(many))
                    for up, down, policy, many in wf.edges
                ],
            )
            return True

        if conn is not None:
            return work(conn)
        return self.write(work, "enqueue_workflow")

    def get_workflow(self, workflow_id: str) -> WorkflowHead | None:
        row = self.read(lambda c: c.execute(q.GET_WORKFLOW, (workflow_id,)).fetchone())
        return None if row is None else WorkflowHead(*row)

    def retry_workflow(
        self, workflow_id: str, *, enqueued_by: str, now_ms: int
    ) -> NewWorkflow | str | None:
        def work(c: sqlite3.Connection) -> NewWorkflow | str | None:
            head = c.execute(q.GET_WORKFLOW, (workflow_id,)).fetchone()
            if head is None:
                return None
            rows = c.execute(q.WORKFLOW_JOBS, (workflow_id,)).fetchall()
            plan = plan_workflow_retry(
                WorkflowHead(*head),
                rows,
                observe.workflow_edges(c, workflow_id),
                enqueued_by=enqueued_by,
                now_ms=now_ms,
            )
            if isinstance(plan, NewWorkflow):
                self.enqueue_workflow(plan, conn=c)
            return plan

        return self.write(work, "retry_workflow")

    def rate_room(
        self, bucket: str, limit: int, per_ms: int, now_ms: int
    ) -> tuple[int, int | None]:
        win = self.read(lambda c: rate.window(_ex(c), RATE_SQL, bucket, limit, per_ms, now_ms))
        return win.room, win.wait_until

    def stranded_waiting(self, limit: int) -> builtins.list[str]:
        def read(c: sqlite3.Connection) -> builtins.list[str]:
            if c.execute(q.HAS_JOB_DEPS).fetchone() is None:
                return []  # a file older than workflows (an observer reads it as it is)
            return [r[0] for r in c.execute(q.STRANDED_WAITING, (limit,))]

        return self.read(read)

    def workflow_jobs(self, workflow_id: str) -> builtins.list[JobRow]:
        return self.read(lambda c: c.execute(q.WORKFLOW_JOBS, (workflow_id,)).fetchall())

    def downstream_jobs(self, job_ids: Sequence[str]) -> builtins.list[JobRow]:
        def work(c: sqlite3.Connection) -> builtins.list[JobRow]:
            keys = json.dumps(keys_of(c, job_ids))
            return c.execute(q.DOWNSTREAM_JOBS, (keys,)).fetchall()

        return self.read(work)

    def upstream_outputs(self, job_id: str) -> builtins.list[tuple[str | None, str | None, bool]]:
        rows = self.read(lambda c: c.execute(q.UPSTREAM_OUTPUTS, (key_of(c, job_id),)).fetchall())
        return [(r[0], r[1], bool(r[2])) for r in rows]

    def cancel_workflow(self, workflow_id: str, error: str, now_ms: int) -> builtins.list[JobRow]:
        def work(c: sqlite3.Connection) -> builtins.list[JobRow]:
            out: builtins.list[JobRow] = []
            for status in ("waiting", "delayed", "pending"):
                out += c.execute(
                    q.CANCEL_WORKFLOW_STATUS, (now_ms, error, workflow_id, status)
                ).fetchall()
            return out

        return self.write(work, "cancel_workflow")

    def terminal_among(self, ids: Sequence[str]) -> list[JobRow]:
        if not ids:
            return []

        def read(conn: sqlite3.Connection) -> list[JobRow]:
            out: list[JobRow] = []
            for start in range(0, len(ids), 800):
                chunk = ids[start : start + 800]
                sql = q.TERMINAL_AMONG.format(keys=",".join("?" * len(chunk)))
                rows = conn.execute(sql, keys_of(conn, chunk)).fetchall()
                if rows:
                    # A key says where to look, the id whether it is the row asked for.
                    asked = set(chunk)
                    out.extend(r for r in rows if r[L.C_ID] in asked)
            return out

        return self.read(read)

    def list(self, flt: JobFilter, *, limit: int, offset: int) -> list[JobRow]:
        sql, params = _where(flt).list_sql(limit=limit, offset=offset)
        return self.read(lambda c: c.execute(sql, params).fetchall())

    def count(self, flt: JobFilter, *, cap: int | None = None) -> int:
        if flt.kept_countable:
            kept = self.read(lambda c: observe.kept_count(c, flt.status, flt.queue))
            if kept is not None:
                return kept if cap is None else min(kept, cap)
        sql, params = _where(flt).count_sql(cap)
        return int(self.read(lambda c: c.execute(sql, params).fetchone()[0]))

    def gc(self, before_ms: int, *, batch: int = 1000) -> int:
        total = 0
        while True:
            n = self.write(lambda c: c.execute(q.GC_TERMINAL, (before_ms, batch)).rowcount, "gc")
            total += n
            if n < batch:
                if total:
                    self.write(lambda c: c.execute(q.GC_WORKFLOWS), "gc")
                self.write(
                    lambda c: c.execute(q.GC_MINUTES, (before_ms // 60_000 - MINUTES_KEPT,)),
                    "gc",
                )
                return total

    # -- observers (read-only) ------------------------------------------------------
    # The statements are in sqlite/observe.py; every one is a single read.

    def schema_version(self) -> int:
        return self.read(observe.schema_version)

    def queue_counts(self) -> builtins.list[QueueCounts]:
        return self.read(observe.queue_counts)

    def queue_settings(self) -> builtins.list[QueueSettingsRecord]:
        return self.read(observe.queue_settings)

    def update_queue_settings(
        self, queue: str, changes: Mapping[str, Any], now_ms: int
    ) -> QueueSettingsRecord | None:
        def work(conn: sqlite3.Connection) -> QueueSettingsRecord | None:
            row = conn.execute(_SETTINGS_ROW, (queue,)).fetchone()
            current = None if row is None else settings.record_of(queue, row)
            new = settings.merged(queue, current, changes, now_ms)
            if new is None:
                conn.execute("DELETE FROM queue_settings WHERE queue = ?", (queue,))
            else:
                conn.execute(
                    _SETTINGS_UPSERT,
                    (
                        queue,
                        new.concurrency,
                        new.rate_limit,
                        new.rate_per_ms,
                        int(new.paused),
                        now_ms,
                    ),
                )
            return new

        return self.write(work, "queue settings")

    def worker_records(self) -> builtins.list[WorkerRecord]:
        return self.read(observe.worker_records)

    def leader_lease(self) -> LeaderLease | None:
        return self.read(observe.leader_lease)

    def schedule_records(self) -> builtins.list[ScheduleRecord]:
        return self.read(observe.schedule_records)

    def job_metrics(self, bounds_ms: tuple[int, ...]) -> JobMetrics:
        return self.read(lambda c: observe.job_metrics(c, bounds_ms))

    def throughput(self, first_minute: int, end_minute: int) -> dict[int, tuple[int, int]]:
        return self.read(lambda c: observe.throughput(c, first_minute, end_minute))

    def count_finished_before(self, before_ms: int) -> int:
        return self.read(lambda c: observe.count_finished_before(c, before_ms))

    def has_job_of_type(self, type_name: str) -> bool:
        return self.read(lambda c: observe.has_job_of_type(c, type_name))

    def storage_facts(self) -> StorageFacts:
        return self.read(lambda c: observe.storage_facts(c, self.path))

    # -- the audit log ------------------------------------------------------------------

    def record_audit(
        self, at_ms: int, actor: str, action: str, target: str, detail: str
    ) -> AuditRecord:
        return self.write(
            lambda c: audit.insert_audit(c, at_ms, actor, action, target, detail), "audit"
        )

    def audit_records(
        self, *, limit: int, offset: int = 0, actor: str | None = None, action: str | None = None
    ) -> builtins.list[AuditRecord]:
        return self.read(lambda c: audit.audit_records(c, limit, offset, actor, action))

    def count_audit(self, *, actor: str | None = None, action: str | None = None) -> int:
        return self.read(lambda c: audit.count_audit(c, actor, action))

    # -- search indexes (DESIGN.md §8.9) -------------------------------------------------

    def add_search_index(self, field: SearchField, now_ms: int) -> bool:
        return self.write(lambda c: search_index.add_search_index(c, field, now_ms), "search_index")

    def drop_search_index(self, field: SearchField) -> bool:
        return self.write(lambda c: search_index.drop_search_index(c, field), "search_index")

    def search_indexes(self) -> builtins.list[SearchIndexRecord]:
        return self.read(search_index.search_indexes)

    # -- workflows, observed (the console's reads, DESIGN.md §8.9) ---------------------
    # Kept apart from the workflow writes above: these only read, in one statement each.

    def list_workflows(
        self, *, limit: int, offset: int = 0, name: str | None = None
    ) -> builtins.list[WorkflowRecord]:
        return self.read(lambda c: observe.workflow_records(c, name, limit, offset))

    def count_workflows(self, *, name: str | None = None) -> int:
        return self.read(lambda c: observe.count_workflows(c, name))

    def workflow_edges(self, workflow_id: str) -> builtins.list[tuple[str, str, str, bool]]:
        return self.read(lambda c: observe.workflow_edges(c, workflow_id))


def _insert(conn: sqlite3.Connection, rows: Sequence[JobRow]) -> builtins.list[JobRow]:
    """INSERT fresh rows; returns them as inserted (`Reissued` where a row key was taken).

    Rows that differ only in id and payload (one `enqueue_many` call) go `SHARED_CHUNK`
    to a statement, binding three values a row; others go `_CHUNK` rows per statement,
    the rest one by one. One statement per row pays for opening a cursor on the table and
    on every index for each row; a multi-row VALUES opens them once per chunk (about a
    third less time per row for a large batch). A row whose id names no row key (one not
    made by `ids.new_id`) goes below zero, after the rows already there.
    """
    keys = list(map(ids.row_key, map(_id_of, rows)))
    keyed: list[Keyed] = list(zip(keys, rows, strict=True))  # type: ignore[arg-type]
    if None in keys:
        keyed = []
        for key, row in zip(keys, rows, strict=True):
            if key is None:
                conn.execute(q.INSERT_UNKEYED, _insert_params(row))
            else:
                keyed.append((key, row))
    reissued: dict[int, JobRow] = {}
    shared = _shared_params(keyed[0][1]) if keyed else ()
    if len(keyed) > 1 and all(map(shared.__eq__, (_shared_params(r) for _, r in keyed))):
        for start in range(0, len(keyed), SHARED_CHUNK):
            chunk = keyed[start : start + SHARED_CHUNK]
            _insert_keyed(conn, chunk, lambda c: shared_insert(shared, c), reissued)
    else:
        full = len(keyed) - len(keyed) % _CHUNK if len(keyed) > 1 else 0
        for start in range(0, full, _CHUNK):
            _insert_keyed(conn, keyed[start : start + _CHUNK], _chunk_insert, reissued)
        for one in keyed[full:]:
            _insert_keyed(conn, [one], _one_insert, reissued)
    if not reissued:
        return list(rows)
    return [reissued.get(id(row), row) for row in rows]


# A row to insert and its row key.
Keyed = tuple[int, JobRow]
Statement = tuple[str, tuple[Any, ...]]


def _one_insert(chunk: Sequence[Keyed]) -> Statement:
    key, row = chunk[0]
    return q.INSERT_JOB, (key, *_insert_params(row))


def _retry_insert(chunk: Sequence[Keyed]) -> Statement:
    key, row = chunk[0]
    return q.INSERT_RETRY, (key, *_insert_params(row), row[L.C_RETRY_OF], row[L.C_STEP])


def _chunk_insert(chunk: Sequence[Keyed]) -> Statement:
    params = itertools.chain.from_iterable((key, *_insert_params(row)) for key, row in chunk)
    return _INSERT_CHUNK, tuple(params)


def shared_insert(shared: tuple[Any, ...], chunk: Sequence[Keyed]) -> Statement:
    """The statement that inserts `chunk` (at most `SHARED_CHUNK` rows), which share
    `shared` (`SHARED_COLUMNS`) and differ only in id and payload."""
    triples = itertools.chain.from_iterable((key, row[_ID], row[_PAYLOAD]) for key, row in chunk)
    return q.insert_shared_sql(len(chunk)), (*shared, *triples)


def _insert_keyed(
    conn: sqlite3.Connection,
    chunk: list[Keyed],
    statement: Callable[[list[Keyed]], Statement],
    reissued: dict[int, JobRow],
) -> None:
    """Run one INSERT of `chunk`. A row key that another process made in the same
    millisecond fails the whole statement (nothing of it is written); its rows then get
    fresh ids from a fresh point of the millisecond's sequence, and `reissued` maps each
    entry (by `id()`) to its row as inserted."""
    entries = chunk
    for _ in range(_REISSUES):
        try:
            conn.execute(*statement(chunk))
        except sqlite3.IntegrityError as exc:
            if not _key_taken(exc):
                raise
            ids.reseat()
            chunk = []
            for _key, row in entries:
                key, job_id = ids.new_keyed_id(row[_CREATED])
                chunk.append((key, Reissued((job_id, *row[1:]))))
            continue
        if chunk is not entries:
            reissued.update((id(e[1]), c[1]) for e, c in zip(entries, chunk, strict=True))
        return
    raise StorageError(
        "could not find a free row key for new jobs",
        code="DB_ROW_KEYS_TAKEN",
        params={"attempts": _REISSUES},
    )


def _key_taken(exc: BaseException | None) -> bool:
    return isinstance(exc, sqlite3.IntegrityError) and (
        getattr(exc, "sqlite_errorname", "") == "SQLITE_CONSTRAINT_ROWID"
    )


def _where_queue_type(queue: str | None, type_name: str | None) -> tuple[str, tuple[str, ...]]:
    return equal_to((("queue", queue), ("type", type_name)), "?")


def _where(flt: JobFilter) -> q.JobsWhere:
    return q.JobsWhere(
        flt.status,
        flt.queue,
        flt.type,
        flt.schedule_id,
        flt.parent_id,
        flt.workflow_id,
        flt.search,
    )


def _forked(ref: weakref.ReferenceType[SqliteStore]) -> None:
    store = ref()
    if store is not None:
        store._after_fork()


def terminal_row(o: Outcome, parts: Sequence[Any], now_ms: int) -> JobRow:
    """The row a fenced finalize of `o` left, in JOB_COLUMNS order, from `o.claimed`,
    the outcome, the finalize's time and `parts` (its RETURNING of q.FINISHED_PARTS).

    Under the matched fence (still `running`, this worker, this attempt) nothing else
    moved what the claim returned for q.FROM_THE_CLAIM: no statement changes those on a
    running row (tests/unit/test_terminal_row_rule.py); what can move is read back
    (tests/conformance/test_finalize.py compares the two, value for value).
    """
    job = o.claimed
    assert job is not None
    (job_id, key, parent_id, schedule_id, metadata, progress, detail, cancel, started_at,
     created_at, enqueued_by, retry_of, step) = parts  # fmt: skip
    return (
        job_id, job.type, o.kind, job.queue, job.priority, job.payload, o.output, o.error,
        o.attempt, job.max_attempts, job.timeout_ms, key, parent_id, schedule_id, metadata,
        progress, detail, cancel, o.worker_id, job.scheduled_at, started_at, now_ms,
        created_at, now_ms, enqueued_by, retry_of, job.workflow_id, step,
    )  # fmt: skip


def _record(key: int, o: Outcome, outcome: str, now_ms: int) -> tuple[Any, ...]:
    return (key, o.attempt, o.worker_id, o.started_at, now_ms, outcome, o.error, o.logs)


def write_attempts(conn: sqlite3.Connection, records: Sequence[tuple[Any, ...]]) -> None:
    """Insert the records of unspent attempts (interrupted, lost: `_record`'s values), each
    under its job's next negative key (_storage/attempts.py)."""
    for record in records:
        conn.execute(q.INSERT_UNSPENT_ATTEMPT, record)


# A claim's rows (made objects after COMMIT), whether the global cap cut it, when its
# rate window allows the next start (None: not spent) and the cap it counted.
_Taken = tuple[list[Any], bool, int | None, int]


def _claim_work(
    req: ClaimRequest, now_ms: int
) -> Callable[[sqlite3.Connection], ClaimResult | _Taken]:
    """The claim's statements: the caps, the pause and the rate limit counted in SQL, then
    up to the free slots."""
    claim_sql = q.claim_sql(len(req.types), len(req.exclude_owners))

    def work(conn: sqlite3.Connection) -> ClaimResult | _Taken:
        if (
            req.registered
            and conn.execute(q.WORKER_REGISTERED, (req.worker_id,)).fetchone() is None
        ):
            return ClaimResult([], False, unregistered=True)
        in_queue, running, s_cap, paused, s_rate, s_per = conn.execute(
            _RUNNING_COUNTS, (req.queue, req.queue)
        ).fetchone()
        if paused:
            return ClaimResult([], False)  # claims wait for resume_queue
        cap = req.queue_cap if s_cap is None else int(s_cap)
        free = cap - in_queue
        if free <= 0:
            return ClaimResult([], False, queue_full=True, cap=cap)
        global_free = req.global_cap - running
        if global_free <= 0:
            return ClaimResult([], True, cap=cap)
        n = min(free, global_free, req.limit)
        limits = req.rate if s_rate is None else (int(s_rate), int(s_per))
        if limits is not None and req.rate_keyed and s_rate is None:
            rows, wait = _keyed_take(conn, req, n, limits, now_ms)
            return rows, False, wait, cap
        win = None
        if limits is not None:
            win = rate.window(_ex(conn), RATE_SQL, req.queue, *limits, now_ms)
            if win.room <= 0:
                return ClaimResult([], False, rate_wait=win.wait_until, cap=cap)
        rows = conn.execute(
            claim_sql,
            (
                req.worker_id,
                now_ms,
                now_ms,
                req.queue,
                now_ms,
                *req.types,
                *req.exclude_owners,
                n if win is None else min(n, win.room),
            ),
        ).fetchall()
        wait = None
        if win is not None and limits is not None:
            rate.record(_ex(conn), RATE_SQL, req.queue, win, len(rows), now_ms)
            if len(rows) >= win.room and len(rows) < n:
                # The window is spent: say when the next start is allowed.
                wait = rate.window(_ex(conn), RATE_SQL, req.queue, *limits, now_ms).wait_until
        limited_by_global = global_free < min(free, req.limit)
        return rows, limited_by_global and len(rows) == n, wait, cap

    return work


def _keyed_take(
    conn: sqlite3.Connection,
    req: ClaimRequest,
    n: int,
    limits: tuple[int, int],
    now_ms: int,
) -> tuple[list[Any], int | None]:
    """A keyed rate limit's claim: the rows and, when a key with rows waiting is spent,
    the earliest time one of them may start. The queue's own bucket counts every start
    of the queue: while it has room for all `n`, so has every key's, and the claim takes
    the head as an unkeyed one does, its keys' starts left in the queue's row
    (`rate.record_total`); otherwise it folds those into the keys' buckets and picks row
    by row (`rate.pick_keyed`, one bucket per key)."""
    ex = _ex(conn)
    total = rate.window(ex, RATE_SQL, req.queue, *limits, now_ms, wait=False)
    if total.room >= n:
        sql = q.claim_sql(len(req.types), len(req.exclude_owners), keyed=True)
        params = (req.worker_id, now_ms, now_ms, req.queue, now_ms, *req.types)
        got = conn.execute(sql, (*params, *req.exclude_owners, n)).fetchall()
        rate.record_total(ex, RATE_SQL, req.queue, total, [r[-1] for r in got], now_ms)
        return [r[:-1] for r in got], None
    rate.fold(ex, conn.executemany, RATE_SQL, req.queue, limits[1], now_ms, json.dumps)

    def candidates(spent: list[str], want: int) -> list[Any]:
        sql = q.keyed_candidates_sql(len(req.types), len(req.exclude_owners), len(spent))
        params = (req.queue, now_ms, *req.types, *req.exclude_owners, *spent, want)
        return conn.execute(sql, params).fetchall()

    def read_windows(keys: list[str]) -> dict[str, rate.Window]:
        buckets = {rate.bucket_of(req.queue, k): k for k in keys}
        found = rate.windows(
            ex, RATE_SQL, list(buckets), *limits, now_ms, json.dumps(list(buckets))
        )
        return {buckets[b]: w for b, w in found.items()}

    pick = rate.pick_keyed(candidates, read_windows, n)
    rows = (
        conn.execute(
            q.CLAIM_ROWIDS, (req.worker_id, now_ms, now_ms, json.dumps(pick.ids))
        ).fetchall()
        if pick.ids
        else []
    )
    rate.record_many(
        conn.executemany,
        RATE_SQL,
        {rate.bucket_of(req.queue, k): (pick.wins[k], c) for k, c in pick.taken.items()},
        now_ms,
    )
    rate.record(ex, RATE_SQL, req.queue, total, len(rows), now_ms)
    return rows, rate.keyed_wait(ex, RATE_SQL, req.queue, pick, limits, now_ms)


_SET_RATE_KEY = "UPDATE jobs SET rate_key = ? WHERE id = ?"


def _ex(conn: sqlite3.Connection) -> rate.Execute:
    return lambda sql, params: conn.execute(sql, params).fetchall()


def _spread_work(req: SpreadRequest, now_ms: int) -> Callable[[sqlite3.Connection], ClaimResult]:
    """A claim across queues: every queue's running rows and all running rows counted in
    one statement, the queues' settings read (a cap override, a pause, a rate limit's
    window), then the rows in turn order (`_spread_rows`) within each queue's free slots
    and the global cap's."""
    names = [name for name, _ in req.queues]
    turn = {name: i for i, name in enumerate(names)}
    handler_rates = {name: (limit, per) for name, limit, per in req.rates}

    def work(conn: sqlite3.Connection) -> ClaimResult:
        if (
            req.registered
            and conn.execute(q.WORKER_REGISTERED, (req.worker_id,)).fetchone() is None
        ):
            return ClaimResult([], False, unregistered=True)
        total, running = _running_counts(conn, names, req.global_cap)
        caps = dict(req.queues)
        rates = dict(handler_rates)
        paused = settings.overlay(caps, rates, conn.execute(_SPREAD_SETTINGS, (json.dumps(names),)))
        free = {name: caps[name] - n for name, n in zip(names, running, strict=True)}
        global_free = req.global_cap - total
        allowance = min(req.limit, global_free)
        if global_free <= 0:
            return ClaimResult([], True, free=free, caps=caps)
        plan = rate.spread_windows(_ex(conn), RATE_SQL, free, paused, rates, now_ms)
        asked = [(name, min(m, allowance)) for name, m in plan.may.items() if m > 0]
        if not asked or allowance <= 0:
            return ClaimResult([], False, free=plan.may, caps=caps, rate_waits=plan.waits)
        rows = _spread_rows(conn, req, asked, allowance, now_ms)
        if plan.windows:
            rate.record_spread(_ex(conn), RATE_SQL, plan, Counter(r[3] for r in rows), now_ms)
        # RETURNING order is unspecified: queue by queue in turn order, each in claim order.
        rows.sort(key=lambda r: (turn[r[3]], r[4], r[12], r[0]))
        jobs = _claimed(rows)
        return ClaimResult(
            jobs,
            len(jobs) >= global_free,
            free=plan.may,
            caps=caps,
            rate_waits=plan.waits,
        )

    return work


def _running_counts(
    conn: sqlite3.Connection, names: list[str], global_cap: int
) -> tuple[int, list[int]]:
    """All running rows, and those of each queue in `names`, from one snapshot. Under a
    global cap that holds the running rows to a couple per queue asked, one pass over the
    running index counts them all; above it (the index may hold thousands of rows), one
    search per queue."""
    if global_cap <= q.SPREAD_SCAN_PER_QUEUE * len(names):
        by_queue: dict[str, int] = dict(conn.execute(q.RUNNING_BY_QUEUE).fetchall())
        return sum(by_queue.values()), [by_queue.get(name, 0) for name in names]
    total, *running = conn.execute(q.spread_counts_sql(len(names)), names).fetchone()
    return total, running


def _spread_rows(
    conn: sqlite3.Connection,
    req: SpreadRequest,
    asked: list[tuple[str, int]],
    allowance: int,
    now_ms: int,
) -> list[Any]:
    """The rows of a spread claim: a turn of up to `req.turn` rows per queue, in turn
    order, before any queue gets a second turn.

    First the heads (`spread_heads_sql`): each queue's head row in turn order, one index
    search per queue and no sort, up to a LIMIT of as many queues as the slots can give
    whole turns to (so a turn of 4 and 50 slots reach 13 queues, not 50). If the LIMIT
    cut the heads short, the rest of those queues' turns follow, a rank a statement
    (heads again); slots a queue leaves (it had fewer rows than its turn) go to a
    queue the slots cut short, then to the heads of the queues after. Once every asked
    queue was searched, one windowed statement takes the rows after, turn by turn. A
    queue whose search found nothing has no row at all, so it is not asked again. With
    a turn of 1, or as many slots as the queues can fill, that is two statements.
    """
    fixed: list[Any] = [req.worker_id, now_ms, *req.types, *req.exclude_owners]
    heads = q.spread_heads_sql(len(req.types), len(req.exclude_owners))
    turn = max(1, req.turn)
    room = dict(asked)
    taken: dict[str, int] = {}  # rows each reached queue took; a dry one leaves
    rows: list[Any] = []
    todo = [name for name, _ in asked]
    budget = allowance
    while budget > 0 and todo:
        limit = -(-budget // turn)
        found = conn.execute(heads, [*fixed, json.dumps(todo), limit]).fetchall()
        rows += found
        budget -= len(found)
        got = {r[3] for r in found}
        reached = [name for name in todo if name in got]
        taken.update(dict.fromkeys(reached, 1))
        if len(found) < limit:
            break  # every queue left was searched
        todo = todo[todo.index(reached[-1]) + 1 :]
        # The reached queues' turns, planned queue by queue in turn order within the
        # slots, so none is cut, and taken a rank a statement (a queue's next row is
        # its head once the one before is claimed: each statement is heads again, which
        # costs fewer instructions than the windowed one). Planned again only when a
        # queue ran dry and left slots.
        while budget > 0:
            plan: dict[str, int] = {}
            spare = budget
            for name, n in taken.items():
                share = min(min(turn, room[name]) - n, spare)
                if share > 0:
                    plan[name] = share
                    spare -= share
            if not plan:
                break
            for rank in range(1, max(plan.values()) + 1):
                names = [name for name, share in plan.items() if share >= rank]
                found = conn.execute(heads, [*fixed, json.dumps(names), len(names)]).fetchall()
                rows += found
                budget -= len(found)
                got = {r[3] for r in found}
                for name in names:
                    if name in got:
                        taken[name] += 1
                    else:
                        del taken[name]  # ran dry
                        del plan[name]
    if budget <= 0:
        return rows
    # The turns after the first (name, limit, rows taken), in one windowed statement.
    after = [(name, room[name] - n, n) for name, n in taken.items() if room[name] > n]
    if not after:
        return rows
    params = [*fixed, budget]
    for entry in after:
        params += entry
    sql = q.spread_claim_sql(len(after), len(req.types), len(req.exclude_owners), turn)
    return rows + conn.execute(sql, params).fetchall()


def _claimed(rows: list[Any]) -> list[ClaimedJob]:
    """A claim's rows (RETURNING rowid, then `ClaimedJob`'s columns) as jobs that
    remember the rowid they were found at (`ClaimedJob.key`)."""
    jobs = []
    for r in rows:
        job = ClaimedJob(*r[1:])
        job.key = r[0]
        jobs.append(job)
    return jobs


def _outcome_keys(conn: sqlite3.Connection, outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Each outcome's row key: its claim's rowid where the runtime kept the claim (a
    rowid does not change while the row runs), else `keys_of` its id (a parse, or a read
    for a row older than schema 4)."""
    keys = {o.job_id: k for o in outcomes if o.claimed and (k := o.claimed.key) is not None}
    if len(keys) < len(outcomes):
        rest = [o.job_id for o in outcomes if o.job_id not in keys]
        keys.update(zip(rest, keys_of(conn, rest), strict=True))
    return keys


def _outcome_key(conn: sqlite3.Connection, o: Outcome) -> int:
    """`_outcome_keys` of one outcome."""
    key = None if o.claimed is None else o.claimed.key
    return key_of(conn, o.job_id) if key is None else key


def _claim_result(taken: ClaimResult | _Taken) -> ClaimResult:
    if isinstance(taken, ClaimResult):
        return taken
    rows, global_blocked, wait, cap = taken
    # RETURNING order is unspecified; run them in claim order (rowid breaks ties).
    rows.sort(key=lambda r: (r[4], r[12], r[0]))
    jobs = _claimed(rows)
    return ClaimResult(jobs, global_blocked, rate_wait=wait, cap=cap)
