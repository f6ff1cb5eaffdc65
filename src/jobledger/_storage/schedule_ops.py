"""The schedule operations of both stores, written once.

Every statement named here exists under the same name in both dialects' queries
(`sqlite/queries.py`, `postgres/queries.py`), each in its own dialect, so one
implementation serves both; a store mixes `ScheduleOps` in and supplies `q`, `read`,
`write` and `enqueue`. `conn` arguments are a transaction the caller holds (from
`Store.write` or `Store.user_transaction`): the operation runs inside it instead of in a
transaction of its own.

Rules kept here, so every backend keeps them the same way:
* a natural fire at T is a compare-and-set of `next_run` from a value <= T (`MARK_FIRED`)
  and its job row, in one transaction: two processes firing T cannot both win;
* the overlap decision of a natural fire is taken inside the fire's transaction, after its
  compare-and-set won (so the fire is single-writer) and from the schedule's jobs that
  have not ended, as the transaction sees them (`LIVE_SCHEDULE_JOBS`): two leaders can
  never both decide, and on PostgreSQL those rows are locked, so an end racing the fire
  is either seen by it or sees its held-back row;
* a natural fire that makes up the points it skipped (`AllMissed`: fires before T whose
  writes failed) writes them only if `next_run` is still the value it computed them from
  (`MARK_FIRED_FROM`, the same compare-and-set plus `next_run == from`); otherwise it
  fires T alone (`MARK_FIRED`): no point is written twice;
* a catch-up is a compare-and-set on `next_run == expected` (`CATCH_UP_CAS`);
* a backfill writes, in one transaction with the schedule row read under the write lock,
  only the fires whose key no stored job holds (live, held back or ended, `KEY_STORED`);
* deleting a schedule releases its held-back fire in the same transaction;
* a manual trigger re-reads the row under the write lock and writes back its current
  `next_run` (or NULL when it consumes an overdue one-shot);
* an ensure is an insert that does nothing when `(type, name)` is taken (the unique
  index `job_schedules_type_name_uq`, there since schema 1 on both backends), then a read
  of the row that is there, in one transaction: callers racing on one name all end on
  the same row, and none fails on the index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from jobledger._storage.interface import JobRow, NewJob
from jobledger._storage.records import EnsuredSchedule, ScheduleRow, schedule_row

__all__ = ["Decide", "OverlapDecision", "ScheduleOps"]

T = TypeVar("T")

# What a natural fire does, given the schedule's jobs that have not ended as
# `(status, held_back)` pairs (`held_back`: a waiting fire of `buffer_one`, not a
# workflow's step): "enqueue", "hold" (write it `waiting`, released when the last of
# those ends) or "skip". Decided above the dialects (`_scheduling/overlap.py`).
OverlapDecision: TypeAlias = Literal["enqueue", "hold", "skip"]
Decide: TypeAlias = Callable[[Sequence[tuple[str, bool]]], OverlapDecision]


class _Backend(Protocol):
    @property
    def q(self) -> Any: ...
    def read(self, work: Callable[[Any], T]) -> T: ...
    def write(self, work: Callable[[Any], T], label: str) -> T: ...
    def enqueue(self, jobs: Sequence[NewJob], conn: Any | None = None) -> list[JobRow]: ...


def _row(raw: Any) -> ScheduleRow | None:
    return None if raw is None else schedule_row(raw)


class ScheduleOps:
    """Schedule rows as named operations (see the module docstring)."""

    def insert_schedule(self: _Backend, row: ScheduleRow, conn: Any | None = None) -> None:
        params = (
            row.id, row.type, row.name, row.trigger, row.payload, row.catch_up, row.enabled,
            row.metadata, row.created_at, row.updated_at, row.overlap, row.jitter_ms,
        )  # fmt: skip
        if conn is not None:
            conn.execute(self.q.INSERT_SCHEDULE, params)
        else:
            self.write(lambda c: c.execute(self.q.INSERT_SCHEDULE, params), "insert_schedule")

    def ensure_schedule(
        self: _Backend,
        row: ScheduleRow,
        changes: Callable[[ScheduleRow], Mapping[str, Any]],
    ) -> EnsuredSchedule:
        """Insert `row` unless its `(type, name)` has a schedule; else set on that one the
        columns `changes(existing)` names (`layout.SCHEDULE_COLUMNS`; empty: none). One
        transaction, so `changes` sees the row as it is under the write."""
        insert = (
            row.id, row.type, row.name, row.trigger, row.payload, row.catch_up, row.enabled,
            row.metadata, row.created_at, row.updated_at, row.overlap, row.jitter_ms,
        )  # fmt: skip
        by_name = (row.type, row.name)

        def work(conn: Any) -> EnsuredSchedule:
            # Twice at most: only a delete of the holder between our two statements leaves
            # nothing to read, and then the insert has the name to itself.
            for _ in range(2):
                conn.execute(self.q.ENSURE_SCHEDULE, insert)
                stored = _row(conn.execute(self.q.GET_SCHEDULE_BY_NAME, by_name).fetchone())
                if stored is not None:
                    break
            else:
                raise RuntimeError(f"schedule {row.type}/{row.name!r} vanished twice")
            if stored.id == row.id:
                return EnsuredSchedule(stored, True, ())
            sets = dict(changes(stored))
            if not sets:
                return EnsuredSchedule(stored, False, ())
            conn.execute(self.q.update_schedule_sql(tuple(sets)), (*sets.values(), stored.id))
            after = _row(conn.execute(self.q.GET_SCHEDULE, (stored.id,)).fetchone())
            assert after is not None  # updated in this transaction
            return EnsuredSchedule(after, False, tuple(sets))

        return self.write(work, "ensure_schedule")

    def get_schedule(self: _Backend, sid: str, conn: Any | None = None) -> ScheduleRow | None:
        if conn is not None:
            return _row(conn.execute(self.q.GET_SCHEDULE, (sid,)).fetchone())
        return _row(self.read(lambda c: c.execute(self.q.GET_SCHEDULE, (sid,)).fetchone()))

    def get_schedule_by_name(
        self: _Backend, type_name: str, name: str, conn: Any | None = None
    ) -> ScheduleRow | None:
        """`name` is the stored name: "" for the type's singleton."""
        params = (type_name, name)
        if conn is not None:
            return _row(conn.execute(self.q.GET_SCHEDULE_BY_NAME, params).fetchone())
        return _row(self.read(lambda c: c.execute(self.q.GET_SCHEDULE_BY_NAME, params).fetchone()))

    def schedules_of_type(self: _Backend, type_name: str) -> list[ScheduleRow]:
        rows = self.read(lambda c: c.execute(self.q.SCHEDULES_OF_TYPE, (type_name,)).fetchall())
        return [schedule_row(r) for r in rows]

    def list_schedules(self: _Backend) -> list[ScheduleRow]:
        """Every schedule, oldest first."""
        return [
            schedule_row(r)
            for r in self.read(lambda c: c.execute(self.q.LIST_SCHEDULES).fetchall())
        ]

    def update_schedule(
        self: _Backend, sid: str, fields: Mapping[str, Any], conn: Any | None = None
    ) -> None:
        """Set the named columns (`layout.SCHEDULE_COLUMNS` names only)."""
        sql = self.q.update_schedule_sql(tuple(fields))
        params = (*fields.values(), sid)
        if conn is not None:
            conn.execute(sql, params)
        else:
            self.write(lambda c: c.execute(sql, params), "update_schedule")

    def delete_schedule(self: _Backend, sid: str, now_ms: int) -> bool:
        """Delete the row; its jobs stay (their `schedule_id` is set to NULL by the schema),
        and a fire it held back (`buffer_one`) becomes pending: nothing would release it."""

        def work(conn: Any) -> bool:
            conn.execute(self.q.RELEASE_BUFFERED, (now_ms, now_ms, sid))
            return bool(conn.execute(self.q.DELETE_SCHEDULE, (sid,)).rowcount)

        return self.write(work, "delete_schedule")

    def set_schedule_next_run(self: _Backend, sid: str, next_ms: int | None, now_ms: int) -> None:
        self.write(
            lambda c: c.execute(self.q.SET_NEXT_RUN, (next_ms, now_ms, sid)), "schedule_next_run"
        )

    def catch_up_schedule(
        self: _Backend, sid: str, expected_next: int, following: int | None, now_ms: int
    ) -> bool:
        """Move `next_run` from `expected_next` to `following`; False when another process
        moved it first."""
        params = (following, now_ms, sid, expected_next)
        return bool(
            self.write(
                lambda c: c.execute(self.q.CATCH_UP_CAS, params).rowcount, "schedule_catch_up"
            )
        )

    def fire_schedule(
        self: _Backend,
        sid: str,
        job: NewJob | Sequence[NewJob] | None,
        *,
        expected_next: int | None,
        last_run: int,
        next_run: int | None,
        catch_up_next: int | None,
        now_ms: int,
        decide: Decide | None = None,
        missed: Sequence[NewJob] = (),
        missed_from: int | None = None,
    ) -> list[JobRow] | None:
        """One transaction: the calendar's compare-and-set, then `job` (or jobs: a
        catch-up's make-up jobs). None when the compare-and-set lost (nothing written);
        else the jobs' rows as stored ([] for no job, or a fire `decide` skipped). With
        `catch_up_next` (or no `expected_next`) the compare-and-set is the catch-up's
        (`next_run == expected_next`), else a natural fire's.

        `missed` (a natural fire's make-up jobs for the points it skipped, computed from
        `next_run == missed_from`) are written first, whatever `decide` says, when
        `next_run` is still `missed_from`; else the fire goes on without them. The rows
        are then the written make-ups' and the fire's, in that order.

        `decide` (a natural fire under an overlap policy) is asked after the
        compare-and-set won, from the schedule's jobs that have not ended; "skip" counts
        the fire in `skipped_count` and writes no job, "hold" writes it `waiting`."""
        jobs: Sequence[NewJob] = () if job is None else [job] if isinstance(job, NewJob) else job

        def work(conn: Any) -> list[JobRow] | None:
            made_up: list[NewJob] = []
            if catch_up_next is not None or expected_next is None:
                cas = conn.execute(self.q.CATCH_UP_CAS, (catch_up_next, now_ms, sid, expected_next))
            else:
                fired = (last_run, next_run, now_ms, sid, expected_next)
                cas = None
                if missed and missed_from is not None:
                    cas = conn.execute(self.q.MARK_FIRED_FROM, (*fired, missed_from))
                    if cas.rowcount == 1:
                        made_up = list(missed)
                if cas is None or cas.rowcount != 1:
                    cas = conn.execute(self.q.MARK_FIRED, fired)
            if cas.rowcount != 1:
                return None
            todo = list(jobs)
            if decide is not None and todo:
                live = conn.execute(self.q.LIVE_SCHEDULE_JOBS, (sid,)).fetchall()
                verdict = decide([(str(status), bool(held)) for status, held in live])
                if verdict == "skip":
                    conn.execute(self.q.SKIP_FIRE, (sid,))
                    todo = []
                elif verdict == "hold":
                    todo = [replace(j, status="waiting") for j in todo]
            # The made-up points after the decision: it is the fire's own, as it would be
            # without them (overlap never applies to make-up jobs).
            todo = made_up + todo
            return self.enqueue(todo, conn=conn) if todo else []

        return self.write(work, "schedule_fire")

    def backfill_schedule(
        self: _Backend,
        sid: str,
        plan: Callable[[ScheduleRow], Sequence[NewJob]],
    ) -> tuple[list[NewJob], list[JobRow]] | None:
        """Write the jobs `plan(row)` makes from the schedule as stored, except those whose
        idempotency key a stored job already holds (live, held back or ended), in one
        transaction; the jobs written and their rows as stored, or None when the schedule
        does not exist. `plan` may raise (nothing is written then)."""

        def work(conn: Any) -> tuple[list[NewJob], list[JobRow]] | None:
            row = _row(conn.execute(self.q.GET_SCHEDULE_FOR_WRITE, (sid,)).fetchone())
            if row is None:
                return None
            fresh = [
                j
                for j in plan(row)
                if j.idempotency_key is None
                or conn.execute(
                    self.q.KEY_STORED,
                    (j.idempotency_key, sid, j.idempotency_key, j.idempotency_key),
                ).fetchone()
                is None
            ]
            return fresh, self.enqueue(fresh, conn=conn) if fresh else []

        return self.write(work, "schedule_backfill")

    def manual_fire(
        self: _Backend, sid: str, job: NewJob, *, consume: bool, now_ms: int
    ) -> list[JobRow] | None:
        """Enqueue one extra run and set `last_run`; None when the schedule is gone.

        The row is re-read under the write lock: another process may have fired (moving
        `next_run`) since the caller read it, and writing back a stale `next_run` would
        make every later fire lose its compare-and-set."""

        def work(conn: Any) -> list[JobRow] | None:
            current = _row(conn.execute(self.q.GET_SCHEDULE, (sid,)).fetchone())
            if current is None:
                return None
            rows = self.enqueue([job], conn=conn)
            next_run = None if consume else current.next_run
            conn.execute(self.q.MARK_MANUAL, (now_ms, next_run, now_ms, sid))
            return rows

        return self.write(work, "schedule_manual")
