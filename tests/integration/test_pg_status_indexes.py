"""PostgreSQL's indexes by status (migration 15): no `(status, created_at)` index that
every claim and finalize adds an entry to; partial indexes for the statuses a listing
looks for among many rows (failed, cancelled, waiting), which the listing's SQL can use
because it names known statuses as literals (`postgres/store._status_in`).

Each case lists through the store and compares with the rows read by hand, newest first,
then asks the planner, with sequential scans off (on a few rows it would rightly scan
the table), whether the index can serve the store's statement.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import jobledger as jl
from jobledger._storage.interface import JobFilter
from jobledger._storage.postgres.store import PostgresStore, _where
from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres
from tests.conftest import db_rows, postgres_url, run

T = jl.JobType("status.idx", int)


@pytest.fixture
def pg() -> Iterator[tuple[jl.JobManager, str]]:
    import psycopg

    require_postgres()
    schema = new_schema_name()
    url = postgres_url(schema)
    jobs = jl.JobManager(url)
    try:
        yield jobs, url
    finally:
        run(jobs.stop())
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _plan(store: PostgresStore, flt: JobFilter) -> str:
    import psycopg

    where, params = _where(flt, store._ident)
    sql = store.q.LIST_JOBS.replace("{where}", where)
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute(f"EXPLAIN {sql}", (*params, 50, 0)).fetchall()
    return "\n".join(str(r[0]) for r in rows)


def test_no_index_keys_every_row_by_status(pg: tuple[jl.JobManager, str]) -> None:
    _, url = pg
    sql = (
        "SELECT indexname FROM pg_indexes "
        "WHERE tablename = 'jobs' AND schemaname = current_schema()"
    )
    names = {str(r[0]) for r in db_rows(url, sql)}
    assert "jobs_status_created_idx" not in names
    assert {"jobs_failed_idx", "jobs_cancelled_idx", "jobs_waiting_idx"} <= names


@pytest.mark.parametrize("status", ["failed", "cancelled", "waiting"])
def test_a_listing_by_a_rare_status_reads_its_partial_index(
    pg: tuple[jl.JobManager, str], status: str
) -> None:
    jobs, url = pg
    handles = jobs.enqueue_many(T, list(range(60)))
    chosen = [h.id for h in handles[::3]]
    for job_id in chosen:
        db_rows(url, "UPDATE jobs SET status = ? WHERE id = ?", (status, job_id))
    store = jobs._store
    assert isinstance(store, PostgresStore)
    flt = JobFilter(status=(status,))
    listed = [row[0] for row in store.list(flt, limit=50, offset=0)]
    expected = [
        str(r[0])
        for r in db_rows(
            url, "SELECT id FROM jobs WHERE status = ? ORDER BY created_at DESC, id DESC", (status,)
        )
    ]
    assert listed == expected
    assert sorted(listed) == sorted(chosen)
    assert f"jobs_{status}_idx" in _plan(store, flt)
    # Two statuses, one of them without an index of its own: still answered right.
    both = JobFilter(status=(status, "pending"))
    assert len(store.list(both, limit=100, offset=0)) == 60
