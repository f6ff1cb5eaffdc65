"""The kept counts (`job_counts`, `job_minutes`: SQLite migration 16, PostgreSQL 12; read
through `job_counts_now`, SQLite migration 18, PostgreSQL 14) against the table itself, after
real workloads, on both backends.

The reference is worked out here in Python from every row (`_expected`), independently
of the triggers and of the read model: per (queue, status, run bucket, latency bucket)
the rows, attempts started, retries, run and latency milliseconds; per minute the jobs
that ended completed or failed. The workloads are the library's own calls on real
databases (retries, permanent failures, cancels of pending and running jobs, workflows
releasing and cancelling downstream steps, debounced enqueues, GC), a worker process
killed with SIGKILL whose rows the next worker recovers, and two worker processes
draining one queue at once (on PostgreSQL, the per-session counter rows).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import jobledger as jl
from jobledger._core import ids
from jobledger._observe.read_model import HISTOGRAM_BUCKETS, JobQuery, ReadModel
from jobledger._storage.observe import KEPT_BOUNDS_MS
from jobledger._storage.open import open_store
from jobledger._types import RecoveryStrategy
from jobledger.testing import FakeClock
from tests.conftest import db_reader, db_rows, is_postgres
from tests.recovery import arun, read_markers, spawn, status_counts, wait_for, wait_for_async
from tests.recovery.worker_proc import ABANDON, BULK, RETRY, SINGLETON

OK = jl.JobType("kept.ok", int)
FLAKY = jl.JobType("kept.flaky", int)
BAD = jl.JobType("kept.bad", int)
SLOW = jl.JobType("kept.slow", int)
STEP = jl.JobType("kept.step", dict)

Key = tuple[str, str, int, int]
Sums = tuple[int, int, int, int, int]


def _bucket(value: int) -> int:
    for i, bound in enumerate(KEPT_BOUNDS_MS):
        if value <= bound:
            return i
    return len(KEPT_BOUNDS_MS)


def _expected(db: str) -> tuple[dict[Key, Sums], dict[int, tuple[int, int]]]:
    rows = db_rows(
        db, "SELECT queue, status, attempt, scheduled_at, started_at, finished_at FROM jobs"
    )
    counts: dict[Key, list[int]] = {}
    minutes: Counter[tuple[int, str]] = Counter()
    for queue, status, attempt, scheduled, started, finished in rows:
        ran = status in ("completed", "failed") and started is not None and finished is not None
        rb = _bucket(finished - started) if ran else -1
        lb = -1 if started is None else _bucket(started - scheduled)
        sums = counts.setdefault((queue, status, rb, lb), [0, 0, 0, 0, 0])
        sums[0] += 1
        sums[1] += attempt + (started is not None)
        sums[2] += attempt
        sums[3] += finished - started if ran else 0
        sums[4] += 0 if started is None else max(0, started - scheduled)
        if status in ("completed", "failed") and finished is not None:
            # PostgreSQL's bigint division and SQLite's integer one both truncate.
            minutes[(int(finished / 60000), status)] += 1
    by_minute = {m: (minutes[(m, "completed")], minutes[(m, "failed")]) for m, _ in list(minutes)}
    return {k: (v[0], v[1], v[2], v[3], v[4]) for k, v in counts.items()}, by_minute


def _kept(db: str) -> tuple[dict[Key, Sums], dict[int, tuple[int, int]]]:
    """The kept tables, summed over PostgreSQL's per-session slots, zero rows left out."""
    counts = {
        (str(q), str(s), int(rb), int(lb)): (int(a), int(b), int(c), int(d), int(e))
        for q, s, rb, lb, a, b, c, d, e in db_rows(
            db,
            "SELECT queue, status, rb, lb, sum(jobs), sum(started), sum(retried), "
            "sum(run_ms), sum(latency_ms) "
            "FROM job_counts_now "
            "GROUP BY queue, status, rb, lb",
        )
    }
    minutes = {
        int(m): (int(c), int(f))
        for m, c, f in db_rows(
            db, "SELECT minute, sum(completed), sum(failed) FROM job_minutes GROUP BY minute"
        )
    }
    return {k: v for k, v in counts.items() if any(v)}, {k: v for k, v in minutes.items() if any(v)}


def _statuses_now(db: str) -> Counter[str]:
    """Rows per status as the readers see them (`job_counts_now`), zeros left out."""
    rows = db_rows(db, "SELECT status, sum(jobs) FROM job_counts_now GROUP BY status")
    return +Counter({str(s): int(n) for s, n in rows})


