"""retry_job / retry_matching: a terminal row re-run as a new row, the old one untouched."""

from __future__ import annotations

import json

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, RetryFilter
from jobledger._storage.rows import snapshot_from_row
from jobledger.errors import StorageError
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome

NOW = 20_000


def _ended(store: ConformantStore, kind: str = "failed", **job: object) -> str:
    """A job that ran and ended `kind` (completed / failed / cancelled)."""
    queue = str(job.get("queue", "q"))
    row = store.enqueue([new_job(**job)])[0]  # type: ignore[arg-type]
    job_id = str(row[L.C_ID])
    taken = claim(store, queue, types=(str(row[L.C_TYPE]),))
    assert [j.id for j in taken.jobs] == [job_id]
    store.finalize([outcome(job_id, kind, error='{"x":1}', output='"out"')], 11_000)  # type: ignore[arg-type]
    assert col(store.get(job_id), L.C_STATUS) == kind
    return job_id


@pytest.mark.parametrize("kind", ["completed", "failed", "cancelled"])
def test_a_terminal_row_is_re_run_as_a_new_pending_row(store: ConformantStore, kind: str) -> None:
    parent = store.enqueue([new_job(queue="parents")])[0][L.C_ID]
    old_id = _ended(
        store,
        kind,
        type="t.a",
        queue="q",
        priority=4,
        key="once",
        parent=parent,
        payload={"n": 1},
        metadata={"tenant": "a"},
        max_attempts=5,
        timeout_ms=2_500,
    )
    before = store.get(old_id)

    status, new = store.retry_job(old_id, None, enqueued_by="retrier", now_ms=NOW)

    assert status == kind
    assert new is not None
    assert store.get(new[L.C_ID]) == new
    assert new[L.C_ID] != old_id
    assert store.get(old_id) == before  # terminal rows stay terminal, untouched
    s = snapshot_from_row(new)
    assert (s.type, s.queue, s.priority, s.payload, s.metadata) == (
        "t.a", "q", 4, {"n": 1}, {"tenant": "a"},
    )  # fmt: skip
    assert (s.max_attempts, s.timeout, s.parent_id, s.retry_of) == (5, 2.5, parent, old_id)
    assert (s.status, s.attempt, s.idempotency_key, s.schedule_id) == ("pending", 0, None, None)
    assert (s.output, s.error, s.worker_id, s.started_at, s.finished_at) == (None,) * 5
    assert new[L.C_ENQUEUED_BY] == "retrier"
    assert new[L.C_SCHEDULED_AT] == new[L.C_CREATED_AT] == new[L.C_UPDATED_AT] == NOW
    assert col(store.get(old_id), L.C_RETRY_OF) is None
    # The re-run is ordinary work: claimable at once, in its queue.
    assert [j.id for j in claim(store, "q", worker="w2", now=NOW).jobs] == [new[L.C_ID]]


def test_a_given_payload_replaces_the_old_one(store: ConformantStore) -> None:
    old_id = _ended(store, payload={"n": 1})
    _, new = store.retry_job(old_id, '{"n":2}', enqueued_by="r", now_ms=NOW)
    assert json.loads(col(new, L.C_PAYLOAD)) == {"n": 2}
    assert json.loads(col(store.get(old_id), L.C_PAYLOAD)) == {"n": 1}


def test_a_live_or_unknown_row_is_not_re_run_and_nothing_is_written(
    store: ConformantStore,
) -> None:
    pending = store.enqueue([new_job()])[0][L.C_ID]
    delayed = store.enqueue([new_job(status="delayed", scheduled_at=90_000)])[0][L.C_ID]
    running = store.enqueue([new_job(queue="r")])[0][L.C_ID]
    claim(store, "r")
    for job_id, status in ((pending, "pending"), (delayed, "delayed"), (running, "running")):
        assert store.retry_job(job_id, None, enqueued_by="r", now_ms=NOW) == (status, None)
    assert store.retry_job("no-such-job", None, enqueued_by="r", now_ms=NOW) == (None, None)
    assert store.count(JobFilter()) == 3


def test_the_old_key_stays_free_for_a_new_enqueue(store: ConformantStore) -> None:
    old_id = _ended(store, key="k")
    _, new = store.retry_job(old_id, None, enqueued_by="r", now_ms=NOW)
    fresh = store.enqueue([new_job(key="k")])[0]
    assert fresh[L.C_ID] not in (old_id, col(new, L.C_ID))


