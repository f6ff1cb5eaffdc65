"""The observers' operations (`Store`'s read-only section) and the read-only store, on
both backends: what `open_store(..., read_only=True)` reads, that it refuses every
write (its own entry points and the connections under them), that it never creates a
file or a schema, and that GC's collected totals only ever grow."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, Store
from jobledger._storage.observe import STATUSES, ReadOnlyStoreError
from jobledger._storage.open import open_store
from jobledger.errors import JobError, SchemaError, StorageError
from tests.conformance import Backend, ConformantStore, claim, new_job, outcome
from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres

BOUNDS = (10, 1_000)


def url_of(backend: Backend) -> str:
    """What a user passes to the CLI for this backend's database."""
    if backend.name == "sqlite":
        return backend.store.path
    return f"{PG_DSN}?schema={backend.store.schema}"  # type: ignore[attr-defined]


def _finish(store: ConformantStore, ids: list[str], now: int, kind: Any = "completed") -> None:
    taken = claim(store, limit=len(ids), now=now)
    assert sorted(c.id for c in taken.jobs) == sorted(ids)
    assert all(r is not None for r in store.finalize([outcome(i, kind) for i in ids], now + 5))


@pytest.fixture
def observer(backend: Backend) -> Any:
    ro = open_store(url_of(backend), read_only=True)
    yield ro
    ro.close()


def test_queue_counts_name_registered_queues_and_count_by_status(
    backend: Backend, observer: Store
) -> None:
    store = backend.store
    done, waiting, later = new_job(queue="q"), new_job(queue="q"), new_job(queue="q")
    store.enqueue([done, waiting, later, new_job(queue="other", scheduled_at=700)])
    _finish(store, [done.id, waiting.id, later.id], 10_000)
    store.enqueue([new_job(queue="q", scheduled_at=900), new_job(queue="q", scheduled_at=800)])
    counts = {qc.name: qc for qc in observer.queue_counts()}
    assert sorted(counts) == ["other", "q"]
    q = counts["q"]
    assert q.type == "t.a"
    assert dict(zip(STATUSES, q.counts, strict=True)) == {
        "pending": 2, "delayed": 0, "running": 0, "completed": 3, "failed": 0, "cancelled": 0,
        "waiting": 0,
    }  # fmt: skip
    assert q.oldest_pending_at == 800
    assert counts["other"].oldest_pending_at == 700


def test_workers_leader_and_schedules_are_read_as_stored(backend: Backend, observer: Store) -> None:
    backend.execute(
        "INSERT INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at, "
        "stopped_at) VALUES ('w9', 'h', 42, '[\"t.a=retry\"]', 100, 200, NULL)"
    )
    backend.execute("INSERT INTO leader (id, worker_id, term, expires_at) VALUES (1, 'w9', 7, 999)")
    backend.execute(
        "INSERT INTO job_schedules (id, type, name, trigger, payload, catch_up, enabled, "
        "next_run, fire_count, metadata, created_at, updated_at) VALUES "
        "('s1', 't.a', 'n', '{\"kind\":\"interval\",\"seconds\":5}', '{}', '\"skip\"', 0, "
        "NULL, 3, '{}', 10, 20)"
    )
    (w,) = observer.worker_records()
    assert (w.id, w.hostname, w.pid, w.handlers, w.started_at, w.heartbeat_at, w.stopped_at) == (
        "w9", "h", 42, '["t.a=retry"]', 100, 200, None,
    )  # fmt: skip
    lease = observer.leader_lease()
    assert lease is not None
    assert (lease.worker_id, lease.term, lease.expires_at) == ("w9", 7, 999)
    (s,) = observer.schedule_records()
    assert (s.id, s.type, s.name, s.enabled, s.fire_count, s.created_at) == (
        "s1", "t.a", "n", 0, 3, 10,
    )  # fmt: skip
    assert observer.schema_version() == store_version(backend)


def store_version(backend: Backend) -> int:
    if backend.name == "sqlite":
        from jobledger._storage.sqlite.migrate import SCHEMA_VERSION
    else:
        from jobledger._storage.postgres.migrate import SCHEMA_VERSION
    return SCHEMA_VERSION


