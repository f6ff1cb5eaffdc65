"""Schema 4: a job's rowid is its id's row key, and `jobs.id` has no index of its own.

On real SQLite files: rows written before schema 4 keep their ids and stay reachable
through every by-id path after the upgrade; a row key another process took gets the
new row a fresh id (forced here by rewinding the id sequence, since two processes
meeting in one millisecond cannot be arranged); ids that name no key still work; and
the foreign key `parent_id` lost lives on as a check and a trigger.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import jobledger as jl
from jobledger._core import ids
from jobledger._observe.read_model import ReadModel
from jobledger._storage import layout as L
from jobledger._storage.interface import NewJob, Outcome
from jobledger._storage.sqlite import migrate as migrate_module
from jobledger._storage.sqlite import queries as q
from jobledger._storage.sqlite.migrate import load_migrations
from jobledger._storage.sqlite.store import SqliteStore
from jobledger.testing import FakeClock, drain
from tests.conftest import run
from tests.engine import ITEM, Item, make_manager, transactions
from tests.integration import _procs, v7_id

NOW_MS = 1_700_000_000_000
START = datetime.fromtimestamp(NOW_MS / 1000, tz=UTC)


def _rowid(db: str, job_id: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT rowid FROM jobs WHERE id = ?", (job_id,)).fetchone()[0])


def _one(db: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchone()[0]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "queue.db")


def _version_3_file(db: str) -> dict[str, str]:
    """A schema-3 file as an older library left it, with ids of that version."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        for migration in load_migrations()[:3]:
            conn.execute("BEGIN IMMEDIATE")
            migrate_module._apply(conn, migration)
            conn.execute("COMMIT")
        made = {
            "parent": v7_id(NOW_MS - 5_000, 1),
            "child": v7_id(NOW_MS - 4_000, 2),
            "pending": v7_id(NOW_MS - 3_000, 3),
            "waiting": v7_id(NOW_MS - 2_000, 4),
            "running": v7_id(NOW_MS - 1_000, 5),
        }
        insert = (
            "INSERT INTO jobs (id, type, status, queue, payload, parent_id, worker_id, "
            "scheduled_at, started_at, finished_at, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        t = NOW_MS - 100_000  # long enough ago for worker w-old to count as dead
        # Inserted out of id order: the upgrade numbers rows by id, not by insertion.
        for name, status, parent, worker, finished in (
            ("running", "running", None, "w-old", None),
            ("child", "pending", made["parent"], None, None),
            ("parent", "completed", None, None, t),
            ("pending", "pending", None, None, None),
            ("waiting", "pending", None, None, None),
        ):
            row = (made[name], ITEM.name, status, "q", '{"n": 7}', parent, worker)
            conn.execute(insert, (*row, t, t, finished, t, t))
        conn.execute(
            "INSERT INTO locks (name, job_id, worker_id, acquired_at) VALUES (?, ?, ?, ?)",
            ("report", made["running"], "w-old", t),
        )
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, started_at, heartbeat_at) "
            "VALUES ('w-old', 'elsewhere', 1, ?, ?)",
            (t, t),
        )
        conn.execute(
            "INSERT INTO queues (name, type, created_at) VALUES ('q', ?, ?)", (ITEM.name, t)
        )
        return made
    finally:
        conn.close()


def test_a_version_3_file_keeps_serving_its_jobs_by_their_old_ids(db: str) -> None:
    old = _version_3_file(db)
    clock = FakeClock(START)
    jobs = make_manager(db, clock=clock)
    ran: list[str] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.job_id)

    # Renumbered below zero, in id order.
    rowids = [_rowid(db, old[name]) for name in ("parent", "child", "pending", "waiting")]
    assert rowids == sorted(rowids)
    assert all(r < 0 for r in rowids)
    # The lock now names its holder's row.
    assert _one(db, "SELECT job_rowid FROM locks") == _rowid(db, old["running"])

    snap = jobs.get(old["pending"])
    assert snap is not None
    assert snap.status == "pending"
    assert snap.payload == {"n": 7}
    assert jobs.get(old["child"]).parent_id == old["parent"]  # type: ignore[union-attr]
    assert [s.id for s in jobs.list(parent_id=old["parent"])] == [old["child"]]

    new = jobs.enqueue(ITEM, Item(n=1))
    assert _rowid(db, new.id) == ids.row_key(new.id)
    listed = [s.id for s in jobs.list()]
    newest_first = ("running", "waiting", "pending", "child", "parent")
    assert listed == [new.id, *(old[name] for name in newest_first)]

    async def main() -> None:
        assert await jobs.cancel(old["waiting"]) == "cancelled"
        await drain(jobs, timeout=10)

    run(main())
    # The dead worker's running job was reset by recovery, its lock released, and run.
    assert sorted(ran) == sorted([old["child"], old["pending"], old["running"], new.id])
    assert _one(db, "SELECT count(*) FROM locks") == 0
    status = {s.id: s.status for s in jobs.list()}
    assert status[old["waiting"]] == "cancelled"
    done = ("pending", "child", "running")
    assert {status[old[n]] for n in done} == {status[new.id]} == {"completed"}
    # Deleting the parent clears its child's reference, as the foreign key's SET NULL did.
    assert jobs._store.gc(NOW_MS - 100_000 + 1) == 1  # the parent alone finished then
    assert jobs.get(old["parent"]) is None
    assert jobs.get(old["child"]).parent_id is None  # type: ignore[union-attr]
    run(jobs.stop())


