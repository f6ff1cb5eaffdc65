"""enqueue: rows as stored, idempotency, parents, batches, user transactions, queues."""

from __future__ import annotations

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter
from jobledger.errors import JobNotFound
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome


def test_rows_come_back_in_input_order_as_stored(store: ConformantStore) -> None:
    jobs = [new_job(queue="a"), new_job(queue="b", status="delayed", scheduled_at=5_000)]
    rows = store.enqueue(jobs)
    assert [r[L.C_ID] for r in rows] == [j.id for j in jobs]
    for job, row in zip(jobs, rows, strict=True):
        assert store.get(job.id) == row
        assert row[L.C_STATUS] == job.status
        assert row[L.C_ATTEMPT] == 0
        assert row[L.C_CANCEL] == 0
        assert row[L.C_WORKER] is None
        assert row[L.C_SCHEDULED_AT] == job.scheduled_at
        assert row[L.C_CREATED_AT] == row[L.C_UPDATED_AT] == job.created_at
        assert row[L.C_ENQUEUED_BY] == "producer"
        assert row[L.C_PAYLOAD] == job.payload


@pytest.mark.parametrize("in_user_tx", [False, True])
def test_a_batch_of_plain_and_keyed_entries_keeps_their_order(
    store: ConformantStore, in_user_tx: bool
) -> None:
    # PostgreSQL writes the entries without a key or a parent in one statement and the
    # others one by one: each row still comes back in its entry's place, exactly as
    # stored, and every queue a row went to is registered (in entry order, so with its
    # first entry's type).
    live = store.enqueue([new_job(key="taken", queue="old")])[0]
    parent = store.enqueue([new_job(queue="old")])[0]
    jobs = [
        new_job(queue="n1", type="t.first", payload='{"b": 1,  "a": "é\\n"}'),
        new_job(key="taken", queue="n9"),  # a hit: the live row, nothing inserted
        new_job(queue="n2", status="delayed", scheduled_at=9_000, priority=-3),
        new_job(queue="n1", type="t.second", parent=parent[L.C_ID]),
        new_job(queue="n2", metadata={"k": [1, 2]}, timeout_ms=2**40, max_attempts=1),
        new_job(key="fresh", queue="n3"),
        new_job(queue="n1", enqueued_by="ünïcode"),
    ]
    if in_user_tx:
        with store.user_transaction() as conn:
            rows = store.enqueue(jobs, conn=conn)
    else:
        rows = store.enqueue(jobs)
    assert rows[1] == store.get(live[L.C_ID])
    for i, (job, row) in enumerate(zip(jobs, rows, strict=True)):
        if i == 1:
            continue
        assert row == store.get(job.id)
        assert (row[L.C_ID], row[L.C_QUEUE], row[L.C_TYPE]) == (job.id, job.queue, job.type)
        assert (row[L.C_STATUS], row[L.C_PRIORITY]) == (job.status, job.priority)
        assert (row[L.C_PAYLOAD], row[L.C_METADATA]) == (job.payload, job.metadata)
        assert (row[L.C_TIMEOUT], row[L.C_MAX_ATTEMPTS]) == (job.timeout_ms, job.max_attempts)
        assert (row[L.C_SCHEDULE], row[L.C_ENQUEUED_BY]) == (job.schedule_id, job.enqueued_by)
        assert row[L.C_SCHEDULED_AT] == job.scheduled_at
        assert row[L.C_CREATED_AT] == row[L.C_UPDATED_AT] == job.created_at
    assert col(rows[3], L.C_PARENT) == parent[L.C_ID]
    assert store.count(JobFilter()) == 2 + 6
    queues = [(name, t) for _, name, t in store.queues_since(0)]
    assert queues == [("old", "t.a"), ("n1", "t.first"), ("n2", "t.a"), ("n3", "t.a")]


