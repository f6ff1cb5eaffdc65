"""The SQLite backend: the `Store` operations over one database file.

Connections: one writer (all writes, serialised by `self.lock`, an RLock, so producers
on any thread can enqueue), and one reader per thread for observers. A ":memory:"
database cannot be shared between connections, so there the writer also serves reads,
under the same lock.

Every write goes through `tx.with_write_tx` (BEGIN IMMEDIATE, guarded rollback, whole-
transaction retry on BUSY). All operations here are idempotent as whole transactions —
each re-reads what it needs inside the transaction and is a compare-and-set — so they
are safe to replay.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import sqlite3
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from jobledger._storage import tx
from jobledger._storage.interface import (
    APPLIED,
    ClaimedJob,
    ClaimResult,
    JobFilter,
    JobRow,
    NewJob,
    Outcome,
    fresh_row,
)
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.connections import (
    Synchronous,
    WriteGate,
    open_reader,
    open_writer,
)
from jobledger._storage.sqlite.migrate import migrate, migrate_connection
from jobledger.errors import JobNotFound, StorageError

__all__ = ["SqliteStore"]

T = TypeVar("T")
MIN_SQLITE = (3, 35, 0)
_LIVE = ("pending", "delayed", "running")
# Inside the claim: the running rows of its queue and of all queues, in one statement.
_RUNNING_COUNTS = f"SELECT ({q.COUNT_RUNNING_IN_QUEUE}), ({q.COUNT_RUNNING})"
# One statement, so one snapshot: the claim's two counts and whether anything is due.
_CLAIM_PRECHECK = (
    f"SELECT ({q.COUNT_RUNNING_IN_QUEUE}), ({q.COUNT_RUNNING}), EXISTS (SELECT 1 FROM jobs "
    "WHERE status = 'pending' AND cancel_requested = 0 AND queue = ? AND scheduled_at <= ?)"
)
_TYPE, _QUEUE, _KEY, _PARENT, _CREATED = q.C_TYPE, q.C_QUEUE, q.C_KEY, q.C_PARENT, q.C_CREATED_AT
# A fresh row's values in `q.INSERT_JOB`'s parameter order, picked in C; all but the id
# and payload, in `q.insert_shared_sql`'s; and those two.
_insert_params = operator.itemgetter(q.C_ID, q.C_PAYLOAD, *q.SHARED_COLUMNS)
_shared_params = operator.itemgetter(*q.SHARED_COLUMNS)
_id_payload = operator.itemgetter(q.C_ID, q.C_PAYLOAD)
# Rows per statement of a shared batch (14 + 200 parameters); 100 to 200 measured best.
SHARED_CHUNK = 100
# 32 rows of 16 parameters: within SQLite's oldest bound-parameter limit (999).
_CHUNK = 32
_INSERT_HEAD, _INSERT_VALUES = q.INSERT_JOB.rsplit(" VALUES ", 1)
_INSERT_CHUNK = f"{_INSERT_HEAD} VALUES {', '.join([_INSERT_VALUES] * _CHUNK)}"


class SqliteStore:
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
        self.workers = workers
        self.leader_ops = leader_ops
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
        self.lock = threading.RLock()
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
        self.lock = threading.RLock()
        self._readers_lock = threading.Lock()
        self._readers = []
        self._local = threading.local()
        self._generation += 1
        self._closed = True  # the next use opens a fresh writer

    def _reopen_if_closed(self) -> None:
        # A stopped manager stays a producer and an observer (DESIGN §4: enqueue after
        # stop() writes the row): a use after close() opens fresh connections. Call with
        # self.lock held. A closed ":memory:" database is gone, so it stays closed.
        if self._closed and not self.memory:
            self.conn = open_writer(
                self.path, busy_timeout=self._busy_timeout, synchronous=self._synchronous
            )
            self._closed = False

    def write(self, work: Callable[[sqlite3.Connection], T], label: str) -> T:
        with self.lock:
            self._reopen_if_closed()
            conn = self.conn
            return tx.with_write_tx(conn, lambda: work(conn), label)

    def write_statement(self, sql: str, params: Sequence[Any], label: str) -> None:
        """A write that is one statement, committed on return.

        Not replayed on BUSY (see `tx.run_write_statement`), like a transaction whose
        BEGIN found the database busy.
        """
        with self.lock:
            self._reopen_if_closed()
            try:
                tx.run_write_statement(self.conn, sql, params, label)
            except sqlite3.Error as exc:
                raise tx.storage_error(exc, label) from exc

    @contextmanager
    def user_transaction(self) -> Iterator[sqlite3.Connection]:
        """A caller-driven write transaction (`jobs.write_tx()`); no automatic retry."""
        with self.lock:
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
        with self.lock:
            self.conn.close()

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
        self, rows: Sequence[JobRow], conn: sqlite3.Connection | None = None
    ) -> list[JobRow]:
        """`enqueue` of entries already in row form; returns the entry itself when inserted."""
        if conn is not None:
            return self._enqueue_in(conn, rows)
        if len(rows) == 1:
            row = rows[0]
            if row[_KEY] is None and row[_PARENT] is None and row[_QUEUE] in self._known_queues:
                # Nothing to look up or register first: the INSERT is the transaction.
                self.write_statement(q.INSERT_JOB, _insert_params(row), "enqueue")
                return [row]
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
        _insert(conn, rows)
        return list(rows)

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
                if conn.execute(q.PARENT_EXISTS, (parent,)).fetchone() is None:
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
        _insert(conn, inserts)
        return out

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
    ) -> ClaimResult:
        claim_sql = q.claim_sql(len(types))
        if not self.memory:
            # Decided from a WAL read, without the write lock, when the claim would take
            # nothing (caps full, nothing due): idle processes woken by every commit
            # elsewhere would otherwise queue for the lock behind the busy ones. Taking
            # nothing on a committed state is what the transaction would have answered
            # then; a claim that may take rows re-counts everything inside it.
            nothing = self._nothing_to_claim(queue, queue_cap, global_cap, now_ms)
            if nothing is not None:
                return nothing

        def work(conn: sqlite3.Connection) -> ClaimResult | tuple[list[Any], bool]:
            in_queue, running = conn.execute(_RUNNING_COUNTS, (queue,)).fetchone()
            free = queue_cap - in_queue
            if free <= 0:
                return ClaimResult([], False, queue_full=True)
            global_free = global_cap - running
            if global_free <= 0:
                return ClaimResult([], True)
            n = min(free, global_free, limit)
            rows = conn.execute(
                claim_sql, (worker_id, now_ms, now_ms, queue, now_ms, *types, n)
            ).fetchall()
            limited_by_global = global_free < min(free, limit)
            return rows, limited_by_global and len(rows) == n

        # The claimed rows become objects after COMMIT: every process waits for the
        # write gate while a transaction is open.
        taken = self.write(work, "claim")
        if isinstance(taken, ClaimResult):
            return taken
        rows, global_blocked = taken
        jobs = [ClaimedJob(*r) for r in rows]
        # RETURNING order is unspecified; run them in claim order.
        jobs.sort(key=lambda j: (j.priority, j.scheduled_at, j.id))
        return ClaimResult(jobs, global_blocked)

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
        in_queue, running, due = self.read(
            lambda c: c.execute(_CLAIM_PRECHECK, (queue, queue, now_ms)).fetchone()
        )
        if in_queue >= queue_cap:
            return ClaimResult([], False, queue_full=True)
        if running >= global_cap:
            return ClaimResult([], True)
        return None if due else ClaimResult([], False)

    def finalize(
        self, outcomes: Sequence[Outcome], now_ms: int, *, label: str = "finalize"
    ) -> list[JobRow | None]:
        """Write every outcome in one transaction; None where the fence did not match.

        An outcome with `want_row=False` that applied answers `APPLIED` (its row unread).
        """

        # Outcomes nobody reads back and that hold no locks (the common case) go in one
        # statement; the others one by one, in the same transaction.
        # (A job listed twice, e.g. a stale attempt beside its re-claim, goes one by one:
        # RETURNING names rows, not outcomes.)
        seen = Counter(o.job_id for o in outcomes)
        batch = [
            o
            for o in outcomes
            if not o.want_row and not o.release_locks and o.kind != "retry" and seen[o.job_id] == 1
        ]
        if len(batch) < 2:
            batch = []
        batched = {o.job_id for o in batch}
        arg = json.dumps(
            [
                [o.job_id, o.worker_id, o.attempt, o.kind, o.output, o.error, o.progress,
                 o.progress_detail]
                for o in batch
            ]
        )  # fmt: skip

        def work(conn: sqlite3.Connection) -> list[JobRow | None]:
            matched: set[str] = set()
            if batch:
                matched = {r[0] for r in conn.execute(q.FINISH_MANY, (arg, now_ms))}
            results: list[JobRow | None] = []
            for o in outcomes:
                row: JobRow | None
                if o.job_id in batched:
                    row = APPLIED if o.job_id in matched else None
                elif o.kind == "retry":
                    row = conn.execute(
                        q.RETRY, (o.error, o.retry_at, now_ms, o.job_id, o.worker_id, o.attempt)
                    ).fetchone()
                    if row is None:
                        row = conn.execute(
                            q.CANCEL_INSTEAD_OF_RETRY,
                            (
                                now_ms,
                                now_ms,
                                o.progress,
                                o.progress_detail,
                                o.job_id,
                                o.worker_id,
                                o.attempt,
                            ),
                        ).fetchone()
                else:
                    params = (
                        o.kind,
                        o.output,
                        o.error,
                        now_ms,
                        now_ms,
                        o.progress,
                        o.progress_detail,
                        o.job_id,
                        o.worker_id,
                        o.attempt,
                    )
                    if o.want_row:
                        row = conn.execute(q.FINISH, params).fetchone()
                    else:
                        applied = conn.execute(q.FINISH_NO_ROW, params).rowcount == 1
                        row = APPLIED if applied else None
                if o.release_locks and row is not None:
                    # Only under a matched fence: a stale attempt must not free the
                    # locks a re-claim of the same job holds now.
                    conn.execute(q.RELEASE_JOB_LOCKS, (o.job_id, o.worker_id))
                results.append(row)
            return results

        return self.write(work, label)

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
            cur = conn.execute(
                q.SET_PROGRESS, (progress, detail, now_ms, job_id, worker_id, attempt)
            )
            return cur.rowcount == 1

        return self.write(work, "progress")

    def patch_metadata(
        self, job_id: str, worker_id: str, attempt: int, patch: dict[str, Any], now_ms: int
    ) -> dict[str, Any] | None:
        """Shallow-merge `patch` into the stored metadata; None if the claim was lost."""

        def work(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(q.GET_METADATA_FENCED, (job_id, worker_id, attempt)).fetchone()
            if row is None:
                return None
            merged = {**json.loads(row[0]), **patch}
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

        return self.write(work, "patch_metadata")

    # -- durable locks (layer 3) ----------------------------------------------------

    def try_lock(self, name: str, job_id: str, worker_id: str, now_ms: int) -> bool:
        return bool(
            self.write(
                lambda c: c.execute(q.TRY_LOCK, (name, job_id, worker_id, now_ms)).rowcount,
                "lock",
            )
        )

    def release_lock(self, name: str, job_id: str) -> None:
        self.write(lambda c: c.execute(q.RELEASE_LOCK, (name, job_id)), "unlock")

    # -- cancellation ---------------------------------------------------------------

    def request_cancel(
        self, job_id: str, reason: str | None, error: str, now_ms: int
    ) -> tuple[str | None, str | None, JobRow | None]:
        """Flag the row; cancel it at once if it is waiting.

        Returns (status before, worker id, terminal row if it was cancelled here).
        """

        def work(conn: sqlite3.Connection) -> tuple[str | None, str | None, JobRow | None]:
            flagged = conn.execute(q.REQUEST_CANCEL, (reason, now_ms, job_id)).fetchone()
            if flagged is None:
                return None, None, None
            status, worker = flagged
            row = None
            if status in ("pending", "delayed"):
                row = conn.execute(q.CANCEL_WAITING, (error, now_ms, now_ms, job_id)).fetchone()
            return status, worker, row

        return self.write(work, "cancel")

    def force_cancel(
        self, job_id: str, worker_id: str, attempt: int, error: str, now_ms: int
    ) -> JobRow | None:
        def work(conn: sqlite3.Connection) -> JobRow | None:
            row: JobRow | None = conn.execute(
                q.FORCE_CANCEL_RUNNING, (error, now_ms, now_ms, job_id, worker_id, attempt)
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
            waiting = conn.execute(
                q.CANCEL_MANY_WAITING.format(where=where), (error, now_ms, now_ms, *params)
            ).fetchall()
            return [(r[0], r[1]) for r in running], waiting

        return self.write(work, "cancel_many")

    def cancel_requested_among(self, ids: Sequence[str]) -> list[tuple[str, str | None]]:
        if not ids:
            return []
        sql = q.CANCEL_REQUESTED_AMONG.format(ids=",".join("?" * len(ids)))
        return self.read(lambda c: [(r[0], r[1]) for r in c.execute(sql, tuple(ids))])

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> JobRow | None:
        row: JobRow | None = self.read(lambda c: c.execute(q.GET_JOB, (job_id,)).fetchone())
        return row

    def terminal_among(self, ids: Sequence[str]) -> list[JobRow]:
        if not ids:
            return []
        out: list[JobRow] = []
        for start in range(0, len(ids), 500):
            chunk = tuple(ids[start : start + 500])
            sql = q.TERMINAL_AMONG.format(ids=",".join("?" * len(chunk)))
            out.extend(self._read_all(sql, chunk))
        return out

    def _read_all(self, sql: str, params: tuple[Any, ...]) -> list[JobRow]:
        return self.read(lambda c: c.execute(sql, params).fetchall())

    def list(self, flt: JobFilter, *, limit: int, offset: int) -> list[JobRow]:
        sql, params = _where(flt).list_sql(limit=limit, offset=offset)
        return self.read(lambda c: c.execute(sql, params).fetchall())

    def count(self, flt: JobFilter) -> int:
        sql, params = _where(flt).count_sql()
        return int(self.read(lambda c: c.execute(sql, params).fetchone()[0]))

    def gc(self, before_ms: int, *, batch: int = 1000) -> int:
        total = 0
        while True:
            n = self.write(lambda c: c.execute(q.GC_TERMINAL, (before_ms, batch)).rowcount, "gc")
            total += n
            if n < batch:
                return total


_row_of = fresh_row  # the name `job_schedules` imports


def _insert(conn: sqlite3.Connection, rows: Sequence[JobRow]) -> None:
    """INSERT fresh rows, in order. Rows that differ only in id and payload (one
    `enqueue_many` call) go `SHARED_CHUNK` to a statement, binding two values a row;
    others go `_CHUNK` rows per statement, the rest one by one.

    One statement per row pays for opening a cursor on the table and on every index for
    each row; a multi-row VALUES opens them once per chunk (about a third less time per
    row for a large batch).
    """
    n = len(rows)
    if n <= 1:
        if rows:
            conn.execute(q.INSERT_JOB, _insert_params(rows[0]))
        return
    shared = _shared_params(rows[0])
    if all(_shared_params(row) == shared for row in rows):
        for sql, params in shared_inserts(shared, rows):
            conn.execute(sql, params)
        return
    full = n - n % _CHUNK
    if full:
        conn.executemany(
            _INSERT_CHUNK,
            (
                tuple(itertools.chain.from_iterable(map(_insert_params, rows[i : i + _CHUNK])))
                for i in range(0, full, _CHUNK)
            ),
        )
    if full < n:
        conn.executemany(q.INSERT_JOB, map(_insert_params, rows[full:]))


def shared_inserts(
    shared: tuple[Any, ...], rows: Sequence[JobRow]
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The statements that insert `rows`, which share `shared` (`SHARED_COLUMNS`) and
    differ only in id and payload: `SHARED_CHUNK` rows per statement."""
    for start in range(0, len(rows), SHARED_CHUNK):
        chunk = rows[start : start + SHARED_CHUNK]
        pairs = itertools.chain.from_iterable(map(_id_payload, chunk))
        yield q.insert_shared_sql(len(chunk)), (*shared, *pairs)


def _where_queue_type(queue: str | None, type_name: str | None) -> tuple[str, tuple[str, ...]]:
    parts: list[str] = []
    params: list[str] = []
    if queue is not None:
        parts.append("queue = ?")
        params.append(queue)
    if type_name is not None:
        parts.append("type = ?")
        params.append(type_name)
    return " AND ".join(parts), tuple(params)


def _where(flt: JobFilter) -> q.JobsWhere:
    return q.JobsWhere(flt.status, flt.queue, flt.type, flt.schedule_id, flt.parent_id)


def _forked(ref: weakref.ReferenceType[SqliteStore]) -> None:
    store = ref()
    if store is not None:
        store._after_fork()
