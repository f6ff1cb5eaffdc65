"""The kept counts of a batched finalize, written by the store instead of a row trigger.

Invariant (migrations 16 and 18): at every commit `job_counts` and `job_minutes`
hold, per key, the sum over the rows of `jobs` of what each row contributes (the
formulas of `migrations/0018_open_counts.sql`). The update trigger keeps that for
every write but one: a row that `queries.finish_many_sql` ends from the exact shape a
claim left it in (running under the outcome's fence, `started_at` set, `finished_at`
unset, its queue and `scheduled_at` the claim's), whose `tally` the statement moves to
1 or 2 (from whatever it was: NULL, never written, or the other one). The trigger's
condition is false for such a row, its body does not run, and the statement returns
the row's `started_at`; every other row it ends gets `tally` 0, and the trigger counts
it as before, as it does every other write. `EndCounts` adds what the skipped bodies would
have: per ended row, its `open` key less the row as it ran, its ended key plus the row
as it ended, and its minute, summed per key and written in one statement each, in the
finalize's transaction. A row trigger's body cost about 25,000 instructions a row
(two upserts and the minute's); this costs a few Python operations a row and two
statements a batch (docs/benchmarks.md, twenty-second round).
"""

from __future__ import annotations

import functools
import sqlite3
from bisect import bisect_left

from jobledger._storage.interface import Outcome
from jobledger._storage.observe import KEPT_BOUNDS_MS

__all__ = ["EndCounts"]

# (queue, status, rb, lb) -> [jobs, started, retried, run_ms, latency_ms]
_Sums = list[int]


class EndCounts:
    """What the rows a batched finalize counted itself add to the kept counts."""

    __slots__ = ("_keys", "_minutes")

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str, int, int], _Sums] = {}
        self._minutes: dict[int, list[int]] = {}

    def ended(self, o: Outcome, started_at: int, finished_at: int) -> None:
        """`o` ended its row at `finished_at`, from running since `started_at`."""
        job = o.claimed
        # The statement counts a row here only where the claim's queue and scheduled_at
        # matched the row's.
        assert job is not None
        queue, attempt, scheduled = job.queue, o.attempt, job.scheduled_at
        keys = self._keys
        # As it ran: under 'open', as the pending row it was (migration 18).
        sums = keys.get((queue, "open", -1, -1))
        if sums is None:
            sums = keys[(queue, "open", -1, -1)] = [0, 0, 0, 0, 0]
        sums[0] -= 1
        sums[1] -= attempt
        sums[2] -= attempt
        # As it ended.
        status = o.kind
        ran = status == "completed" or status == "failed"
        run = finished_at - started_at
        latency = started_at - scheduled
        key = (
            queue,
            status,
            bisect_left(KEPT_BOUNDS_MS, run) if ran else -1,
            bisect_left(KEPT_BOUNDS_MS, latency),
        )
        sums = keys.get(key)
        if sums is None:
            sums = keys[key] = [0, 0, 0, 0, 0]
        sums[0] += 1
        sums[1] += attempt + 1
        sums[2] += attempt
        if ran:
            sums[3] += run
            minute = self._minutes.get(finished_at // 60000)
            if minute is None:
                minute = self._minutes[finished_at // 60000] = [0, 0]
            minute[0 if status == "completed" else 1] += 1
        if latency > 0:
            sums[4] += latency

    def write(self, conn: sqlite3.Connection) -> None:
        """Add the sums to `job_counts` and `job_minutes` (in the caller's transaction)."""
        rows = [(*key, *sums) for key, sums in self._keys.items() if any(sums)]
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start : start + _CHUNK]
            conn.execute(_upsert_counts(len(chunk)), [v for row in chunk for v in row])
        minutes = [(m, c, f) for m, (c, f) in self._minutes.items()]
        for start in range(0, len(minutes), _CHUNK):
            chunk_m = minutes[start : start + _CHUNK]
            conn.execute(_upsert_minutes(len(chunk_m)), [v for row in chunk_m for v in row])


# Keys per statement: 9 parameters each, within SQLite's oldest bound-parameter limit (999).
_CHUNK = 100


@functools.cache
def _upsert_counts(n: int) -> str:
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * n)
    return (
        "INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, "
        f"latency_ms) VALUES {values} ON CONFLICT (queue, status, rb, lb) DO UPDATE SET "
        "jobs = jobs + excluded.jobs, started = started + excluded.started, "
        "retried = retried + excluded.retried, run_ms = run_ms + excluded.run_ms, "
        "latency_ms = latency_ms + excluded.latency_ms"
    )


@functools.cache
def _upsert_minutes(n: int) -> str:
    values = ", ".join(["(?, ?, ?)"] * n)
    return (
        f"INSERT INTO job_minutes (minute, completed, failed) VALUES {values} "
        "ON CONFLICT (minute) DO UPDATE SET completed = completed + excluded.completed, "
        "failed = failed + excluded.failed"
    )
