"""What only the PostgreSQL backend has: schemas and migrations, advisory locks under
contention, the LISTEN and poll paths of data_version, error mapping."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter
from jobledger._storage.postgres.migrate import SCHEMA_VERSION
from jobledger.errors import (
    DatabaseBusy,
    JobNotFound,
    SchemaError,
    StorageError,
    WriteTransactionFailed,
)
from tests.conformance import claim, new_job
from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres, schema_factory

if TYPE_CHECKING:
    from jobledger._storage.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh, not yet migrated schema name (these tests watch the migration run)."""
    require_postgres()
    name = new_schema_name()
    try:
        yield name
    finally:
        schema_factory().give_back(name)


@pytest.fixture
def stores(schema: str) -> Iterator[list[PostgresStore]]:
    """Open stores here; all are closed at teardown."""
    opened: list[PostgresStore] = []
    yield opened
    for s in opened:
        s.close()


def _open(stores: list[PostgresStore], schema: str, **options: Any) -> Any:
    from jobledger._storage.postgres.store import PostgresStore

    store = PostgresStore(PG_DSN, schema=schema, **options)
    stores.append(store)
    return store


def _admin() -> Any:
    import psycopg

    return psycopg.connect(PG_DSN, autocommit=True)


def test_migrations_are_recorded_and_idempotent(schema: str, stores: list[PostgresStore]) -> None:
    from jobledger._storage.postgres.migrate import SCHEMA_VERSION, load_migrations, migrate

    _open(stores, schema)
    with _admin() as conn:
        rows = conn.execute(
            f'SELECT version, name FROM "{schema}".schema_migrations ORDER BY version'
        ).fetchall()
        assert rows == [(m.number, m.name) for m in load_migrations()]
        assert rows[:4] == [(1, "initial"), (2, "job_totals"), (3, "attempts"), (4, "retry_of")]
        assert migrate(conn, schema) == SCHEMA_VERSION
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        }
    assert {"jobs", "job_schedules", "queues", "workers", "locks", "leader"} <= tables


def test_concurrent_first_opens_migrate_once(schema: str, stores: list[PostgresStore]) -> None:
    from jobledger._storage.postgres.store import PostgresStore

    start = threading.Barrier(3)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def open_one() -> None:
        try:
            start.wait(timeout=10)
            s = PostgresStore(PG_DSN, schema=schema)
            with lock:
                stores.append(s)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with _admin() as conn:
        # Each migration once, however many processes raced to apply it.
        found = conn.execute(f'SELECT count(*) FROM "{schema}".schema_migrations').fetchone()
        assert found == (SCHEMA_VERSION,)


def test_a_schema_from_a_newer_library_is_refused(schema: str, stores: list[PostgresStore]) -> None:
    _open(stores, schema)
    with _admin() as conn:
        conn.execute(
            f"INSERT INTO \"{schema}\".schema_migrations (version, name) VALUES (999, 'future')"
        )
    with pytest.raises(SchemaError) as info:
        _open(stores, schema)
    assert info.value.params["version"] == 999


def test_bad_schema_names_are_refused() -> None:
    from jobledger._storage.postgres.store import PostgresStore

    for bad in ("Upper", "has-dash", "x" * 51, "", '"; DROP'):
        with pytest.raises(ValueError, match="schema"):
            PostgresStore(PG_DSN, schema=bad)


def test_an_unreachable_server_is_a_storage_error() -> None:
    from jobledger._storage.postgres.store import PostgresStore

    with pytest.raises(StorageError):
        PostgresStore("postgresql://postgres@127.0.0.1:1/test", connect_timeout=1)


def test_schemas_are_isolated_from_each_other(schema: str, stores: list[PostgresStore]) -> None:
    other_schema = f"{schema}_b"
    try:
        a = _open(stores, schema)
        b = _open(stores, other_schema)
        b_version = b.data_version()
        a.enqueue([new_job(key="same"), new_job(queue="only-a")])
        assert b.enqueue([new_job(key="same")])[0][L.C_ID] not in {
            r[L.C_ID] for r in a.list(JobFilter(), limit=10, offset=0)
        }
        assert b.count(JobFilter()) == 1
        assert [n for _, n, _ in b.queues_since(0)] == ["q"]
        time.sleep(0.05)
        assert b.data_version() == b_version  # a's NOTIFY went to a's channel only
    finally:
        for s in stores:
            s.close()
        stores.clear()
        schema_factory().give_back(other_schema)


def _enqueue_together(writers: list[Any], key: str) -> list[str]:
    start = threading.Barrier(len(writers))
    ids: list[str] = []
    errors: list[BaseException] = []

    def go(s: Any) -> None:
        try:
            start.wait(timeout=10)
            ids.append(s.enqueue([new_job(key=key)])[0][L.C_ID])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(s,)) for s in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return ids


