"""Tests of the job engine (DESIGN §2, §4, §5, §7 "Jobs") on real databases: most take
the `db` fixture and run on both backends (a SQLite file, a PostgreSQL schema).

Shared pieces for this package: a payload model and job type, a manager factory with
test-friendly defaults (no quiet window, fast polling), fast retry policies, and
read-only SQL helpers that look at the table directly (the single source of truth)
rather than at what the engine believes.
"""

from __future__ import annotations

from typing import Any

import pydantic

import jobledger as jl
from jobledger._storage.interface import ClaimedJob, ClaimResult
from tests.conftest import db_one, db_rows, sql_for

__all__ = [
    "ITEM",
    "Item",
    "fast_retry",
    "hand_claim",
    "make_manager",
    "recording_manager",
    "sql_one",
    "statuses",
    "transactions",
]


class Item(pydantic.BaseModel):
    n: int = 0


ITEM = jl.JobType("test.item", Item)


def make_manager(db: str, **options: Any) -> jl.JobManager:
    """A manager that starts dispatching at once and notices other writers quickly."""
    options.setdefault("startup_delay", 0)
    options.setdefault("poll_interval", 0.01)
    return jl.JobManager(db, **options)


def recording_manager(
    db: str, job_type: jl.JobType[int], ran: list[int], **options: Any
) -> jl.JobManager:
    """`make_manager` with an async handler of `job_type` (recovery "retry") that appends
    each payload it runs to `ran`."""
    jobs = make_manager(db, **options)

    @jobs.handler(job_type, recovery="retry")
    async def run(ctx: jl.JobContext[int]) -> None:
        ran.append(ctx.payload)

    return jobs


def fast_retry(max_attempts: int = 3) -> jl.RetryPolicy:
    return jl.RetryPolicy(max_attempts=max_attempts, backoff="fixed", base_delay=0.001)


def sql_one(db: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """First column of the first row, read on a fresh connection of our own."""
    return db_one(db, sql, params)


def statuses(db: str) -> dict[str, str]:
    """Every job's status, by id, straight from the table."""
    return {r[0]: r[1] for r in db_rows(db, "SELECT id, status FROM jobs")}


def transactions(statements: list[str]) -> list[list[str]]:
    """The statements of each transaction a SQLite trace callback saw (the writer's
    `set_trace_callback`), BEGIN to COMMIT or ROLLBACK, in order."""
    txs: list[list[str]] = []
    current: list[str] | None = None
    for sql in statements:
        word = sql.split()[0].upper()
        if word == "BEGIN":
            current = []
        elif word in ("COMMIT", "ROLLBACK") and current is not None:
            txs.append(current)
            current = None
        elif current is not None:
            current.append(sql)
    return txs


def hand_claim(
    jobs: jl.JobManager, db: str, job_type: jl.JobType[Any], *, owner: str, age_ms: int = 0
) -> jl.JobHandle[Any]:
    """Write a delayed job (so no claim takes it), mark its row `running` under `owner`
    (attempt 1) and hand the engine a claim of it made `age_ms` ago, as a claim's commit
    would: its task is made and has not taken its first step when this returns."""
    h = jobs.enqueue(job_type, 7, delay=3600)
    engine = jobs._engine
    now = engine.now_ms()
    update = "UPDATE jobs SET status = 'running', worker_id = ?, attempt = 1 WHERE id = ?"
    db_rows(db, sql_for(db, update), (owner, h.id))
    name = job_type.name
    claim = ClaimedJob(h.id, name, name, 0, "7", 1, 3, None, "{}", None, None, now, now - age_ms)
    qu = engine.ensure_queue(name, name)
    assert qu is not None
    engine._take(qu, ClaimResult([claim], False), 10)
    return h