def _assert_exact(db: str) -> dict[int, tuple[int, int]]:
    """The kept counts equal the rows; returns the kept minutes."""
    expected, minutes = _expected(db)
    kept, kept_minutes = _kept(db)
    assert kept == expected
    assert kept_minutes == minutes
    return kept_minutes


def test_the_kept_bounds_are_the_histograms_bounds() -> None:
    assert tuple(int(b * 1000) for b in HISTOGRAM_BUCKETS) == KEPT_BOUNDS_MS


def test_kept_counts_equal_the_rows_after_a_mixed_workload_and_gc(db: str) -> None:
    async def body() -> None:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.01)
        release = asyncio.Event()

        @jobs.handler(OK, recovery="retry", concurrency=4, queue=lambda n: f"kept.q{n % 3}")
        async def ok(ctx: jl.JobContext[int]) -> int:
            return ctx.payload

        @jobs.handler(FLAKY, recovery="retry", retry=jl.RetryPolicy(max_attempts=3, base_delay=0))
        async def flaky(ctx: jl.JobContext[int]) -> None:
            if ctx.attempt < 1:
                raise RuntimeError("once")

        @jobs.handler(BAD, recovery="retry", retry=jl.RetryPolicy(max_attempts=2, base_delay=0))
        async def bad(ctx: jl.JobContext[int]) -> None:
            raise RuntimeError("always")

        @jobs.handler(SLOW, recovery="retry", concurrency=2)
        async def slow(ctx: jl.JobContext[int]) -> None:
            await release.wait()

        @jobs.handler(STEP, recovery="retry", concurrency=4)
        async def step(ctx: jl.JobContext[dict[str, Any]]) -> None:
            if ctx.payload.get("fail"):
                raise jl.PermanentError("no")

        later = jobs.enqueue_many(OK, list(range(5)), delay=3600)  # delayed, then cancelled
        jobs.enqueue(OK, 7, idempotency_key="d", debounce=60)
        jobs.enqueue(OK, 8, idempotency_key="d", debounce=60)  # replaces the payload and time
        async with jobs:
            handles = [
                *jobs.enqueue_many(OK, list(range(30))),
                *jobs.enqueue_many(FLAKY, list(range(10))),
                *jobs.enqueue_many(BAD, list(range(5))),
            ]
            slow_handles = jobs.enqueue_many(SLOW, list(range(4)))
            for wf_fail in (False, True):
                wf = jobs.workflow(f"kept-{wf_fail}")
                first = wf.add(STEP, {"fail": wf_fail}, name="first")
                mid = wf.add_many(STEP, [{}, {}], name="mid", after=[first])
                wf.add(STEP, {}, name="last", after=[mid])
                await wf.enqueue().finished
            for h in handles:
                await h.finished
            await wait_for_async(
                lambda: status_counts(db, "type = 'kept.slow'").get("running") == 2,
                what="two slow jobs running",
            )
            for h in later[:3]:
                await jobs.cancel(h.id)
            for h in slow_handles:
                await jobs.cancel(h.id)  # two running, two pending
            release.set()
            _assert_exact(db)
        _assert_exact(db)

        # GC takes the finished rows away: the counts follow them, the minutes stay.
        before = _assert_exact(db)
        store = open_store(db)
        try:
            # Everything ended by now; the minutes of the last day stay (MINUTES_KEPT).
            assert store.gc(int(time.time() * 1000) + 1000) > 0
        finally:
            store.close()
        expected, _ = _expected(db)
        kept, minutes = _kept(db)
        assert kept == expected
        assert minutes == before

    arun(body)


