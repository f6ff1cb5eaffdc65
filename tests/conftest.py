"""Fixtures and helpers shared by the whole suite (kept small; other packages import it).

No pytest-asyncio: an async test is a sync test function that calls `run(main())`, which
is `asyncio.run` with a hard timeout, so a hung engine fails the test instead of the run.
Waiting is done on conditions (`wait_until`), never on fixed sleeps.

One suite, two backends: the `db` fixture is parametrized over ["sqlite", "postgres"]
and yields what `JobManager(...)` takes (a file path, or a `postgresql://` URL of a fresh
schema); `db_rows`/`db_one` (one query) and `db_reader` (one connection, many queries)
read either straight from the table, and `sql_for` turns a test's `?` placeholders into
the backend's. `db_path` stays for the SQLite-only tests
that look at the file itself (PRAGMAs, lock files, backups, sqlite3 connections).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

__all__ = [
    "BACKENDS",
    "RUN_TIMEOUT",
    "db_one",
    "db_reader",
    "db_rows",
    "is_postgres",
    "postgres_url",
    "run",
    "sql_for",
    "wait_until",
]

T = TypeVar("T")

# The Django project's tests need Django set up, once per process: they run only in
# the subprocesses of tests/contrib/test_django.py, which set DJANGO_SETTINGS_MODULE.
collect_ignore = [] if os.environ.get("DJANGO_SETTINGS_MODULE") else ["django_project"]

RUN_TIMEOUT = 30.0


def run(coro: Coroutine[Any, Any, T], timeout: float = RUN_TIMEOUT) -> T:
    """`asyncio.run(coro)`, failing with TimeoutError after `timeout` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float = 10.0,
    step: float = 0.005,
    what: str = "a condition",
) -> None:
    """Poll `predicate` every `step` seconds (real time) until it is truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """A fresh SQLite file path (the file itself is created by whoever opens it)."""
    return str(tmp_path / "jobs.db")


# -- one suite, two backends ----------------------------------------------------------


def is_postgres(db: str) -> bool:
    """Whether `db` (what the `db` fixture yields) names a PostgreSQL schema."""
    return db.startswith(("postgresql://", "postgres://"))


def sql_for(db: str, sql: str) -> str:
    """`sql` written with SQLite's `?` placeholders, in the dialect of `db`'s backend.

    User SQL inside `jobs.write_tx()` goes through the backend's driver as it is, so on
    PostgreSQL it needs psycopg's `%s`.
    """
    return sql.replace("?", "%s") if is_postgres(db) else sql


Rows = list[tuple[Any, ...]]


@contextmanager
def db_reader(db: str) -> Iterator[Callable[..., Rows]]:
    """`run(sql, params=())` on one autocommit connection of our own (for tests that
    sample the table often: a PostgreSQL connection is a server process)."""
    if is_postgres(db):
        import psycopg

        from jobledger._storage.open import split_schema

        # The URL's `options` put the test's schema first on the search path, so the
        # unqualified names of the SQLite tests resolve to it.
        with psycopg.connect(split_schema(db)[0], autocommit=True) as pg:

            def run_pg(sql: str, params: tuple[Any, ...] = ()) -> Rows:
                cur = pg.execute(sql_for(db, sql), params or None)
                return [tuple(r) for r in cur.fetchall()] if cur.description else []

            yield run_pg
        return
    # Autocommit, so a test's UPDATE lands as another process's write would.
    with closing(sqlite3.connect(db, timeout=5.0, isolation_level=None)) as conn:

        def run_sqlite(sql: str, params: tuple[Any, ...] = ()) -> Rows:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]

        yield run_sqlite


def db_rows(db: str, sql: str, params: tuple[Any, ...] = ()) -> Rows:
    """Rows of `sql` (with `?` placeholders), run on a fresh autocommit connection of our
    own, so tests look at (or write, as another process would) the table itself, the
    single source of truth, not at an engine."""
    with db_reader(db) as run_sql:
        return run_sql(sql, params)


def db_one(db: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """First column of the first row of `sql`, or None."""
    rows = db_rows(db, sql, params)
    return rows[0][0] if rows else None


def postgres_url(schema: str) -> str:
    """The `JobManager` URL of `schema` on the test server.

    `schema=` picks jobledger's schema; `options=-csearch_path=...` makes it the search
    path too, so tables a test creates inside `write_tx()` live (and die) with it.
    """
    from tests.conformance.conftest import PG_DSN

    parts = urlsplit(PG_DSN)
    query = parse_qsl(parts.query, keep_blank_values=True)
    query += [("schema", schema), ("options", f"-csearch_path={schema}")]
    return urlunsplit(parts._replace(query=urlencode(query)))


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def db(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A fresh database for one test, on each backend: a SQLite file path, or the URL of
    a fresh migrated PostgreSQL schema (dropped after the test).

    An unreachable server skips the postgres case, except under CI (`CI=true`), where it
    fails (the rule of `tests/conformance/conftest.py`, whose schema factory this reuses).
    Every `PostgresStore` the test opened in this process is closed at teardown, so a
    manager a test never stopped cannot leak connections into later tests (psycopg warns
    when one is garbage-collected open, and warnings are errors here).
    """
    if request.param == "sqlite":
        yield str(tmp_path / "jobs.db")
        return
    from jobledger._storage.postgres.store import PostgresStore
    from tests.conformance.conftest import require_postgres, schema_factory

    require_postgres()
    opened: list[PostgresStore] = []
    real_init = PostgresStore.__init__

    def tracking_init(self: PostgresStore, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(PostgresStore, "__init__", tracking_init)
    schema = schema_factory().take()
    try:
        yield postgres_url(schema)
    finally:
        for store in opened:
            store.close()
        schema_factory().give_back(schema)


@pytest.fixture(scope="session", autouse=True)
def _close_postgres_schemas() -> Iterator[None]:
    """Drop every test schema still held by the factory when the session ends (the
    conformance conftest does the same only when one of its own tests ran)."""
    yield
    if "tests.conformance.conftest" not in sys.modules:
        return
    from tests.conformance import conftest as pg

    with pg._factory_lock:
        factory, pg._factory = pg._factory, None
    if factory is not None:
        factory.close()
