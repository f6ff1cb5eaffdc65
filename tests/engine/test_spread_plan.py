"""The SQLite spread claim's first statement (`spread_heads_sql`) reads each queue's head
by one index search, the queues in turn order, and sorts nothing: what keeps a claim over
a thousand queues as cheap as one over a few (docs/benchmarks.md, "Many queues")."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest

import jobledger as jl
from jobledger._storage.sqlite import queries as q

NOOP = jl.JobType("t.noop", dict)


def _fill(path: str, queues: int) -> None:
    jobs = jl.JobManager(path, startup_delay=0)
    try:
        for i in range(queues):
            jobs.enqueue_many(NOOP, [{"i": i}] * 3, queue=f"kb.{i}")
    finally:
        asyncio.run(jobs.stop())


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize("excluded", [0, 2])
def test_the_heads_statement_searches_the_claim_index_once_per_queue_and_sorts_nothing(
    db_path: str, analyzed: bool, excluded: int
) -> None:
    _fill(db_path, 40)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        if analyzed:  # the planner's statistics must not move it off the claim index
            conn.execute("ANALYZE")
        sql = q.spread_heads_sql(1, excluded)
        params: list[Any] = ["w", 2**62, NOOP.name, *(["gone"] * excluded), "[]", 5]
        plan = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        joined = " | ".join(plan)
        assert any(p.startswith("SCAN turn") for p in plan), joined
        assert any("jobs_claim_idx (queue=?" in p for p in plan), joined
        assert not any("TEMP B-TREE" in p for p in plan), joined
        # The queues are the outer loop: the turn scan comes before the head search.
        assert next(i for i, p in enumerate(plan) if p.startswith("SCAN turn")) < next(
            i for i, p in enumerate(plan) if "jobs_claim_idx" in p
        ), joined
    finally:
        conn.close()


def test_the_heads_come_in_turn_order_up_to_the_limit(db_path: str) -> None:
    _fill(db_path, 40)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        turns = [f"kb.{i}" for i in (31, 7, 19, 2, 38, 11)]
        conn.execute("BEGIN IMMEDIATE")
        names = json.dumps(["kb.none", *turns])
        rows = conn.execute(q.spread_heads_sql(1), ["w", 2**62, NOOP.name, names, 4]).fetchall()
        conn.execute("ROLLBACK")
        # The first four queues that have a row, one row each; the dry one costs its turn.
        assert sorted(str(r[3]) for r in rows) == sorted(turns[:4])
    finally:
        conn.close()