def test_kept_counts_stay_exact_when_a_killed_workers_rows_are_recovered(
    db: str, tmp_path: Path
) -> None:
    per_type = 30
    producer = jl.JobManager(db)
    for t in (ABANDON, RETRY, SINGLETON):
        producer.enqueue_many(t, list(range(per_type)))
    arun(producer.stop)
    total = 3 * per_type

    child = spawn(db, "block", tmp_path, "w1", "--concurrency", str(per_type))
    try:
        child.wait_started()
        wait_for(
            lambda: (
                status_counts(db).get("running") == total
                and len(read_markers(child.markers)) == total
            ),
            what=f"{total} running jobs in the child",
        )
        _assert_exact(db)
    finally:
        child.kill9()

    async def restart() -> None:
        jobs = jl.JobManager(db, startup_delay=0, global_max_concurrency=1000, poll_interval=0.02)
        strategies: tuple[tuple[jl.JobType[int], RecoveryStrategy], ...] = (
            (ABANDON, "abandon"),
            (RETRY, "retry"),
            (SINGLETON, "singleton"),
        )
        for t, strategy in strategies:

            async def noop(ctx: jl.JobContext[int]) -> None:
                return None

            jobs.handler(t, recovery=strategy, concurrency=per_type)(noop)
        async with jobs:
            await wait_for_async(
                lambda: not {"pending", "delayed", "running"} & set(status_counts(db)),
                what="every recovered row to end",
            )
            _assert_exact(db)

    arun(restart)
    _assert_exact(db)


def test_two_worker_processes_draining_one_queue_keep_exact_counts(db: str, tmp_path: Path) -> None:
    n = 600
    producer = jl.JobManager(db)
    for start in range(0, n, 100):
        producer.enqueue_many(BULK, list(range(start, start + 100)))
    arun(producer.stop)
    children = [spawn(db, "work", tmp_path, f"w{i}", "--concurrency", "20") for i in range(2)]
    try:
        for c in children:
            c.wait_started()
        wait_for(lambda: status_counts(db).get("completed") == n, what=f"{n} completed jobs")
        _assert_exact(db)
    finally:
        for c in children:
            assert c.terminate() == 0
    _assert_exact(db)
    runs = [r for c in children for r in read_markers(c.markers)]
    assert len({r[1] for r in runs}) == n
    if is_postgres(db):
        # Each session wrote its own rows; with both gone, GC folds them into slot 0
        # and the sums do not move.
        assert len({r[0] for r in db_rows(db, "SELECT DISTINCT slot FROM job_counts")}) >= 2
        store = open_store(db)
        try:
            store.gc(0)
        finally:
            store.close()
        mine = {
            int(r[0])
            for r in db_rows(db, "SELECT pg_backend_pid()")  # db_rows' own session
        }
        slots = {int(r[0]) for r in db_rows(db, "SELECT DISTINCT slot FROM job_counts")}
        assert slots <= {0} | mine or slots == {0}
        _assert_exact(db)


@pytest.fixture
def ended(db: str) -> tuple[str, FakeClock]:
    """Jobs that ended in known minutes: at 12:00:30 three completed and one failed,
    at 12:02:10 two completed (a FakeClock that only the test moves)."""
    clock = FakeClock(datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC))

    async def body() -> None:
        jobs = jl.JobManager(db, clock=clock, startup_delay=0, poll_interval=0.01)

        @jobs.handler(OK, recovery="retry")
        async def ok(ctx: jl.JobContext[int]) -> None:
            if ctx.payload < 0:
                raise jl.PermanentError("negative")

        async with jobs:
            for h in jobs.enqueue_many(OK, [1, 2, 3, -1]):
                await h.finished
            clock.advance(100)
            for h in jobs.enqueue_many(OK, [4, 5]):
                await h.finished

    arun(body)
    return db, clock


def test_throughput_is_every_minute_oldest_first_zeros_included(
    ended: tuple[str, FakeClock],
) -> None:
    db, clock = ended
    _assert_exact(db)
    with ReadModel(db, clock=clock) as rm:
        got = rm.throughput(5)
        assert got.minutes == 5
        assert [(at, c, f) for at, c, f in got.items][-3:] == [
            (int(datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp() * 1000), 3, 1),
            (int(datetime(2026, 12, 1, 12, 1, tzinfo=UTC).timestamp() * 1000), 0, 0),
            (int(datetime(2026, 12, 1, 12, 2, tzinfo=UTC).timestamp() * 1000), 2, 0),
        ]
        assert [i[1:] for i in got.items[:2]] == [(0, 0), (0, 0)]
        data = got.to_json()
        assert data["items"][-1] == {
            "at": "2026-12-01T12:02:00.000000Z",
            "completed": 2,
            "failed": 0,
        }
        assert len(rm.throughput().items) == 60
        assert len(rm.throughput(1440).items) == 1440
        with pytest.raises(ValueError, match="minutes"):
            rm.throughput(0)