def test_a_live_key_returns_the_existing_row(store: ConformantStore) -> None:
    first = store.enqueue([new_job(key="k1")])[0]
    again = store.enqueue([new_job(key="k1", type="t.other", queue="elsewhere")])[0]
    assert again == store.get(first[L.C_ID])
    assert store.count(JobFilter()) == 1
    # Still a hit while the row runs (any non-terminal status).
    claim(store)
    hit = store.enqueue([new_job(key="k1")])[0]
    assert hit[L.C_ID] == first[L.C_ID]
    assert hit[L.C_STATUS] == "running"


def test_a_terminal_key_is_free_again(store: ConformantStore) -> None:
    first = store.enqueue([new_job(key="k")])[0]
    claim(store)
    store.finalize([outcome(first[L.C_ID])], 11_000)
    second = store.enqueue([new_job(key="k")])[0]
    assert second[L.C_ID] != first[L.C_ID]
    assert second[L.C_STATUS] == "pending"
    # And the new row is now the live one.
    assert store.enqueue([new_job(key="k")])[0][L.C_ID] == second[L.C_ID]
    assert store.count(JobFilter()) == 2


def test_duplicate_keys_inside_one_batch_share_one_row(store: ConformantStore) -> None:
    a, b, c = new_job(key="dup"), new_job(), new_job(key="dup")
    rows = store.enqueue([a, b, c])
    assert rows[0][L.C_ID] == rows[2][L.C_ID] == a.id
    assert rows[1][L.C_ID] == b.id
    assert store.get(c.id) is None
    assert store.count(JobFilter()) == 2


def test_an_unknown_parent_is_job_not_found_and_writes_nothing(store: ConformantStore) -> None:
    with pytest.raises(JobNotFound) as info:
        store.enqueue([new_job(), new_job(parent="no-such-job")])
    assert info.value.params == {"parent_id": "no-such-job"}
    assert store.count(JobFilter()) == 0
    assert store.queues_since(0) == []


def test_a_parent_is_an_existing_row(store: ConformantStore) -> None:
    # (Through the public API a parent is always a row written earlier: entries of one
    # batch share their options, so a batch never names its own sibling as parent.)
    parent = store.enqueue([new_job()])[0]
    rows = store.enqueue([new_job(parent=parent[L.C_ID]), new_job(parent=parent[L.C_ID])])
    for row in rows:
        assert row[L.C_PARENT] == parent[L.C_ID]
        assert col(store.get(row[L.C_ID]), L.C_PARENT) == parent[L.C_ID]


def test_a_key_hit_wins_over_a_missing_parent(store: ConformantStore) -> None:
    live = store.enqueue([new_job(key="k")])[0]
    assert store.enqueue([new_job(key="k", parent="gone")])[0][L.C_ID] == live[L.C_ID]


def test_keys_are_global_across_types_and_queues(store: ConformantStore) -> None:
    a = store.enqueue([new_job(key="shared", type="t.a", queue="x")])[0]
    b = store.enqueue([new_job(key="shared", type="t.b", queue="y")])[0]
    assert a[L.C_ID] == b[L.C_ID]


def test_enqueue_inside_a_user_transaction_commits_with_it(store: ConformantStore) -> None:
    job = new_job()
    with store.user_transaction() as conn:
        row = store.enqueue([job], conn=conn)[0]
        assert row[L.C_ID] == job.id
    assert store.get(job.id) is not None


def test_enqueue_inside_a_user_transaction_rolls_back_with_it(store: ConformantStore) -> None:
    job = new_job(queue="fresh")

    class Boom(Exception):
        pass

    def failing_unit_of_work() -> None:
        with store.user_transaction() as conn:
            store.enqueue([job], conn=conn)
            raise Boom

    with pytest.raises(Boom):
        failing_unit_of_work()
    assert store.get(job.id) is None
    assert store.queues_since(0) == []
    # The store is usable afterwards.
    assert store.enqueue([new_job()])[0] is not None


