"""Flow control across worker processes (DESIGN.md §8.7), on both backends: a rate limit
holds over two processes' starts together, an operator's limit and pause reach running
workers, and a pause outlives a worker's death and a new worker's start."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

import jobledger as jl
from tests.conftest import db_rows
from tests.recovery import Child, arun, read_markers, spawn, status_counts, wait_for
from tests.recovery.worker_proc import RATED


def _max_in_window(ms: list[int], per_ms: int) -> int:
    ms = sorted(ms)
    best, lo = 0, 0
    for hi, t in enumerate(ms):
        while ms[lo] <= t - per_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _row_starts(db: str) -> dict[str, list[int]]:
    """The rows' start times (the claim's clock, ms) by key (`n % 3` of the payload)."""
    out: dict[str, list[int]] = defaultdict(list)
    for payload, started in db_rows(db, "SELECT payload, started_at FROM jobs"):
        out[str(int(payload) % 3)].append(int(started))
    return out


def _handler_starts(children: list[Child]) -> dict[str, list[int]]:
    """The handlers' own start times (ms, `time.time()` in each process) by key."""
    out: dict[str, list[int]] = defaultdict(list)
    for child in children:
        for _, _, _, extra in read_markers(child.markers):
            key, at = extra.split(":")
            out[key].append(round(float(at) * 1000))
    return out


# The handlers' clocks read their start a little after the claim's: their windows are
# checked this much shorter than the period (the rows' start times are checked exactly).
LAG_MS = 50


def _stop(children: list[Child]) -> None:
    for child in children:
        if child.proc.poll() is None:
            child.kill9()


def _drain(db: str, n: int) -> None:
    wait_for(
        lambda: status_counts(db).get("completed", 0) == n,
        what=f"the {n} jobs to complete",
        timeout=60.0,
    )


def test_a_rate_limit_holds_over_two_processes(db: str, tmp_path: Path) -> None:
    children = [spawn(db, "rated", tmp_path, f"w{i}", "--rate", "4/300ms") for i in range(2)]
    producer = jl.JobManager(db)
    try:
        for child in children:
            child.wait_started()
        producer.enqueue_many(RATED, list(range(24)))
        _drain(db, 24)
        starts = [s for times in _row_starts(db).values() for s in times]
        assert len(starts) == 24
        assert _max_in_window(starts, 300) <= 4
        handlers = [s for times in _handler_starts(children).values() for s in times]
        assert _max_in_window(handlers, 300 - LAG_MS) <= 4
        ran = [len(read_markers(child.markers)) for child in children]
        assert sum(ran) == 24, ran
        for child in children:
            assert child.terminate() == 0, child.output()
    finally:
        arun(producer.stop)
        _stop(children)


# (limit, per ms, jobs per key). 2 per 300 ms: every claim reads the keys' windows. 30
# per 500 ms with 20 slots a process: a claim the queue's own window has room for takes
# the head unread, and the other process's next claim must count those starts
# (`_storage/rate.py`: `record_total`, `fold`).
@pytest.mark.parametrize(("limit", "per_ms", "per_key"), [(2, 300, 6), (30, 500, 60)])
def test_a_keyed_limit_holds_per_key_over_two_processes(
    db: str, tmp_path: Path, limit: int, per_ms: int, per_key: int
) -> None:
    args = ("--rate", f"{limit}/{per_ms}ms", "--keyed")
    children = [spawn(db, "rated", tmp_path, f"w{i}", *args) for i in range(2)]
    # The producer computes the keys: it registers the same handler (never started).
    producer = jl.JobManager(db)
    rule = jl.RateLimit(limit, per_ms / 1000, key=lambda n: str(n % 3))

    @producer.handler(RATED, recovery="retry", rate_limit=rule)
    async def rated(ctx: jl.JobContext[int]) -> None:
        return None

    try:
        for child in children:
            child.wait_started()
        producer.enqueue_many(RATED, list(range(3 * per_key)))
        _drain(db, 3 * per_key)
        by_key = _row_starts(db)
        assert sorted(by_key) == ["0", "1", "2"]
        for key, starts in by_key.items():
            assert len(starts) == per_key, key
            assert _max_in_window(starts, per_ms) <= limit, (key, sorted(starts))
        everything = [s for starts in by_key.values() for s in starts]
        assert _max_in_window(everything, per_ms) > limit  # the keys are independent
        for key, starts in _handler_starts(children).items():
            assert _max_in_window(starts, per_ms - LAG_MS) <= limit, (key, sorted(starts))
    finally:
        arun(producer.stop)
        _stop(children)


def test_an_operators_limit_and_pause_reach_running_workers_and_outlive_them(
    db: str, tmp_path: Path
) -> None:
    operator = jl.JobManager(db)
    children = [spawn(db, "rated", tmp_path, f"w{i}") for i in range(2)]  # no handler limit
    try:
        for child in children:
            child.wait_started()
        operator.pause_queue(RATED.name)
        operator.set_queue_limits(RATED.name, rate_limit="3/300ms")
        operator.enqueue_many(RATED, list(range(12)))
        time.sleep(0.5)
        assert status_counts(db) == {"pending": 12}
        # A worker dies and a new one starts: the pause is in the table, not in them.
        children[0].kill9()
        children.append(spawn(db, "rated", tmp_path, "w2"))
        children[-1].wait_started()
        time.sleep(0.3)
        assert status_counts(db) == {"pending": 12}
        operator.resume_queue(RATED.name)
        _drain(db, 12)
        starts = [s for times in _row_starts(db).values() for s in times]
        assert _max_in_window(starts, 300) <= 3
    finally:
        arun(operator.stop)
        _stop(children)