def test_the_overview_and_metrics_read_the_kept_counts(ended: tuple[str, FakeClock]) -> None:
    db, clock = ended
    # The kept table is what they read: a row changed behind the triggers' back (only a
    # test does that) shows, which a pass over `jobs` would not.
    db_rows(db, "UPDATE job_counts SET jobs = jobs + 1000 WHERE status = 'completed'")
    with ReadModel(db, clock=clock) as rm:
        stats = {q.name: q for q in rm.queue_stats()}
        assert stats[OK.name].counts["completed"] == 5 + 1000
        assert rm.metrics().jobs[(OK.name, "completed")] == 5 + 1000


def _old_rows() -> list[tuple[Any, ...]]:
    """Rows as a release before the kept counts left them: every status, started and
    finished times around the bounds, retries."""
    rows: list[tuple[Any, ...]] = []
    statuses = ("pending", "delayed", "running", "completed", "failed", "cancelled", "waiting")
    for i in range(140):
        status = statuses[i % 7]
        started = None if status in ("pending", "delayed", "waiting") else 1000 + i * 7
        finished = None if started is None or status == "running" else started + 2 ** (i % 23)
        rows.append(
            (ids_new(i), "t", status, f"q{i % 3}", "{}", i % 3, 900, started, finished, 1, 1)
        )
    return rows


def ids_new(i: int) -> str:
    return ids.new_id(1_764_590_400_000 + i)