def test_gc_keeps_what_the_collected_rows_counted(backend: Backend, observer: Store) -> None:
    store = backend.store
    jobs = [new_job(queue="q") for _ in range(4)]
    store.enqueue(jobs)
    _finish(store, [j.id for j in jobs[:3]], 10_000)
    _finish(store, [jobs[3].id], 20_000, kind="failed")
    before = observer.job_metrics(BOUNDS)
    assert before.totals == []
    assert sum(g.rows for g in before.groups if g.status == "completed") == 3
    assert observer.count_finished_before(15_000) == 3

    assert store.gc(15_000, batch=2) == 3  # two batches: the trigger adds each one
    after = observer.job_metrics(BOUNDS)
    assert [(t.queue, t.status, t.rows, t.started, t.retried) for t in after.totals] == [
        ("q", "completed", 3, 3, 0)
    ]
    assert [g.status for g in after.groups] == ["failed"]
    assert observer.count_finished_before(15_000) == 0
    assert store.gc(30_000) == 1
    totals = {(t.queue, t.status): t.rows for t in observer.job_metrics(BOUNDS).totals}
    assert totals == {("q", "completed"): 3, ("q", "failed"): 1}


def test_has_job_of_type_sees_rows_in_any_state(backend: Backend, observer: Store) -> None:
    store = backend.store
    assert observer.has_job_of_type("t.a") is False
    done, waiting = new_job(type="t.a"), new_job(type="t.b", status="delayed")
    store.enqueue([done, waiting])
    _finish(store, [done.id], 10_000)
    assert observer.has_job_of_type("t.a") is True  # completed
    assert observer.has_job_of_type("t.b") is True  # delayed
    assert observer.has_job_of_type("t.c") is False
    assert observer.has_job_of_type("t.%") is False  # an exact match, not a pattern


def test_a_waiting_row_deleted_is_not_counted_as_collected(backend: Backend) -> None:
    job = new_job()
    backend.store.enqueue([job])
    backend.execute("DELETE FROM jobs WHERE id = ?", (job.id,))
    assert backend.store.job_metrics(BOUNDS).totals == []


def test_the_read_only_store_reads_jobs_and_refuses_writes(
    backend: Backend, observer: Store
) -> None:
    job = new_job()
    backend.store.enqueue([job])
    row = observer.get(job.id)
    assert row is not None
    assert row[L.C_STATUS] == "pending"
    assert [r[L.C_ID] for r in observer.list(JobFilter(), limit=10, offset=0)] == [job.id]
    assert observer.count(JobFilter(status=("pending",))) == 1

    with pytest.raises(ReadOnlyStoreError):
        observer.enqueue([new_job()])
    with pytest.raises(ReadOnlyStoreError):
        observer.gc(10**15)
    with pytest.raises(ReadOnlyStoreError):
        observer.write(lambda c: c.execute("SELECT 1"), "test")
    with pytest.raises(ReadOnlyStoreError), observer.user_transaction():
        pass
    # The connections themselves refuse, whatever path a write takes.
    table = "jobs" if backend.name == "sqlite" else f'"{backend.raw.schema}".jobs'
    raw_observer: Any = observer  # the concrete read-only store: its own connection
    with pytest.raises(StorageError):
        raw_observer.read(lambda c: c.execute(f"DELETE FROM {table}"))
    assert backend.store.count(JobFilter()) == 1


def test_read_only_opens_never_create_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(JobError) as info:
        open_store(str(missing), read_only=True)
    assert info.value.code == "DB_NOT_FOUND"
    assert "no jobledger database at" in info.value.message
    assert sorted(os.listdir(tmp_path)) == []
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(SchemaError):
        open_store(str(empty), read_only=True)
    assert sorted(os.listdir(tmp_path)) == ["empty.db"]
    assert empty.stat().st_size == 0
    with pytest.raises(JobError) as memory:
        open_store(":memory:", read_only=True)
    assert memory.value.code == "DB_NOT_FOUND"


@pytest.mark.postgres
def test_read_only_opens_never_create_a_schema() -> None:
    require_postgres()
    import psycopg

    schema = new_schema_name()
    with pytest.raises(SchemaError) as info:
        open_store(f"{PG_DSN}?schema={schema}", read_only=True)
    assert repr(schema) in info.value.message
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        assert found.fetchone() is None