def test_user_sql_and_jobs_share_one_commit(backend: Backend) -> None:
    store = backend.store
    job = new_job()
    sql = backend.sql("UPDATE workers SET hostname = ? WHERE id = ?")
    # A statement on the store's own tables stands in for the user's write.
    with store.user_transaction() as conn:
        if backend.name == "postgres":
            conn.execute(f'SET LOCAL search_path TO "{getattr(store, "schema", "")}"')
        conn.execute(sql, ("h", "nobody"))
        store.enqueue([job], conn=conn)
    assert store.get(job.id) is not None


def test_queues_are_registered_once_in_commit_order(backend: Backend) -> None:
    store = backend.store
    store.enqueue([new_job(queue="q1", type="t.one"), new_job(queue="q2", type="t.two")])
    store.enqueue([new_job(queue="q1", type="t.one")])
    seen = store.queues_since(0)
    assert [(name, t) for _, name, t in seen] == [("q1", "t.one"), ("q2", "t.two")]
    assert seen[0][0] < seen[1][0]
    last = seen[-1][0]
    assert store.queues_since(last) == []
    # Another store instance (another process) registers only what is new.
    other = backend.open_other()
    other.enqueue([new_job(queue="q1", type="t.one"), new_job(queue="q3", type="t.three")])
    later = store.queues_since(last)
    assert [(name, t) for _, name, t in later] == [("q3", "t.three")]
    assert later[0][0] > last


def test_an_idempotency_hit_registers_no_queue(store: ConformantStore) -> None:
    store.enqueue([new_job(key="k", queue="home")])
    store.enqueue([new_job(key="k", queue="never-used")])
    assert [name for _, name, _ in store.queues_since(0)] == ["home"]


def test_remembered_queues_still_get_their_jobs(store: ConformantStore) -> None:
    store.enqueue([new_job(queue="q")])
    store.remember_queues(["q"])
    # One entry to a known queue: PostgreSQL writes it in one autocommit statement.
    job = new_job(queue="q", status="delayed", scheduled_at=7_000, priority=2, timeout_ms=9)
    [row] = store.enqueue([job])
    assert row == store.get(job.id)
    assert (row[L.C_ID], row[L.C_QUEUE], row[L.C_STATUS]) == (job.id, "q", "delayed")
    assert (row[L.C_PRIORITY], row[L.C_TIMEOUT], row[L.C_SCHEDULED_AT]) == (2, 9, 7_000)
    assert (row[L.C_PAYLOAD], row[L.C_METADATA]) == (job.payload, job.metadata)
    assert row[L.C_CREATED_AT] == row[L.C_UPDATED_AT] == job.created_at
    assert [name for _, name, _ in store.queues_since(0)] == ["q"]


def test_one_entry_to_a_known_queue_keeps_each_column_it_has_or_lacks(backend: Backend) -> None:
    # One entry, no key, no parent, to a known queue is one statement on both backends;
    # SQLite's (`INSERT_PLAIN`) binds a missing timeout or schedule as a blob that SQL
    # makes NULL: a 0 must stay 0, a value must stay itself, and None must be NULL.
    store = backend.store
    backend.execute(
        "INSERT INTO job_schedules (id, type, name, trigger, payload, catch_up, enabled, "
        "metadata, created_at, updated_at) VALUES ('s-1', 't.a', '', '{}', '{}', '{}', 1, "
        "'{}', 0, 0)"
    )
    store.enqueue([new_job(queue="q")])
    store.remember_queues(["q"])
    cases = [(None, None), (0, None), (2_500, "s-1"), (None, "s-1")]
    for timeout_ms, schedule in cases:
        job = new_job(queue="q", timeout_ms=timeout_ms, schedule=schedule)
        [row] = store.enqueue([job])
        assert row == store.get(job.id)
        assert (row[L.C_TIMEOUT], row[L.C_SCHEDULE]) == (timeout_ms, schedule)
        assert (row[L.C_KEY], row[L.C_PARENT]) == (None, None)
        assert (row[L.C_ENQUEUED_BY], row[L.C_PAYLOAD]) == ("producer", job.payload)