def test_an_observer_reads_a_file_no_worker_has_upgraded(db: str) -> None:
    old = _version_3_file(db)
    with ReadModel(db) as rm:
        assert rm.schema_version() == 3
        snap = rm.get_job(old["pending"])
        assert snap is not None
        assert snap.id == old["pending"]
        assert snap.retry_of is None  # the column came later; an observer reads it as NULL
        assert rm.get_job(v7_id(NOW_MS, 99)) is None
    assert _one(db, "PRAGMA user_version") == 3  # observers never migrate


def test_a_new_row_is_stored_under_its_key_with_no_index_on_the_id(db: str) -> None:
    jobs = make_manager(db)
    one = jobs.enqueue(ITEM, Item(n=1))
    many = jobs.enqueue_many(ITEM, [Item(n=i) for i in range(250)])
    for h in [one, *many]:
        assert _rowid(db, h.id) == ids.row_key(h.id)
    with sqlite3.connect(db) as conn:
        indexed: list[str] = []
        for _, name, *_rest in conn.execute("PRAGMA index_list(jobs)"):
            columns = [r[2] for r in conn.execute(f"PRAGMA index_info({name})")]
            if "id" in columns:
                indexed.append(name)
        # Only the pre-schema-4 rows' index names the id, and holds none of these rows.
        assert indexed == ["jobs_legacy_id_idx"]
        count = "SELECT count(*) FROM jobs INDEXED BY jobs_legacy_id_idx WHERE rowid < 0"
        assert conn.execute(count).fetchone()[0] == 0
    # A look-alike of a real id (same key, other random bits) finds nothing.
    other = one.id[:-1] + ("0" if one.id[-1] != "0" else "1")
    assert ids.row_key(other) == ids.row_key(one.id)
    assert jobs.get(other) is None
    assert jobs.get(one.id) is not None


def _rewind_to(job_id: str, now_ms: int) -> None:
    """Make the next id of `now_ms` take `job_id`'s row key, as another process could."""
    ids._last_ms = now_ms
    ids._end = ids.row_key(job_id)  # type: ignore[assignment]


@pytest.mark.parametrize("path", ["single", "many", "keyed", "write_tx"])
def test_a_taken_row_key_gets_the_new_job_a_fresh_id(db: str, path: str) -> None:
    clock = FakeClock(START)
    jobs = make_manager(db, clock=clock)
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.payload.n)

    async def main() -> list[str]:
        async with jobs:
            first = jobs.enqueue(ITEM, Item(n=0))
            await first.finished
            _rewind_to(first.id, NOW_MS)
            if path == "single":
                made = [jobs.enqueue(ITEM, Item(n=1))]
            elif path == "many":
                made = jobs.enqueue_many(ITEM, [Item(n=i) for i in range(1, 4)])
            elif path == "keyed":
                made = [jobs.enqueue(ITEM, Item(n=1), idempotency_key="k")]
            else:
                with jobs.write_tx() as tx:
                    made = [jobs.enqueue_tx(tx, ITEM, Item(n=1))]
            for h in made:
                await h.finished
            return [first.id, *(h.id for h in made)]

    made = run(main())
    assert len(set(made)) == len(made)
    assert ids.row_key(made[1]) != ids.row_key(made[0])
    for job_id in made:
        assert _rowid(db, job_id) == ids.row_key(job_id)
        snap = jobs.get(job_id)
        assert snap is not None
        assert snap.status == "completed"
    assert sorted(ran) == list(range(len(made)))