def test_retry_matching_filters_by_status_queue_and_type_oldest_first(
    store: ConformantStore,
) -> None:
    failed_a1 = _ended(store, "failed", queue="a", created_at=2_001)
    failed_b = _ended(store, "failed", queue="b", created_at=2_002)
    failed_a2 = _ended(store, "failed", queue="a", created_at=2_003)
    failed_other_type = _ended(store, "failed", queue="a", type="t.z", created_at=2_004)
    cancelled_a = _ended(store, "cancelled", queue="a", created_at=2_005)
    completed_a = _ended(store, "completed", queue="a", created_at=2_006)
    store.enqueue([new_job(queue="a")])  # live: never matched

    rows = store.retry_matching(
        RetryFilter(("failed",), queue="a", type="t.a"), 1000, enqueued_by="r", now_ms=NOW
    )
    assert [r[L.C_RETRY_OF] for r in rows] == [failed_a1, failed_a2]
    assert [store.get(r[L.C_ID]) for r in rows] == rows
    assert all(r[L.C_STATUS] == "pending" and r[L.C_QUEUE] == "a" for r in rows)

    by_status = store.retry_matching(
        RetryFilter(("cancelled", "completed")), 1000, enqueued_by="r", now_ms=NOW
    )
    assert [r[L.C_RETRY_OF] for r in by_status] == [cancelled_a, completed_a]
    every_failed = store.retry_matching(RetryFilter(), 1000, enqueued_by="r", now_ms=NOW)
    assert [r[L.C_RETRY_OF] for r in every_failed] == [failed_b, failed_other_type]


def test_retry_matching_skips_re_run_rows_so_a_limit_goes_on_where_it_stopped(
    store: ConformantStore,
) -> None:
    failed = [_ended(store, created_at=3_000 + i) for i in range(5)]
    single = store.retry_job(failed[1], None, enqueued_by="r", now_ms=NOW)[1]
    first = store.retry_matching(RetryFilter(), 2, enqueued_by="r", now_ms=NOW)
    assert [r[L.C_RETRY_OF] for r in first] == [failed[0], failed[2]]
    rest = store.retry_matching(RetryFilter(), 1000, enqueued_by="r", now_ms=NOW + 1)
    assert [r[L.C_RETRY_OF] for r in rest] == [failed[3], failed[4]]
    assert store.retry_matching(RetryFilter(), 1000, enqueued_by="r", now_ms=NOW + 2) == []
    # A re-run that failed in its turn is a failed row no row re-runs yet.
    assert single is not None
    claim(store, now=NOW + 3)
    store.finalize([outcome(single[L.C_ID], "failed")], NOW + 4)
    again = store.retry_matching(RetryFilter(), 1000, enqueued_by="r", now_ms=NOW + 5)
    assert [r[L.C_RETRY_OF] for r in again] == [single[L.C_ID]]


def _refuse_insert_of_retry_of(backend: Backend, job_id: str) -> None:
    """Test-only: make the INSERT of the re-run of `job_id` fail inside the database."""
    if backend.name == "sqlite":
        backend.execute(
            "CREATE TRIGGER refuse_retry BEFORE INSERT ON jobs "
            f"WHEN new.retry_of = '{job_id}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        return
    backend.execute(
        "CREATE FUNCTION refuse_retry() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.retry_of = '{job_id}' THEN RAISE EXCEPTION 'refused'; END IF; "
        "RETURN NEW; END $$"
    )
    backend.execute(
        "CREATE TRIGGER refuse_retry BEFORE INSERT ON jobs FOR EACH ROW "
        "EXECUTE FUNCTION refuse_retry()"
    )


def _allow_inserts(backend: Backend) -> None:
    if backend.name == "sqlite":
        backend.execute("DROP TRIGGER refuse_retry")
    else:
        backend.execute("DROP TRIGGER refuse_retry ON jobs")


def test_retry_matching_is_one_transaction(backend: Backend) -> None:
    store = backend.store
    failed = [_ended(store, created_at=4_000 + i) for i in range(3)]
    before = store.count(JobFilter())
    # The last insert fails: the first two, already inserted, are rolled back with it.
    _refuse_insert_of_retry_of(backend, failed[2])
    with pytest.raises(StorageError):
        store.retry_matching(RetryFilter(), 1000, enqueued_by="r", now_ms=NOW)
    assert store.count(JobFilter()) == before
    _allow_inserts(backend)

    rows = store.retry_matching(RetryFilter(), 1000, enqueued_by="r", now_ms=NOW)
    assert [r[L.C_RETRY_OF] for r in rows] == failed
    assert store.count(JobFilter()) == before + 3


def test_retry_filter_takes_terminal_statuses_only() -> None:
    for bad in ((), ("pending",), ("failed", "running")):
        with pytest.raises(ValueError, match="terminal statuses"):
            RetryFilter(bad)
