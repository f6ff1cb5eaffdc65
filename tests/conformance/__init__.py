"""One conformance suite for every storage backend (STYLE practice 1; DESIGN §3).

Each test takes the `backend` (or `store`) fixture, parametrized over ["sqlite",
"postgres"], and states a contract of one named storage operation in terms of what a
caller observes: returned rows, and rows read back through the store. The same test body
runs unchanged on both backends; anything backend-specific lives in the fixture.

Every operation under test is called as a `Store` method: the suite sees a backend only
through the protocol the runtime uses. Test-only SQL (setting up a row no operation
writes, or looking at a table no operation reads) goes through `Backend.run`/`rows`/
`execute`, written with `?` placeholders.

Shared here: the `ConformantStore` protocol (what the suite calls), `Backend` (the store,
a way to run test-only SQL on its tables and a way to open a second store instance on
the same database), and factories for jobs and outcomes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from jobledger._core.ids import new_id
from jobledger._storage.interface import (
    ClaimResult,
    JobRow,
    NewJob,
    Outcome,
    OutcomeKind,
    Store,
)

__all__ = [
    "Backend",
    "ConformantStore",
    "claim",
    "col",
    "new_job",
    "outcome",
]

T = TypeVar("T")


# The suite calls exactly what the runtime calls: the runtime's own protocol.
ConformantStore = Store


@dataclass
class Backend:
    """A store under test and what belongs with it on the same backend."""

    name: Literal["sqlite", "postgres"]
    store: ConformantStore
    # The same object as `store`, as its concrete type (SqliteStore / PostgresStore):
    # for test-only plumbing such as the PostgreSQL schema name, never for an operation
    # under test.
    raw: Any
    opener: Callable[..., ConformantStore]
    placeholder: str
    opened: list[ConformantStore] = field(default_factory=list)

    def open_other(self, **options: Any) -> ConformantStore:
        """A second, independent store instance on the same database (closed at teardown)."""
        other = self.opener(**options)
        self.opened.append(other)
        return other

    def sql(self, text: str) -> str:
        """Test-only SQL written with `?` placeholders, in this backend's parameter style."""
        return text.replace("?", self.placeholder)

    def run(self, work: Callable[[Any], T]) -> T:
        """Run test-only SQL against the store's tables (unqualified names) and commit."""
        if self.name == "sqlite":
            return self.store.write(work, "test")
        schema = str(self.raw.schema)

        def scoped(conn: Any) -> T:
            conn.execute(f'SET LOCAL search_path TO "{schema}"')
            return work(conn)

        return self.store.write(scoped, "test")

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        sql = self.sql(text)
        return [tuple(r) for r in self.run(lambda c: c.execute(sql, tuple(params)).fetchall())]

    def execute(self, text: str, params: Sequence[Any] = ()) -> int:
        sql = self.sql(text)
        return int(self.run(lambda c: c.execute(sql, tuple(params)).rowcount))


_ids = itertools.count(1)


def new_job(
    *,
    id: str | None = None,
    type: str = "t.a",
    status: Literal["pending", "delayed"] = "pending",
    queue: str = "q",
    priority: int = 0,
    key: str | None = None,
    parent: str | None = None,
    schedule: str | None = None,
    scheduled_at: int = 1_000,
    created_at: int | None = None,
    enqueued_by: str = "producer",
    payload: Any = None,
    metadata: dict[str, Any] | None = None,
    max_attempts: int = 3,
    timeout_ms: int | None = None,
) -> NewJob:
    """A job row to enqueue, with an id made as the library makes them (in creation
    order, from `created_at`)."""
    n = next(_ids)
    created = 1_000 + n if created_at is None else created_at
    return NewJob(
        id=id or new_id(created),
        type=type,
        status=status,
        queue=queue,
        priority=priority,
        payload=json.dumps({"n": n} if payload is None else payload),
        max_attempts=max_attempts,
        timeout_ms=timeout_ms,
        idempotency_key=key,
        parent_id=parent,
        schedule_id=schedule,
        metadata=json.dumps(metadata or {}, separators=(",", ":")),
        enqueued_by=enqueued_by,
        scheduled_at=scheduled_at,
        created_at=created,
    )


def claim(
    store: ConformantStore,
    queue: str = "q",
    *,
    worker: str = "w1",
    now: int = 10_000,
    queue_cap: int = 100,
    global_cap: int = 1_000,
    limit: int = 100,
    types: tuple[str, ...] = ("t.a",),
) -> ClaimResult:
    return store.claim(
        queue,
        queue_cap=queue_cap,
        global_cap=global_cap,
        limit=limit,
        now_ms=now,
        worker_id=worker,
        types=types,
    )


def outcome(
    job_id: str,
    kind: OutcomeKind = "completed",
    *,
    worker: str = "w1",
    attempt: int = 0,
    **fields: Any,
) -> Outcome:
    return Outcome(job_id=job_id, worker_id=worker, attempt=attempt, kind=kind, **fields)


def col(row: JobRow | None, index: int) -> Any:
    assert row is not None, "expected a row"
    return row[index]
