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
from tests.conftest import db_one, db_rows

__all__ = ["ITEM", "Item", "fast_retry", "make_manager", "sql_one", "statuses", "transactions"]


class Item(pydantic.BaseModel):
    n: int = 0


ITEM = jl.JobType("test.item", Item)


def make_manager(db: str, **options: Any) -> jl.JobManager:
    """A manager that starts dispatching at once and notices other writers quickly."""
    options.setdefault("startup_delay", 0)
    options.setdefault("poll_interval", 0.01)
    return jl.JobManager(db, **options)


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
