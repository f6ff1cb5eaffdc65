"""The read model's passes over `jobs` against figures worked out row by row in Python.

`/metrics` and the dashboard's queue table read the counts the write path keeps
(`job_counts`, SQLite migration 16, PostgreSQL 12; on an older file, one grouped pass
over the table: `metrics_scan` and `QUEUE_STATS_SCAN` in `_storage/sqlite/observe.py`,
and their twins in `_storage/postgres/observe.py`); these tests check them, on both
backends, against a plain reading of every row, on rows made to hit each edge: every
status, values on and around the histogram bounds, negative start delays, NULL times,
and a queue without rows. The rows are written by raw UPDATEs, so the kept counts are
the triggers' work.
"""

from __future__ import annotations

import random

import pytest

import jobledger as jl
from jobledger._observe.read_model import HISTOGRAM_BUCKETS, Histogram, ReadModel
from tests.conftest import db_reader, run

STATUSES = ("pending", "delayed", "running", "completed", "failed", "cancelled", "waiting")
T = jl.JobType("scan.t", dict)


def _expected_histogram(values_ms: list[int]) -> Histogram:
    buckets = tuple((b, sum(v <= int(b * 1000) for v in values_ms)) for b in HISTOGRAM_BUCKETS)
    return Histogram(buckets, sum(values_ms) / 1000, len(values_ms))


Row = tuple[str, str, int, int, int | None, int | None]


@pytest.fixture
def varied(db: str) -> tuple[str, list[Row]]:
    """A database of 900 rows in three queues (plus a registered queue without rows),
    with random statuses, attempts and times, on each backend; and its rows as
    (queue, status, attempt, scheduled_at, started_at, finished_at)."""
    jobs = jl.JobManager(db)
    for queue in ("a", "b", "c"):
        jobs.enqueue_many(T, [{}] * 300, queue=queue)
    jobs.enqueue(T, {}, queue="empty")  # registers the queue; its row is deleted below
    bounds = [int(b * 1000) for b in HISTOGRAM_BUCKETS]
    edges = [-50, -1, 0, 1, *bounds, *(b + 1 for b in bounds), 10**9]
    rnd = random.Random(20261130)
    with db_reader(db) as sql:
        sql("DELETE FROM jobs WHERE queue = 'empty'")
        for job_id, enqueued in sql("SELECT id, scheduled_at FROM jobs ORDER BY id"):
            scheduled = enqueued + rnd.randrange(-60_000, 60_000)
            started = None if rnd.random() < 0.15 else scheduled + rnd.choice(edges)
            base = scheduled if started is None else started
            finished = None if rnd.random() < 0.15 else base + abs(rnd.choice(edges))
            sql(
                "UPDATE jobs SET status = ?, scheduled_at = ?, started_at = ?, "
                "finished_at = ?, attempt = ? WHERE id = ?",
                (
                    rnd.choice(STATUSES),
                    scheduled,
                    started,
                    finished,
                    rnd.choice((0, 0, 1, 3)),
                    job_id,
                ),
            )
        rows = sql("SELECT queue, status, attempt, scheduled_at, started_at, finished_at FROM jobs")
    run(jobs.stop())
    return db, [tuple(r) for r in rows]


def test_metrics_match_a_row_by_row_count(varied: tuple[str, list[Row]]) -> None:
    path, rows = varied
    with ReadModel(path) as rm:
        got = rm.metrics()

    queues = sorted({r[0] for r in rows})
    assert set(got.started) == set(queues)
    for queue in queues:
        mine = [r for r in rows if r[0] == queue]
        for status in STATUSES:
            assert got.jobs[(queue, status)] == sum(r[1] == status for r in mine)
        assert got.started[queue] == sum(r[2] + (r[4] is not None) for r in mine)
        assert got.retried[queue] == sum(r[2] for r in mine)
        assert got.completed[queue] == sum(r[1] == "completed" for r in mine)
        assert got.failed[queue] == sum(r[1] == "failed" for r in mine)
        assert got.cancelled[queue] == sum(r[1] == "cancelled" for r in mine)
        run_ms = [
            r[5] - r[4]
            for r in mine
            if r[1] in ("completed", "failed") and r[4] is not None and r[5] is not None
        ]
        latency = [max(0, r[4] - r[3]) for r in mine if r[4] is not None]
        assert got.run_seconds[queue] == _expected_histogram(run_ms)
        assert got.latency_seconds[queue] == _expected_histogram(latency)
    assert all(got.jobs[("empty", status)] == 0 for status in STATUSES)
    assert "empty" not in got.run_seconds
    assert "empty" not in got.latency_seconds


def test_queue_stats_match_a_row_by_row_count(varied: tuple[str, list[Row]]) -> None:
    path, rows = varied
    with ReadModel(path) as rm:
        got = {qs.name: qs for qs in rm.queue_stats()}
    assert sorted(got) == ["a", "b", "c", "empty"]
    assert got["empty"].counts == dict.fromkeys(STATUSES, 0)
    assert got["empty"].oldest_pending_at is None
    for queue in ("a", "b", "c"):
        mine = [r for r in rows if r[0] == queue]
        assert got[queue].type == T.name
        assert got[queue].counts == {s: sum(r[1] == s for r in mine) for s in STATUSES}
        pending = [r[3] for r in mine if r[1] == "pending"]
        assert got[queue].oldest_pending_at == (min(pending) if pending else None)
