"""get, terminal_among, list/count (filters and order), gc."""

from __future__ import annotations

import pytest

from jobledger._core.ids import new_id
from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, NewJob, OutcomeKind
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome


def _finish(store: ConformantStore, job_id: str, now: int, kind: OutcomeKind = "completed") -> None:
    assert [c.id for c in claim(store, limit=1).jobs] == [job_id]
    assert store.finalize([outcome(job_id, kind)], now)[0] is not None


def test_get_of_an_unknown_id_is_none(store: ConformantStore) -> None:
    assert store.get("nope") is None


def test_terminal_among_returns_only_terminal_rows(store: ConformantStore) -> None:
    done, waiting = new_job(), new_job()
    store.enqueue([done, waiting])
    _finish(store, done.id, 5_000)
    rows = store.terminal_among([done.id, waiting.id, "unknown"])
    assert rows == [store.get(done.id)]
    assert store.terminal_among([]) == []


def test_terminal_among_takes_many_ids(store: ConformantStore) -> None:
    jobs = [new_job() for _ in range(3)]
    store.enqueue(jobs)
    store.cancel_many("q", None, None, "{}", 2_000)
    ids = [j.id for j in jobs] + [f"missing-{i}" for i in range(1_200)]
    assert sorted(r[L.C_ID] for r in store.terminal_among(ids)) == [j.id for j in jobs]


def _made_at(ms: int) -> NewJob:
    # The runtime makes every id from its row's created_at (`new_id`), which is what lets
    # SQLite list by id alone; PostgreSQL orders by (created_at, id): the same order.
    return new_job(id=new_id(ms), created_at=ms)


def test_list_is_newest_first_then_by_id(store: ConformantStore) -> None:
    a = _made_at(100)
    b = _made_at(300)
    c = _made_at(200)
    d = _made_at(300)  # same time as b, larger id
    assert d.id > b.id
    store.enqueue([a, b, c, d])
    rows = store.list(JobFilter(), limit=10, offset=0)
    assert [r[L.C_ID] for r in rows] == [d.id, b.id, c.id, a.id]
    assert rows[0] == store.get(d.id)
    page = store.list(JobFilter(), limit=2, offset=1)
    assert [r[L.C_ID] for r in page] == [b.id, c.id]
    assert store.list(JobFilter(), limit=10, offset=4) == []


def test_list_and_count_filter_on_every_field(backend: Backend) -> None:
    store = backend.store
    sid = "sched-1"
    backend.execute(
        "INSERT INTO job_schedules (id, type, name, trigger, payload, catch_up, enabled, "
        "metadata, created_at, updated_at) VALUES (?, 't.a', '', '{}', '{}', '{}', 1, '{}', 0, 0)",
        (sid,),
    )
    parent = new_job(queue="x", type="t.a")
    store.enqueue([parent])
    kids = [
        new_job(queue="x", type="t.b", parent=parent.id),
        new_job(queue="y", type="t.b", schedule=sid),
        new_job(queue="y", type="t.a", status="delayed", scheduled_at=90_000),
    ]
    store.enqueue(kids)
    cases: list[tuple[JobFilter, set[str]]] = [
        (JobFilter(), {parent.id, *(k.id for k in kids)}),
        (JobFilter(status=("pending",)), {parent.id, kids[0].id, kids[1].id}),
        (JobFilter(status=("delayed", "completed")), {kids[2].id}),
        (JobFilter(queue="y"), {kids[1].id, kids[2].id}),
        (JobFilter(type="t.b"), {kids[0].id, kids[1].id}),
        (JobFilter(queue="y", type="t.a"), {kids[2].id}),
        (JobFilter(schedule_id=sid), {kids[1].id}),
        (JobFilter(parent_id=parent.id), {kids[0].id}),
        (JobFilter(status=("running",)), set()),
        (JobFilter(queue="none"), set()),
    ]
    for flt, expected in cases:
        assert {r[L.C_ID] for r in store.list(flt, limit=100, offset=0)} == expected, flt
        assert store.count(flt) == len(expected), flt


@pytest.mark.parametrize("kind", ["completed", "failed", "cancelled"])
def test_gc_deletes_only_terminal_rows_finished_before_the_cutoff(
    store: ConformantStore, kind: OutcomeKind
) -> None:
    old, recent, live = new_job(), new_job(), new_job(status="delayed", scheduled_at=10**9)
    store.enqueue([old, recent, live])
    _finish(store, old.id, 5_000, kind)
    _finish(store, recent.id, 9_000, kind)
    assert store.gc(9_000) == 1
    assert store.get(old.id) is None
    assert store.get(recent.id) is not None
    assert store.gc(10**12) == 1
    assert store.get(live.id) is not None
    assert store.gc(10**12) == 0


def test_gc_works_in_batches_and_orphans_children(store: ConformantStore) -> None:
    parent = new_job()
    store.enqueue([parent])
    child = new_job(parent=parent.id, status="delayed", scheduled_at=10**9)
    others = [new_job() for _ in range(4)]
    store.enqueue([child, *others])
    for job in (parent, *others):
        _finish(store, job.id, 5_000)
    assert store.gc(6_000, batch=2) == 5
    assert store.count(JobFilter()) == 1
    assert col(store.get(child.id), L.C_PARENT) is None