_INSERT_OLD = (
    "INSERT INTO jobs (id, type, status, queue, payload, attempt, scheduled_at, started_at, "
    "finished_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


_INSERT_OLD_KEYED = _INSERT_OLD.replace("(id,", "(rowid, id,").replace("(?,", "(?, ?,")


def _sqlite_file_before(path: str, migration: str) -> sqlite3.Connection:
    """A SQLite file at the schema before `migration` (its name), holding `_old_rows()`."""
    from jobledger._storage.sqlite import migrate as sqlite_migrate

    conn = sqlite3.connect(path, isolation_level=None)
    everything = sqlite_migrate.load_migrations()
    names = [m.name for m in everything]
    for m in everything[: names.index(migration)]:
        for statement in sqlite_migrate.split_statements(m.sql):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {m.number}")
    for row in _old_rows():
        conn.execute(_INSERT_OLD_KEYED, (ids.row_key(row[0]), *row))
    return conn


def test_the_migration_counts_the_rows_already_stored_sqlite(tmp_path: Path) -> None:
    from jobledger._storage.sqlite import migrate as sqlite_migrate

    path = str(tmp_path / "old.db")
    conn = _sqlite_file_before(path, "job_counts")
    sqlite_migrate.migrate_connection(conn)
    conn.close()
    _assert_exact(path)


def test_the_migration_counts_the_rows_already_stored_postgres(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    from jobledger._storage.postgres import migrate as pg_migrate
    from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres
    from tests.conftest import postgres_url

    require_postgres()
    schema = new_schema_name()
    everything = pg_migrate.load_migrations()
    older = everything[: [m.name for m in everything].index("job_counts")]
    try:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            with monkeypatch.context() as patch:
                patch.setattr(pg_migrate, "load_migrations", lambda: tuple(older))
                assert pg_migrate.migrate(conn, schema) == older[-1].number
            conn.execute(f'SET search_path TO "{schema}"')
            for row in _old_rows():
                conn.execute(_INSERT_OLD.replace("?", "%s"), row)
            assert pg_migrate.migrate(conn, schema) == everything[-1].number
        _assert_exact(postgres_url(schema))
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_the_open_counts_migration_recounts_what_the_old_triggers_kept_postgres(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Migration 14 on a schema whose counts migration 12's triggers kept, in two
    sessions' slots, with rows pending, running and ended: still exact after it."""
    import psycopg

    from jobledger._storage.postgres import migrate as pg_migrate
    from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres
    from tests.conftest import postgres_url

    require_postgres()
    schema = new_schema_name()
    everything = pg_migrate.load_migrations()
    older = everything[: [m.name for m in everything].index("open_counts")]
    try:
        with psycopg.connect(PG_DSN, autocommit=True) as conn, monkeypatch.context() as patch:
            patch.setattr(pg_migrate, "load_migrations", lambda: tuple(older))
            assert pg_migrate.migrate(conn, schema) == older[-1].number
        for half in (0, 1):  # two sessions: two slots of every key
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{schema}"')
                for row in _old_rows()[half::2]:
                    conn.execute(_INSERT_OLD.replace("?", "%s"), row)
                conn.execute(
                    "UPDATE jobs SET status = 'running', started_at = 5000 + attempt "
                    "WHERE status = 'pending' AND queue = %s",
                    (f"q{half}",),
                )
        url = postgres_url(schema)
        before, _ = _expected(url)
        assert {k[1] for k in before} >= {"pending", "running"}
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            assert pg_migrate.migrate(conn, schema) == everything[-1].number
        _assert_exact(url)
        assert not db_rows(url, "SELECT 1 FROM job_counts WHERE status IN ('pending', 'running')")
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_claim_writes_no_counter_rows_and_the_counts_show_it_postgres() -> None:
    """PostgreSQL keeps pending and running rows under one key (migration 14): a claim
    over many queues leaves `job_counts` as it was, and the counts read through
    `job_counts_now` move the claimed rows from pending to running all the same."""
    import psycopg

    from jobledger._storage.interface import SpreadRequest
    from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres
    from tests.conftest import postgres_url

    require_postgres()
    schema = new_schema_name()
    url = postgres_url(schema)
    store = open_store(url)
    jobs = jl.JobManager(url)
    try:
        for i in range(12):
            jobs.enqueue_many(OK, [i, i], queue=f"c.{i}")
        table = (
            "SELECT queue, status, rb, lb, slot, jobs, started FROM job_counts ORDER BY 1, 2, 3, 4"
        )
        kept = db_rows(url, table)
        asked = tuple((f"c.{i}", 5) for i in range(12))
        result = store.claim_spread(
            SpreadRequest(asked, 100, 12, "w-1", (OK.name,)), int(time.time() * 1000)
        )
        assert len(result.jobs) == 12
        assert db_rows(url, table) == kept
        assert _statuses_now(url) == Counter({"pending": 12, "running": 12})
        _assert_exact(url)
    finally:
        arun(jobs.stop)
        store.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_the_open_counts_migration_recounts_what_the_old_triggers_kept_sqlite(
    tmp_path: Path,
) -> None:
    """Migration 18 on a file whose counts migration 16's triggers kept, with rows
    pending, running and ended: still exact after it, and no counter row left under a
    pending or running key."""
    from jobledger._storage.sqlite import migrate as sqlite_migrate

    path = str(tmp_path / "old.db")
    conn = _sqlite_file_before(path, "open_counts")
    conn.execute(
        "UPDATE jobs SET status = 'running', started_at = 5000 + attempt "
        "WHERE status = 'pending' AND queue = 'q0'"
    )
    kept = {str(r[0]) for r in conn.execute("SELECT DISTINCT status FROM job_counts")}
    assert kept >= {"pending", "running"}
    sqlite_migrate.migrate_connection(conn)
    assert not conn.execute(
        "SELECT 1 FROM job_counts WHERE status IN ('pending', 'running')"
    ).fetchall()
    conn.close()
    _assert_exact(path)


def test_a_claim_writes_no_counter_rows_and_the_counts_show_it_sqlite(tmp_path: Path) -> None:
    """SQLite keeps pending and running rows under one key too (migration 18): a claim
    over many queues, and a claim from one, leave `job_counts` as it was, and the counts
    read through `job_counts_now` move the claimed rows from pending to running."""
    from jobledger._storage.interface import SpreadRequest

    path = str(tmp_path / "claims.db")
    store = open_store(path)
    jobs = jl.JobManager(path)
    try:
        for i in range(12):
            jobs.enqueue_many(OK, [i, i], queue=f"c.{i}")
        jobs.enqueue_many(OK, [1, 2, 3], queue="one")
        table = "SELECT queue, status, rb, lb, jobs, started FROM job_counts ORDER BY 1, 2, 3, 4"
        kept = db_rows(path, table)
        now = int(time.time() * 1000)
        asked = tuple((f"c.{i}", 5) for i in range(12))
        result = store.claim_spread(SpreadRequest(asked, 100, 12, "w-1", (OK.name,)), now)
        assert len(result.jobs) == 12
        one = store.claim(
            "one", queue_cap=5, global_cap=100, limit=2, now_ms=now, worker_id="w-1",
            types=(OK.name,),
        )  # fmt: skip
        assert len(one.jobs) == 2
        assert db_rows(path, table) == kept
        assert _statuses_now(path) == Counter({"pending": 13, "running": 14})
        assert jobs.count(status="running") == 14
        assert jobs.count(status="pending") == 13
        _assert_exact(path)
    finally:
        arun(jobs.stop)
        store.close()


def test_a_finalize_counts_the_ends_it_writes_itself_and_leaves_moved_rows_to_the_trigger(
    tmp_path: Path,
) -> None:
    """SQLite migration 18: a batched finalize counts the rows it ends from the claim's
    shape (their `tally` moves to 1 or 2, never to what it was) and the count trigger
    the others (a row moved by hand while it ran keeps `tally` 0). Exact either way,
    also for a row ended twice (set running again by hand in between)."""
    from jobledger._storage.interface import ClaimedJob, Outcome

    path = str(tmp_path / "ends.db")
    store = open_store(path)
    jobs = jl.JobManager(path)
    try:
        jobs.enqueue_many(OK, [1, 2, 3], queue="a")
        jobs.enqueue_many(OK, [4, 5], queue="b")
        now = int(time.time() * 1000)
        claimed = [
            job
            for queue in ("a", "b")
            for job in store.claim(
                queue, queue_cap=5, global_cap=100, limit=5, now_ms=now, worker_id="w-1",
                types=(OK.name,),
            ).jobs
        ]  # fmt: skip
        assert len(claimed) == 5
        moved = claimed[0].id
        db_rows(path, "UPDATE jobs SET queue = 'moved' WHERE id = ?", (moved,))

        def end(ending: list[ClaimedJob], kinds: list[str], at: int) -> None:
            outcomes = [
                Outcome(
                    job.id, "w-1", job.attempt, kind,  # type: ignore[arg-type]
                    output="1" if kind == "completed" else None,
                    error=None if kind == "completed" else '{"code": "X"}',
                    want_row=False, claimed=job,
                )
                for job, kind in zip(ending, kinds, strict=True)
            ]  # fmt: skip
            assert all(r is not None for r in store.finalize(outcomes, at))

        end(claimed, ["completed", "completed", "failed", "cancelled", "completed"], now + 7)
        tally = {str(i): int(t) for i, t in db_rows(path, "SELECT id, tally FROM jobs")}
        assert tally[moved] == 0
        assert {tally[job.id] for job in claimed[1:]} == {1}
        _assert_exact(path)
        # Ended again: running again by hand (the trigger counts that), then finalized.
        db_rows(
            path,
            "UPDATE jobs SET status = 'running', finished_at = NULL, worker_id = 'w-1' "
            "WHERE queue <> 'moved'",
        )
        _assert_exact(path)
        end(claimed[1:], ["completed"] * 4, now + 60_000 * 3)
        tally = {str(i): int(t) for i, t in db_rows(path, "SELECT id, tally FROM jobs")}
        assert {tally[job.id] for job in claimed[1:]} == {2}
        _assert_exact(path)
    finally:
        arun(jobs.stop)
        store.close()


def test_a_finalize_counts_every_run_and_latency_bucket_as_the_trigger_does(
    tmp_path: Path,
) -> None:
    """`sqlite/counts.py` works out the buckets in Python (`bisect` over KEPT_BOUNDS_MS)
    where the trigger has its CASE chains: ends with run and latency times on both sides
    of every bound, negative ones included, ended in pairs through the batched finalize,
    are counted exactly as the rows say."""
    from jobledger._storage.interface import Outcome

    path = str(tmp_path / "buckets.db")
    store = open_store(path)
    jobs = jl.JobManager(path)
    try:
        edges = sorted({v for b in KEPT_BOUNDS_MS for v in (b, b + 1)} | {-3, 0, 4_000_000})
        rng = random.Random(7)
        times = [(run, rng.choice(edges)) for run in edges] + [
            (rng.choice(edges), latency) for latency in edges
        ]
        jobs.enqueue_many(OK, list(range(len(times) + len(times) % 2)), queue="b")
        claimed = store.claim(
            "b", queue_cap=1000, global_cap=1000, limit=1000, now_ms=int(time.time() * 1000),
            worker_id="w-1", types=(OK.name,),
        ).jobs  # fmt: skip
        base = 1_800_000_000_000
        kinds = ("completed", "failed", "cancelled")
        for i in range(0, len(claimed), 2):
            at = base + i * 60_000  # each pair in a minute of its own
            pair: list[Outcome] = []
            for j, job in enumerate(claimed[i : i + 2]):
                run, latency = times[(i + j) % len(times)]
                started, kind = at - run, kinds[(i + j) % 3]
                db_rows(
                    path,
                    "UPDATE jobs SET started_at = ?, scheduled_at = ? WHERE id = ?",
                    (started, started - latency, job.id),
                )
                pair.append(
                    Outcome(
                        job.id, "w-1", 0, kind,  # type: ignore[arg-type]
                        output="1" if kind == "completed" else None,
                        error=None if kind == "completed" else '{"code": "X"}',
                        want_row=False, claimed=replace(job, scheduled_at=started - latency),
                    )
                )  # fmt: skip
            assert all(r is not None for r in store.finalize(pair, at))
        counted = db_rows(path, "SELECT count(*) FROM jobs WHERE tally IN (1, 2)")
        assert counted == [(len(claimed),)]
        _assert_exact(path)
    finally:
        arun(jobs.stop)
        store.close()


def test_kept_counts_follow_any_write_even_one_by_hand(db: str) -> None:
    """Every column the counts read changed at random, row by row and in bulk, on
    rows in every status (terminal rows moved too, which only a hand-made write does)."""
    jobs = jl.JobManager(db)
    for queue in ("h.a", "h.b"):
        jobs.enqueue_many(OK, list(range(150)), queue=queue)
    arun(jobs.stop)
    statuses = ("pending", "delayed", "running", "completed", "failed", "cancelled", "waiting")
    bounds = [*KEPT_BOUNDS_MS, *(b + 1 for b in KEPT_BOUNDS_MS), -7, 0, 10**8]
    rnd = random.Random(2512)
    for _ in range(2):
        # One autocommit connection for the 300 single-row writes (a fresh one per
        # write costs a server process each on PostgreSQL); each still commits alone.
        with db_reader(db) as write:
            for (job_id,) in write("SELECT id FROM jobs"):
                started = None if rnd.random() < 0.2 else 1_764_590_000_000 + rnd.choice(bounds)
                finished = (
                    None
                    if started is None or rnd.random() < 0.2
                    else started + abs(rnd.choice(bounds))
                )
                write(
                    "UPDATE jobs SET status = ?, queue = ?, attempt = ?, scheduled_at = ?, "
                    "started_at = ?, finished_at = ? WHERE id = ?",
                    (
                        rnd.choice(statuses),
                        rnd.choice(("h.a", "h.b", "h.c")),
                        rnd.choice((0, 1, 4)),
                        1_764_590_000_000,
                        started,
                        finished,
                        job_id,
                    ),
                )
        _assert_exact(db)
    db_rows(db, "UPDATE jobs SET finished_at = finished_at + 60000 WHERE status = 'completed'")
    db_rows(db, "UPDATE jobs SET status = 'failed' WHERE queue = 'h.a' AND status = 'completed'")
    db_rows(db, "DELETE FROM jobs WHERE queue = 'h.c' AND status <> 'completed'")
    expected, _ = _expected(db)
    assert _kept(db)[0] == expected  # a delete takes rows off, never minutes


def test_an_observer_reads_a_file_from_before_the_kept_counts_by_its_rows(
    tmp_path: Path,
) -> None:
    import sqlite3

    from jobledger._storage.sqlite import migrate as sqlite_migrate

    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path, isolation_level=None)
    everything = sqlite_migrate.load_migrations()
    before = everything[: [m.name for m in everything].index("job_counts")]
    for m in before:
        for statement in sqlite_migrate.split_statements(m.sql):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {m.number}")
    rows = _old_rows()
    for row in rows:
        conn.execute(_INSERT_OLD_KEYED, (ids.row_key(row[0]), *row))
    conn.close()
    clock = FakeClock(datetime.fromtimestamp(10_000, UTC))  # after every finished_at
    with ReadModel(path, clock=clock) as rm:  # observers never migrate
        assert rm.schema_version() == before[-1].number
        counts = {q.name: q.counts for q in rm.queue_stats()}
        assert sum(counts["q0"].values()) == sum(r[3] == "q0" for r in rows)
        assert rm.metrics().jobs[("q1", "failed")] == sum(
            r[3] == "q1" and r[2] == "failed" for r in rows
        )
        assert rm.count_jobs(JobQuery(status=("completed",))) == sum(
            r[2] == "completed" for r in rows
        )
        ended = sum(r[2] in ("completed", "failed") for r in rows)
        assert sum(c + f for _, c, f in rm.throughput(1440).items) == ended
