"""Tests of the job engine (DESIGN §2, §4, §5, §7 "Jobs") on real SQLite files.

Shared pieces for this package: a payload model and job type, a manager factory with
test-friendly defaults (no quiet window, fast polling), fast retry policies, and
read-only SQL helpers that look at the table directly (the single source of truth)
rather than at what the engine believes.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pydantic

import jobledger as jl

__all__ = ["ITEM", "Item", "fast_retry", "make_manager", "sql_one", "statuses"]


class Item(pydantic.BaseModel):
    n: int = 0


ITEM = jl.JobType("test.item", Item)


def make_manager(db_path: str, **options: Any) -> jl.JobManager:
    """A manager that starts dispatching at once and notices other writers quickly."""
    options.setdefault("startup_delay", 0)
    options.setdefault("poll_interval", 0.01)
    return jl.JobManager(db_path, **options)


def fast_retry(max_attempts: int = 3) -> jl.RetryPolicy:
    return jl.RetryPolicy(max_attempts=max_attempts, backoff="fixed", base_delay=0.001)


def sql_one(db_path: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """First column of the first row, read on a fresh connection of our own."""
    with closing(sqlite3.connect(db_path, timeout=5.0)) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def statuses(db_path: str) -> dict[str, str]:
    """Every job's status, by id, straight from the table."""
    with closing(sqlite3.connect(db_path, timeout=5.0)) as conn:
        return {r[0]: r[1] for r in conn.execute("SELECT id, status FROM jobs")}