def test_concurrent_enqueues_of_one_key_make_one_row(
    schema: str, stores: list[PostgresStore]
) -> None:
    writers = [_open(stores, schema) for _ in range(4)]
    for round_ in range(3):
        ids = _enqueue_together(writers, f"k{round_}")
        assert len(ids) == len(writers)
        assert len(set(ids)) == 1
    assert writers[0].count(JobFilter()) == 3


def test_a_held_queue_lock_makes_claim_busy_within_busy_timeout(
    schema: str, stores: list[PostgresStore]
) -> None:
    store = _open(stores, schema, busy_timeout=0.2)
    store.enqueue([new_job()])
    with _admin() as conn:
        conn.execute(
            "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (store.q.queue_claim_key("q"),)
        )
        started = time.monotonic()
        with pytest.raises(DatabaseBusy) as info:
            claim(store)
        assert time.monotonic() - started < 5
        assert info.value.params["sqlstate"] == "55P03"
    # Released with the session: the claim goes through, nothing was left half-done.
    assert len(claim(store).jobs) == 1


def test_errors_in_a_user_transaction_roll_it_back(
    schema: str, stores: list[PostgresStore]
) -> None:
    store = _open(stores, schema)
    job = new_job()

    def failing_unit_of_work() -> None:
        with store.user_transaction() as conn:
            store.enqueue([job], conn=conn)
            conn.execute("SELECT 1/0")

    with pytest.raises(StorageError):
        failing_unit_of_work()
    assert store.get(job.id) is None
    # JobNotFound leaves the caller's transaction usable, as on SQLite.
    kept = new_job()
    with store.user_transaction() as conn:
        with pytest.raises(JobNotFound):
            store.enqueue([new_job(parent="missing")], conn=conn)
        store.enqueue([kept], conn=conn)
    assert store.get(kept.id) is not None


def test_the_poll_fallback_sees_a_write_only_once_it_committed(
    schema: str, stores: list[PostgresStore]
) -> None:
    poller = _open(stores, schema, listen=False)
    writer = _open(stores, schema)
    v0 = poller.data_version()
    assert poller.data_version() == v0
    job = new_job()
    with writer.user_transaction() as conn:
        writer.enqueue([job], conn=conn)
        # In flight: reported as a change on every look, so the committed rows are
        # never missed by a look that came too early.
        v1 = poller.data_version()
        v2 = poller.data_version()
        assert v0 != v1 != v2
        assert poller.get(job.id) is None
    v3 = poller.data_version()
    assert v3 != v2
    assert poller.get(job.id) is not None
    assert poller.data_version() == v3


def test_own_commits_do_not_count_as_changes_when_listening(
    schema: str, stores: list[PostgresStore]
) -> None:
    store = _open(stores, schema)
    other = _open(stores, schema)
    version = store.data_version()
    store.enqueue([new_job()])
    time.sleep(0.05)
    assert store.data_version() == version
    other.enqueue([new_job()])
    deadline = time.monotonic() + 10
    while store.data_version() == version:
        assert time.monotonic() < deadline, "no notification from the other store"
        time.sleep(0.01)


def test_a_lost_listener_counts_as_a_change_and_reconnects(
    schema: str, stores: list[PostgresStore]
) -> None:
    store = _open(stores, schema)
    version = store.data_version()
    with _admin() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'jobledger-listener' AND pid <> pg_backend_pid() "
            "AND query LIKE %s",
            (f"%{store.q.channel}%",),
        )
    deadline = time.monotonic() + 10
    while store.data_version() == version:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    other = _open(stores, schema)
    version = store.data_version()
    other.enqueue([new_job()])
    while store.data_version() == version:
        assert time.monotonic() < deadline, "the listener did not come back"
        time.sleep(0.01)


def _raise(conn: Any, sqlstate: str) -> None:
    conn.execute(f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}'; END $$")


def test_deadlocks_and_serialization_failures_are_retried_whole(
    schema: str, stores: list[PostgresStore]
) -> None:
    store = _open(stores, schema)
    calls: list[int] = []

    def flaky(conn: Any) -> str:
        calls.append(1)
        store.enqueue([new_job(key="once")], conn=conn)
        if len(calls) == 1:
            _raise(conn, "40P01")
        return "done"

    assert store.write(flaky, "flaky") == "done"
    assert len(calls) == 2
    assert store.count(JobFilter()) == 1  # the first attempt was rolled back

    def always(conn: Any) -> None:
        _raise(conn, "40001")

    with pytest.raises(DatabaseBusy) as info:
        store.write(always, "always")
    assert info.value.params["attempts"] == 3