def test_a_key_taken_every_time_ends_in_a_clear_error_and_writes_nothing(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = make_manager(db, clock=FakeClock(START))
    first = jobs.enqueue(ITEM, Item(n=0))
    taken = ids.row_key(first.id)
    assert taken is not None
    # Every fresh id the store asks for names the same taken key.
    monkeypatch.setattr(ids, "new_keyed_id", lambda now_ms: (taken, ids.new_id(now_ms)))
    _rewind_to(first.id, NOW_MS)
    with pytest.raises(jl.JobError) as info:
        jobs.enqueue(ITEM, Item(n=1))
    assert info.value.code == "DB_ROW_KEYS_TAKEN"
    assert _one(db, "SELECT count(*) FROM jobs") == 1


def test_two_processes_that_make_the_same_keys_lose_no_job(db: str) -> None:
    """A real meeting of row keys: two spawned processes enqueue at once, both counting
    from the same first key of one millisecond. Every job of both is stored, under its
    own key, with the id its process was given."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: Any = ctx.Queue()
    n = 150
    procs = [
        ctx.Process(target=_procs.enqueue_from_one_key, args=(db, NOW_MS, n, barrier, results))
        for _ in range(2)
    ]
    try:
        for p in procs:
            p.start()
        answers = [results.get(timeout=_procs.WAIT) for _ in procs]
    finally:
        for p in procs:
            p.join(_procs.WAIT)
            if p.is_alive():
                p.kill()
    assert [kind for kind, _ in answers] == ["ok", "ok"], answers
    made = [job_id for _, got in answers for job_id in got]
    assert len(made) == len(set(made)) == 4 * n
    with sqlite3.connect(db) as conn:
        stored = dict(conn.execute("SELECT id, rowid FROM jobs WHERE queue != 'warm'"))
    assert set(stored) == set(made)
    assert all(stored[i] == ids.row_key(i) for i in made)
    # Both began at the same key: one stored its first job there, the other was given a
    # fresh id for it.
    first = NOW_MS << ids.SEQ_BITS
    assert sorted(ids.row_key(got[0]) == first for _, got in answers) == [False, True]


def test_ids_that_name_no_key_are_stored_below_zero_in_insertion_order(db: str) -> None:
    store = SqliteStore(db)
    try:

        def job(job_id: str, created: int) -> NewJob:
            return NewJob(
                id=job_id, type="t", status="pending", queue="q", priority=0, payload="{}",
                max_attempts=3, timeout_ms=None, idempotency_key=None, parent_id=None,
                schedule_id=None, metadata="{}", enqueued_by="p", scheduled_at=1,
                created_at=created,
            )  # fmt: skip

        keyed = ids.new_id(5)
        store.enqueue([job("b", 2), job(keyed, 5), job("a", 3)])
        store.enqueue([job("c", 4)])
        assert [_rowid(db, i) for i in ("b", "a", "c")] == [
            q.LEGACY_BASE + 1,
            q.LEGACY_BASE + 2,
            q.LEGACY_BASE + 3,
        ]
        assert _rowid(db, keyed) == ids.row_key(keyed)
        assert store.get("a") is not None
        assert store.get("zz") is None
        claimed = store.claim(
            "q", queue_cap=10, global_cap=10, limit=10, now_ms=10, worker_id="w", types=("t",)
        )
        assert [j.id for j in claimed.jobs] == ["b", "a", "c", keyed]
        outcomes = [
            Outcome(j.id, "w", j.attempt, "completed", want_row=False) for j in claimed.jobs
        ]
        assert all(r is not None for r in store.finalize(outcomes, now_ms=11))
        assert [r[L.C_ID] for r in store.terminal_among(["a", keyed, "nope"])] == ["a", keyed]
    finally:
        store.close()


def test_a_missing_parent_is_refused_and_a_deleted_one_is_forgotten(db: str) -> None:
    clock = FakeClock(START)
    jobs = make_manager(db, clock=clock)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    with pytest.raises(jl.JobError) as info:
        jobs.enqueue(ITEM, Item(), parent_id=ids.new_id(NOW_MS))
    assert info.value.code == "JOB_NOT_FOUND"
    parent = jobs.enqueue(ITEM, Item())
    child = jobs.enqueue(ITEM, Item(), parent_id=parent.id)
    run(drain(jobs, timeout=10))
    assert jobs.get(child.id).parent_id == parent.id  # type: ignore[union-attr]
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM jobs WHERE id = ?", (parent.id,))
    assert jobs.get(child.id).parent_id is None  # type: ignore[union-attr]
    run(jobs.stop())


def test_a_finalize_finds_an_old_row_where_its_claim_found_it(db: str) -> None:
    # An id made before schema 4 names no row key: looked up by id, its row is found
    # through jobs_legacy_id_idx (`keys.key_of`). The claim returns the rowid it took,
    # and the finalize writes there, so ending such a job reads no key at all.
    old = _version_3_file(db)
    jobs = make_manager(db)
    ran: list[str] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        ran.append(ctx.job_id)

    seen: list[str] = []
    conn: sqlite3.Connection = jobs._store.conn  # type: ignore[attr-defined]

    async def main() -> None:
        conn.set_trace_callback(seen.append)
        await drain(jobs, timeout=10)
        conn.set_trace_callback(None)

    run(main())
    olds = {old[name] for name in ("child", "pending", "waiting", "running")}
    assert olds <= set(ran)
    assert all(_rowid(db, job_id) < 0 for job_id in olds)
    assert {s.status for s in jobs.list() if s.id in olds} == {"completed"}
    finishing = [
        tx
        for tx in transactions(seen)
        if any(
            sql.startswith(("WITH o", "UPDATE jobs SET status")) and "finished_at" in sql
            for sql in tx
        )
    ]
    assert finishing
    legacy = [sql for tx in finishing for sql in tx if "rowid < 0" in sql]
    assert legacy == []
    run(jobs.stop())
