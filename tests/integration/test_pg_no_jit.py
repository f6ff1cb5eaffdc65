"""PostgreSQL sessions of jobledger run without JIT compilation (`postgres/store._NO_JIT`).

The spread claim over one deep queue has planner estimates (thousands of rows a queue,
times the asked queues) whose total cost passes the server's default `jit_above_cost`,
so the server compiled the statement on every claim: 40-55 ms for a claim that runs in
about 2 ms, and a process whose own limit binds below its queue's cap claimed at that
pace. Here the spread claim, over a queue of 20,000 rows with current statistics, is
explained with `jit_above_cost` at 0 (since the claim takes turns of several rows its
estimate over this queue stays below the default, but any statement's may pass it) on a
plain connection (the JIT is there, so the case is real on this server) and on the
store's writer (it is not); every other kind of session the store opens (readers, the
read-only store's readers) has JIT off.
"""

from __future__ import annotations

import json
import time
from typing import Any

from jobledger._storage.postgres.readonly import ReadOnlyPostgresStore
from jobledger._storage.postgres.store import PostgresStore
from tests.conformance.conftest import PG_DSN

ROWS = 20_000


def _fill_one_queue(store: PostgresStore) -> None:
    import psycopg

    s = f'"{store.schema}"'
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {s}.jobs (id, type, status, queue, payload, scheduled_at, "
            "created_at, updated_at) SELECT 'j' || lpad(g::text, 6, '0'), 'deep', "
            "'pending', 'deep', '{}', 1, 1, 1 FROM generate_series(1, %s) g",
            (ROWS,),
        )
        conn.execute(f"ANALYZE {s}.jobs")


def _spread_params() -> dict[str, Any]:
    return {
        "names": ["deep"],
        "caps": [50],
        "excluded": [],
        "now": int(time.time() * 1000),
        "types": ["deep"],
        "gcap": 50,
        "limit": 25,
        "worker": "w",
        "turn": 1,
    }


def _plan(conn: Any, store: PostgresStore) -> dict[str, Any]:
    """The spread claim explained, with every plan's cost above `jit_above_cost`."""
    sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + store.q.CLAIM_SPREAD
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL jit_above_cost = 0")
        row = conn.execute(sql, _spread_params()).fetchone()
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    assert plan[0]["Plan"]["Actual Rows"] == 25  # a row for each row claimed
    return dict(plan[0])


def test_the_spread_claim_over_a_deep_queue_is_not_compiled(pg_store: PostgresStore) -> None:
    import psycopg

    _fill_one_queue(pg_store)
    with psycopg.connect(PG_DSN, autocommit=True) as plain:
        found = plain.execute(
            "SELECT pg_jit_available(), current_setting('jit_above_cost')::float"
        ).fetchone()
        assert found is not None
        available, _ = found
        if available:
            # The server compiles a statement that costs this much: what the store avoids.
            assert "JIT" in _plan(plain, pg_store)
    with pg_store.lock:
        planned = _plan(pg_store._writer(), pg_store)
    assert "JIT" not in planned
    assert planned["Execution Time"] > 0


def test_every_session_of_the_store_runs_without_jit(pg_store: PostgresStore) -> None:
    with pg_store.lock:
        assert pg_store._writer().execute("SHOW jit").fetchone() == ("off",)
    with pg_store._readers().connection() as conn:
        assert conn.execute("SHOW jit").fetchone() == ("off",)
    observer = ReadOnlyPostgresStore(PG_DSN, schema=pg_store.schema)
    try:
        with observer._readers().connection() as conn:
            assert conn.execute("SHOW jit").fetchone() == ("off",)
            assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
    finally:
        observer.close()