@pytest.mark.parametrize(
    ("sqlstate", "error", "code"),
    [
        ("53100", "DatabaseFull", "DB_FULL"),
        ("55P03", "DatabaseBusy", "DB_BUSY"),
        ("23505", "WriteTransactionFailed", "DB_WRITE_TX_FAILED"),
    ],
)
def test_server_errors_map_onto_the_storage_error_tree(
    schema: str, stores: list[PostgresStore], sqlstate: str, error: str, code: str
) -> None:
    store = _open(stores, schema)
    with pytest.raises(StorageError) as info:
        store.write(lambda c: _raise(c, sqlstate), "injected")
    assert type(info.value).__name__ == error
    assert info.value.code == code
    assert info.value.params["sqlstate"] == sqlstate
    assert info.value.params["label"] == "injected"
    store.enqueue([new_job()])  # the writer is usable afterwards


def test_a_connection_lost_mid_transaction_fails_and_the_next_call_reconnects(
    schema: str, stores: list[PostgresStore]
) -> None:
    store = _open(stores, schema)
    job = new_job()

    def killed(conn: Any) -> None:
        store.enqueue([job], conn=conn)
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    # The outcome of a commit on a lost connection is unknown: never retried, never busy.
    with pytest.raises(WriteTransactionFailed) as info:
        store.write(killed, "killed")
    assert info.value.params["transaction_status"] == "UNKNOWN"
    assert store.get(job.id) is None
    again = new_job()
    store.enqueue([again])
    assert store.get(again.id) is not None


def test_reads_on_pooled_connections_the_server_ended_are_read_again(
    schema: str, stores: list[PostgresStore]
) -> None:
    """Idle pooled readers the server ended (`pg_terminate_backend`) fail at their first
    use; a read takes a live connection instead of raising, once, and a read that fails
    on a live connection still raises."""
    store = _open(stores, schema)
    job = new_job()
    store.enqueue([job])
    pids = {store.read(lambda c: c.info.backend_pid)}
    # A second idle reader in the pool: both are ended.
    with store._readers().connection() as a, store._readers().connection() as b:
        pids |= {a.info.backend_pid, b.info.backend_pid}
    with _admin() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (list(pids),)
        )
        deadline = time.monotonic() + 10
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)
        ).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    row = store.get(job.id)
    assert row is not None
    assert row[0] == job.id
    assert store.read(lambda c: c.info.backend_pid) not in pids
    with pytest.raises(WriteTransactionFailed):
        store.read(lambda c: c.execute("SELECT * FROM no_such_table"))


