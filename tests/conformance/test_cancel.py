"""request_cancel, force_cancel, cancel_many, cancel_requested_among."""

from __future__ import annotations

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter
from tests.conformance import ConformantStore, claim, col, new_job, outcome


def test_a_waiting_row_is_cancelled_at_once(store: ConformantStore) -> None:
    pending, delayed = new_job(), new_job(status="delayed", scheduled_at=99_999)
    store.enqueue([pending, delayed])
    for job, status in ((pending, "pending"), (delayed, "delayed")):
        before, worker, row = store.request_cancel(job.id, "no longer needed", '{"c":1}', 7_000)
        assert (before, worker) == (status, None)
        assert row == store.get(job.id)
        assert col(row, L.C_STATUS) == "cancelled"
        assert col(row, L.C_CANCEL) == 1
        assert col(row, L.C_ERROR) == '{"c":1}'
        assert col(row, L.C_FINISHED_AT) == col(row, L.C_UPDATED_AT) == 7_000


def test_a_running_row_is_only_flagged(store: ConformantStore) -> None:
    job = new_job()
    store.enqueue([job])
    claim(store, worker="w7")
    assert store.request_cancel(job.id, "first", "{}", 7_000) == ("running", "w7", None)
    row = store.get(job.id)
    assert col(row, L.C_STATUS) == "running"
    assert col(row, L.C_CANCEL) == 1
    assert store.cancel_requested_among([job.id, "unknown"]) == [(job.id, "first")]
    # The first reason is kept.
    store.request_cancel(job.id, "second", "{}", 7_001)
    assert store.cancel_requested_among([job.id]) == [(job.id, "first")]
    # The worker still finalizes under its claim.
    assert col(store.finalize([outcome(job.id, "cancelled", worker="w7")], 8_000)[0], 2) == (
        "cancelled"
    )


def test_unknown_and_terminal_rows_are_not_cancellable(store: ConformantStore) -> None:
    assert store.request_cancel("no-such-id", None, "{}", 1) == (None, None, None)
    job = new_job()
    store.enqueue([job])
    claim(store)
    store.finalize([outcome(job.id)], 2)
    assert store.request_cancel(job.id, None, "{}", 3) == (None, None, None)
    assert col(store.get(job.id), L.C_CANCEL) == 0


def test_force_cancel_is_fenced_on_the_claim(store: ConformantStore) -> None:
    job = new_job()
    store.enqueue([job])
    claim(store, worker="w1")
    store.set_progress(job.id, "w1", 0, 10.0, None, 2)
    assert store.force_cancel(job.id, "w2", 0, "{}", 3) is None
    assert store.force_cancel(job.id, "w1", 1, "{}", 3) is None
    assert col(store.get(job.id), L.C_STATUS) == "running"
    row = store.force_cancel(job.id, "w1", 0, '{"forced":true}', 4)
    assert row == store.get(job.id)
    assert col(row, L.C_STATUS) == "cancelled"
    assert col(row, L.C_ERROR) == '{"forced":true}'
    assert col(row, L.C_OUTPUT) is None
    assert col(row, L.C_FINISHED_AT) == 4
    # The late result of the handler is dropped: the first terminal write won.
    assert store.finalize([outcome(job.id, worker="w1", output="late")], 5) == [None]


def test_cancel_many_flags_running_and_cancels_waiting_rows(store: ConformantStore) -> None:
    run_a = new_job(queue="x", type="t.a")
    wait_a = new_job(queue="x", type="t.a")
    delayed_a = new_job(queue="x", type="t.a", status="delayed", scheduled_at=50_000)
    other_type = new_job(queue="x", type="t.b")
    other_queue = new_job(queue="y", type="t.a")
    store.enqueue([run_a, wait_a, delayed_a, other_type, other_queue])
    assert [c.id for c in claim(store, "x", worker="w1", limit=1).jobs] == [run_a.id]

    running, waiting = store.cancel_many("x", "t.a", "bulk", '{"bulk":1}', 9_000)
    assert running == [(run_a.id, "w1")]
    assert sorted(r[L.C_ID] for r in waiting) == sorted([wait_a.id, delayed_a.id])
    for row in waiting:
        assert row == store.get(row[L.C_ID])
        assert row[L.C_STATUS] == "cancelled"
        assert row[L.C_CANCEL] == 1
        assert row[L.C_ERROR] == '{"bulk":1}'
    assert col(store.get(run_a.id), L.C_STATUS) == "running"
    assert store.cancel_requested_among([run_a.id]) == [(run_a.id, "bulk")]
    for untouched in (other_type, other_queue):
        assert col(store.get(untouched.id), L.C_STATUS) == "pending"


def test_cancel_many_by_queue_alone_and_by_type_alone(store: ConformantStore) -> None:
    store.enqueue(
        [
            new_job(queue="x", type="t.a"),
            new_job(queue="x", type="t.b"),
            new_job(queue="y", type="t.b"),
            new_job(queue="z", type="t.c"),
        ]
    )
    _, by_queue = store.cancel_many("x", None, None, "{}", 1)
    assert len(by_queue) == 2
    _, by_type = store.cancel_many(None, "t.b", None, "{}", 2)
    assert [(r[L.C_QUEUE], r[L.C_TYPE]) for r in by_type] == [("y", "t.b")]
    assert store.count(JobFilter(status=("pending",))) == 1


def test_cancel_requested_among_ignores_unflagged_and_empty_input(store: ConformantStore) -> None:
    job = new_job()
    store.enqueue([job])
    assert store.cancel_requested_among([]) == []
    assert store.cancel_requested_among([job.id]) == []
