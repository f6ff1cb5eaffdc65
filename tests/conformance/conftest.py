"""The `backend` / `store` fixtures, parametrized over ["sqlite", "postgres"].

* sqlite: `SqliteStore` on a fresh file under tmp_path.
* postgres: `PostgresStore` on a fresh random schema in the database named by
  `JOBLEDGER_TEST_PG_DSN` (default: database `test` on 127.0.0.1:5432, user postgres),
  dropped after the test. When the server is unreachable the postgres cases SKIP with the
  reason, except under CI (`CI=true`), where they FAIL: CI must prove both backends.

Creating a schema is DDL (~0.2-0.4 s on a busy 2-core box) and so is dropping it, which
would dominate the suite. `SchemaFactory` therefore migrates fresh schemas on a
background thread a couple of tests ahead, and drops used ones on another; every test
still gets a schema no test has touched, and every schema is dropped before the session
ends. Schema names carry their creation time, so one left behind by a killed run is
dropped by the next run after an hour (never a schema another live run may be using).
"""

from __future__ import annotations

import functools
import os
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import Backend, ConformantStore

PG_DSN = os.environ.get("JOBLEDGER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA_PREFIX = "jl_test_"
STALE_AFTER_S = 3600


@functools.cache
def _pg_unavailable() -> str | None:
    """Why PostgreSQL cannot be used here, or None when it can."""
    try:
        import psycopg
    except ImportError as exc:  # the `postgres` extra is not installed
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_DSN} is unreachable: {str(exc).strip()}"
    return None


def require_postgres() -> None:
    reason = _pg_unavailable()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true needs PostgreSQL for the conformance suite: {reason}")
    pytest.skip(reason)


def new_schema_name() -> str:
    return f"{SCHEMA_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:8]}"


def _drop_schema(schema: str, conn: Any = None) -> None:
    import psycopg

    if conn is not None:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        return
    with psycopg.connect(PG_DSN, autocommit=True) as own:
        own.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class SchemaFactory:
    """Fresh migrated schemas made ahead of need; used ones dropped in the background."""

    def __init__(self, ahead: int = 4, makers: int = 2) -> None:
        self._ready: queue.Queue[str | BaseException] = queue.Queue(maxsize=ahead)
        self._used: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._drop_stale()
        self._makers = [
            threading.Thread(target=self._make, name=f"schema-maker-{i}", daemon=True)
            for i in range(makers)
        ]
        self._dropper = threading.Thread(target=self._drop, name="schema-dropper", daemon=True)
        for maker in self._makers:
            maker.start()
        self._dropper.start()

    @staticmethod
    def _drop_stale() -> None:
        import psycopg

        cutoff = int(time.time()) - STALE_AFTER_S
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                    (SCHEMA_PREFIX,),
                )
            ]
            for name in names:
                stamp = name[len(SCHEMA_PREFIX) :].split("_", 1)[0]
                if stamp.isdigit() and int(stamp) < cutoff:
                    _drop_schema(name, conn)

    def _make(self) -> None:
        import psycopg

        from jobledger._storage.postgres.migrate import migrate

        down_since: float | None = None
        while not self._stop.is_set():
            try:
                with psycopg.connect(PG_DSN, autocommit=True) as conn:
                    while not self._stop.is_set():
                        name = new_schema_name()
                        migrate(conn, name)
                        down_since = None
                        while True:
                            try:
                                self._ready.put(name, timeout=0.05)
                                break
                            except queue.Full:
                                if self._stop.is_set():
                                    self._used.put(name)
                                    return
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                # The server restarted (tests/recovery/test_transient_faults.py does it on
                # purpose): connect again; a half-made schema is dropped as stale later.
                now = time.monotonic()
                down_since = now if down_since is None else down_since
                if now - down_since > 120:
                    self._ready.put(exc)
                    return
                time.sleep(0.1)
            except BaseException as exc:  # handed to the next take()
                self._ready.put(exc)
                return

    def _drop(self) -> None:
        import psycopg

        name: str | None = None
        for _ in range(1200):  # 0.1 s apart: two minutes for a server to come back
            try:
                with psycopg.connect(PG_DSN, autocommit=True) as conn:
                    if name is not None:  # the one a lost connection did not drop
                        _drop_schema(name, conn)
                    while (name := self._used.get()) is not None:
                        _drop_schema(name, conn)
                    return
            except (psycopg.OperationalError, psycopg.InterfaceError):
                time.sleep(0.1)  # a server restart: connect again
            except BaseException as exc:
                self._errors.append(exc)
                return

    def take(self) -> str:
        item = self._ready.get(timeout=60)
        if isinstance(item, BaseException):
            raise RuntimeError(f"could not prepare a PostgreSQL schema: {item!r}") from item
        return item

    def give_back(self, schema: str) -> None:
        self._used.put(schema)

    def close(self) -> None:
        self._stop.set()
        for maker in self._makers:
            maker.join(timeout=60)
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, str):
                self._used.put(item)
        self._used.put(None)
        self._dropper.join(timeout=120)
        if self._errors:
            raise RuntimeError("dropping test schemas failed") from self._errors[0]


_factory: SchemaFactory | None = None
_factory_lock = threading.Lock()


def schema_factory() -> SchemaFactory:
    global _factory
    with _factory_lock:
        if _factory is None:
            _factory = SchemaFactory()
        return _factory


@pytest.fixture(scope="session", autouse=True)
def _close_schema_factory() -> Iterator[None]:
    yield
    global _factory
    with _factory_lock:
        factory, _factory = _factory, None
    if factory is not None:
        factory.close()


def _sqlite_backend(tmp_path: Path) -> Backend:
    from jobledger._storage.sqlite.store import SqliteStore

    path = str(tmp_path / "jobs.db")

    def opener(**options: Any) -> SqliteStore:
        options.pop("listen", None)  # a PostgreSQL-only option
        return SqliteStore(path, **options)

    store = opener()
    return Backend(name="sqlite", store=store, raw=store, opener=opener, placeholder="?")


def _postgres_backend(schema: str) -> Backend:
    from jobledger._storage.postgres.store import PostgresStore

    def opener(**options: Any) -> PostgresStore:
        return PostgresStore(PG_DSN, schema=schema, **options)

    store = opener()
    return Backend(name="postgres", store=store, raw=store, opener=opener, placeholder="%s")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    schema: str | None = None
    if request.param == "postgres":
        require_postgres()
        schema = schema_factory().take()
        made = _postgres_backend(schema)
    else:
        made = _sqlite_backend(tmp_path)
    try:
        yield made
    finally:
        for other in made.opened:
            other.close()
        made.store.close()
        if schema is not None:
            schema_factory().give_back(schema)


@pytest.fixture
def store(backend: Backend) -> ConformantStore:
    return backend.store