def test_a_read_behind_an_access_exclusive_lock_is_busy_within_the_reader_timeout(
    schema: str, stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACCESS EXCLUSIVE (an ALTER TABLE, a VACUUM FULL) blocks even reads: a reader waits
    `READER_LOCK_TIMEOUT` (0.3 s here, 5 s by default), then DB_BUSY, instead of holding
    its caller (a worker's event loop) for as long as the lock lasts."""
    import jobledger._storage.postgres.store as pg_store

    monkeypatch.setattr(pg_store, "READER_LOCK_TIMEOUT", 0.3)
    store = _open(stores, schema)
    job = new_job()
    store.enqueue([job])
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            store.get(job.id)
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    # On a thread, so that a read that waits for the lock forever fails the test, not hangs it.
    reader = threading.Thread(target=read, daemon=True)
    with _admin() as conn, conn.transaction():
        conn.execute(f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE')
        started = time.monotonic()
        reader.start()
        reader.join(10)
        waited = time.monotonic() - started
        assert not reader.is_alive(), "the read waited for the lock past 10 s"
    [error] = outcome
    assert isinstance(error, DatabaseBusy)
    assert error.params["sqlstate"] == "55P03"  # lock_not_available
    assert 0.25 <= waited < 5.0
    row = store.get(job.id)  # the lock gone, the same pooled reader reads again
    assert row is not None


def test_a_prepared_statement_the_server_lost_does_not_wedge_the_writer(
    schema: str, stores: list[PostgresStore]
) -> None:
    """psycopg prepares a statement after a few uses and keeps the names it prepared. A
    pipeline that aborted between a PREPARE and its use (a claim at its lock timeout;
    `make test` met it once) left a name the server never had, and every later claim
    failed on it: the job it was to run never ran. Here the server's statements are
    dropped one by one (a DEALLOCATE of each; psycopg forgets its cache only on
    DEALLOCATE ALL), the same state. The next write works, on a new writer connection;
    a user's transaction that meets it fails, and the one after works."""
    store = _open(stores, schema)

    def forget_prepared() -> int:
        for _ in range(8):  # past psycopg's prepare threshold (5)
            store.enqueue([new_job()])
        with store.lock:  # the writer, between transactions
            conn = store.conn
            names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")]
            for name in names:
                conn.execute(f'DEALLOCATE "{name}"')
        assert names
        return int(conn.info.backend_pid)

    pid = forget_prepared()
    job = new_job()
    store.enqueue([job])  # replayed once on a new connection
    assert store.get(job.id) is not None
    assert store.conn.info.backend_pid != pid

    forget_prepared()
    with pytest.raises(WriteTransactionFailed), store.user_transaction() as conn:
        conn.execute("SELECT 1")  # its closing note_change() meets a forgotten name
    with store.user_transaction() as conn:
        conn.execute("SELECT 1")


def test_without_the_global_lock_the_queue_cap_stays_exact(
    schema: str, stores: list[PostgresStore]
) -> None:
    first = _open(stores, schema, exact_global_cap=False)
    first.enqueue([new_job() for _ in range(10)])
    claimers = [first, *(_open(stores, schema, exact_global_cap=False) for _ in range(3))]
    start = threading.Barrier(len(claimers))
    got: list[int] = []

    def go(s: Any) -> None:
        start.wait(timeout=10)
        got.append(len(claim(s, queue_cap=2, global_cap=100).jobs))

    threads = [threading.Thread(target=go, args=(s,)) for s in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(got) == [0, 0, 0, 2]


def test_schedule_operations_stay_in_the_stores_schema(
    schema: str, stores: list[PostgresStore]
) -> None:
    """The shared schedule operations run the dialect's schema-qualified statements: the
    same id in two schemas is two rows, and an update names only schedule columns."""
    from jobledger._storage.records import ScheduleRow

    other_schema = f"{schema}_b"
    try:
        a = _open(stores, schema)
        b = _open(stores, other_schema)
        row = ScheduleRow("s", "t.a", "", "{}", "{}", "{}", 1, None, None, 0, "{}", 1, 1)
        a.insert_schedule(row)
        b.insert_schedule(row)
        a.update_schedule("s", {"name": "renamed", "enabled": 0, "updated_at": 2})
        assert a.get_schedule("s") == row._replace(name="renamed", enabled=0, updated_at=2)
        assert b.get_schedule("s") == row
        a.set_schedule_next_run("s", 1_000, 3)
        assert b.get_schedule("s") == row
        assert a.delete_schedule("s", 2) is True
        assert b.list_schedules() == [row]
        for bad in ({"name; DROP TABLE x": 1}, {}):
            with pytest.raises(ValueError, match="schedule columns"):
                b.update_schedule("s", bad)
        assert b.get_schedule("s") == row
        with _admin() as conn:
            assert conn.execute(
                f'SELECT id, name FROM "{other_schema}".job_schedules'
            ).fetchall() == [("s", "")]
    finally:
        for s in stores:
            s.close()
        stores.clear()
        schema_factory().give_back(other_schema)


def test_synchronous_commit_is_set_on_the_writer(schema: str, stores: list[PostgresStore]) -> None:
    relaxed = _open(stores, schema, synchronous_commit="off")
    default = _open(stores, schema)

    def show(conn: Any) -> str:
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])

    assert relaxed.write(show, "show") == "off"
    with _admin() as conn:
        server = str(conn.execute("SHOW synchronous_commit").fetchone()[0])
    assert default.write(show, "show") == server
    with pytest.raises(ValueError, match="synchronous_commit"):
        _open(stores, schema, synchronous_commit="sometimes")


def test_an_observer_reads_a_schema_from_before_retry_of_as_it_is(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobledger._storage.postgres import migrate as pg_migrate
    from jobledger._storage.postgres.readonly import ReadOnlyPostgresStore

    before = [m for m in pg_migrate.load_migrations() if m.name != "retry_of"]
    older = before[: [m.name for m in before].index("job_totals") + 1]
    with _admin() as conn:
        with monkeypatch.context() as patch:
            patch.setattr(pg_migrate, "load_migrations", lambda: tuple(older))
            assert pg_migrate.migrate(conn, schema) == older[-1].number
        job = new_job()
        conn.execute(
            f'INSERT INTO "{schema}".jobs (id, type, status, queue, payload, scheduled_at, '
            "created_at, updated_at) VALUES (%s, 't.a', 'failed', 'q', '{}', 1, 1, 1)",
            (job.id,),
        )
    observer = ReadOnlyPostgresStore(PG_DSN, schema=schema)
    try:
        row = observer.get(job.id)
        assert row is not None
        assert (row[L.C_STATUS], row[L.C_RETRY_OF]) == ("failed", None)
        assert [r[L.C_ID] for r in observer.list(JobFilter(), limit=10, offset=0)] == [job.id]
        assert observer.schema_version() == older[-1].number  # observers never migrate
        assert observer.attempts(job.id) == []  # no job_attempts table in that schema
    finally:
        observer.close()
