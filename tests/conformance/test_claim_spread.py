"""claim_spread: one claim across queues, taking turns, every cap counted in it."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import ClaimResult, JobFilter, SpreadRequest
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome


def spread(
    store: ConformantStore,
    queues: list[tuple[str, int]],
    *,
    limit: int = 100,
    global_cap: int = 1_000,
    worker: str = "w1",
    registered: bool = False,
    exclude: tuple[str, ...] = (),
    turn: int = 1,
) -> ClaimResult:
    request = SpreadRequest(
        tuple(queues), global_cap, limit, worker, ("t.a",), exclude, registered, turn=turn
    )
    return store.claim_spread(request, 10_000)


def test_rows_go_one_per_queue_in_turn_order_before_a_second(store: ConformantStore) -> None:
    jobs = {q: [new_job(queue=q) for _ in range(3)] for q in ("a", "b", "c")}
    store.enqueue([j for js in jobs.values() for j in js])
    got = spread(store, [("c", 5), ("a", 5), ("b", 5)], limit=4)
    # c, a and b each give their head; then c, first in turn, its second.
    assert sorted(j.id for j in got.jobs) == sorted(
        [jobs["c"][0].id, jobs["a"][0].id, jobs["b"][0].id, jobs["c"][1].id]
    )
    assert [j.queue for j in got.jobs][:1] == ["c"]  # in turn order
    assert not got.global_blocked
    assert got.free == {"a": 5, "b": 5, "c": 5}


def test_a_limit_below_the_queues_with_rows_takes_the_first_in_turn(
    store: ConformantStore,
) -> None:
    """Fewer slots than asked queues with rows: the heads of the first queues in turn,
    whatever their names' order, also when some have settings of their own (a cap that
    overrides the asked one, a paused queue, which gives nothing and keeps its place)."""
    names = ["q7", "q2", "q9", "q0", "q5", "q3", "q8", "q1"]
    jobs = {q: new_job(queue=q) for q in names}
    store.enqueue(list(jobs.values()))
    store.update_queue_settings("q2", {"concurrency": 2}, 9_000)
    store.update_queue_settings("q9", {"paused": True}, 9_000)
    got = spread(store, [(q, 5) for q in names], limit=3)
    assert sorted(j.id for j in got.jobs) == sorted(jobs[q].id for q in ("q7", "q2", "q0"))
    assert got.free is not None
    assert got.free["q2"] == 2
    got = spread(store, [(q, 5) for q in names], limit=2, global_cap=5)
    assert sorted(j.id for j in got.jobs) == sorted(jobs[q].id for q in ("q5", "q3"))


def test_each_queue_takes_its_head_rows_in_claim_order(store: ConformantStore) -> None:
    low, high = new_job(queue="a", priority=5), new_job(queue="a", priority=1)
    store.enqueue([low, high, new_job(queue="b")])
    got = spread(store, [("a", 5), ("b", 5)], limit=2)
    assert Counter(j.queue for j in got.jobs) == {"a": 1, "b": 1}
    assert high.id in {j.id for j in got.jobs}


@pytest.mark.parametrize("global_cap", [1_000, 4], ids=["loose-cap", "tight-cap"])
def test_the_queue_cap_counts_running_rows_of_every_worker(
    store: ConformantStore, global_cap: int
) -> None:
    """Under a tight global cap SQLite counts every queue in one pass over the running
    rows, under a loose one with a search per queue (`store._running_counts`): the same
    counts either way."""
    store.enqueue([new_job(queue="a") for _ in range(5)] + [new_job(queue="b")])
    assert len(claim(store, "a", worker="other", limit=2).jobs) == 2
    got = spread(store, [("a", 3), ("b", 3)], global_cap=global_cap)
    assert Counter(j.queue for j in got.jobs) == {"a": 1, "b": 1}
    assert got.free == {"a": 1, "b": 3}
    again = spread(store, [("a", 3)])
    assert again.jobs == []
    assert again.free == {"a": 0}
    assert not again.global_blocked


def test_the_global_cap_bounds_the_claim_and_reports_blocked(store: ConformantStore) -> None:
    store.enqueue([new_job(queue=f"q{i % 4}") for i in range(16)])
    assert len(claim(store, "q0", worker="other", limit=3).jobs) == 3
    got = spread(store, [(f"q{i}", 5) for i in range(4)], global_cap=5)
    assert len(got.jobs) == 2
    assert {j.queue for j in got.jobs} == {"q0", "q1"}  # the first two turns
    assert got.global_blocked
    full = spread(store, [("q2", 5), ("q3", 5)], global_cap=5)
    assert full.jobs == []
    assert full.global_blocked
    assert store.count(JobFilter(status=("running",))) == 5


def test_a_queue_with_fewer_rows_than_slots_gives_what_it_has(store: ConformantStore) -> None:
    store.enqueue([new_job(queue="a"), new_job(queue="b"), new_job(queue="b")])
    got = spread(store, [("a", 5), ("b", 5), ("empty", 5)])
    assert Counter(j.queue for j in got.jobs) == {"a": 1, "b": 2}
    assert not got.global_blocked
    assert got.free == {"a": 5, "b": 5, "empty": 5}


def test_second_rows_follow_every_head_and_respect_each_cap(store: ConformantStore) -> None:
    jobs = {q: [new_job(queue=q) for _ in range(4)] for q in ("a", "b", "c")}
    store.enqueue([j for js in jobs.values() for j in js])
    # "dry" has no row; b may take one; a and c three each. Heads go in turn order
    # (a, b, c), then second rows in turn order among the queues with room (a, c), then
    # third rows: five slots give a, b, c, a, c.
    got = spread(store, [("dry", 5), ("a", 3), ("b", 1), ("c", 3)], limit=5)
    assert Counter(j.queue for j in got.jobs) == {"a": 2, "b": 1, "c": 2}
    ids = {j.id for j in got.jobs}
    assert ids == {jobs["a"][0].id, jobs["a"][1].id, jobs["b"][0].id} | {
        jobs["c"][0].id,
        jobs["c"][1].id,
    }
    assert [j.queue for j in got.jobs] == ["a", "a", "b", "c", "c"]  # turn, then claim order
    # The caps count the running rows: one slot left in each.
    more = spread(store, [("dry", 5), ("a", 3), ("b", 2), ("c", 3)], limit=10)
    assert Counter(j.queue for j in more.jobs) == {"a": 1, "b": 1, "c": 1}


def test_a_turn_of_several_rows_serves_fewer_queues_in_turn_order(
    store: ConformantStore,
) -> None:
    jobs = {q: [new_job(queue=q) for _ in range(3)] for q in ("d", "a", "c", "b")}
    store.enqueue([j for js in jobs.values() for j in js])
    got = spread(store, [("d", 5), ("a", 5), ("c", 5), ("b", 5)], limit=5, turn=2)
    # d's turn (two rows), a's, then the first row of c's: b waits.
    assert [j.queue for j in got.jobs] == ["d", "d", "a", "a", "c"]
    assert {j.id for j in got.jobs} == {jobs["d"][0].id, jobs["d"][1].id} | {
        jobs["a"][0].id,
        jobs["a"][1].id,
        jobs["c"][0].id,
    }
    assert got.free == {"d": 5, "a": 5, "c": 5, "b": 5}


def test_a_turn_takes_the_queues_first_rows_by_claim_order(store: ConformantStore) -> None:
    rows = [new_job(queue="a", priority=p) for p in (5, 1, 3)]
    store.enqueue([*rows, new_job(queue="b")])
    got = spread(store, [("a", 5), ("b", 5)], limit=3, turn=2)
    # a's turn is its two rows first by priority (1, then 3), then b's head.
    assert [j.id for j in got.jobs][:2] == [rows[1].id, rows[2].id]
    assert [j.queue for j in got.jobs] == ["a", "a", "b"]


def test_slots_a_short_turn_leaves_go_to_the_queues_after_it(store: ConformantStore) -> None:
    """A queue with fewer rows than its turn (or a cap below it) leaves slots: the turns
    after it take them, the one the slots had cut short first, then the next queues."""
    store.enqueue(
        [new_job(queue="one")]
        + [new_job(queue=q) for q in ("capped", "b", "c", "d") for _ in range(3)]
    )
    order = [("dry", 5), ("one", 5), ("capped", 1), ("b", 5), ("c", 5), ("d", 5)]
    got = spread(store, order, limit=6, turn=3)
    # one gives its only row and capped its one slot; b takes its whole turn, c the last.
    assert Counter(j.queue for j in got.jobs) == {"one": 1, "capped": 1, "b": 3, "c": 1}
    store.enqueue([new_job(queue=q) for q in ("e", "e", "f", "f")])
    got = spread(store, [("c", 5), ("e", 5), ("f", 5)], limit=4, turn=2)
    assert [j.queue for j in got.jobs] == ["c", "c", "e", "e"]
    # g has one row: the slot its turn leaves goes to h, whose turn the slots had cut
    # short, not to i after it.
    store.enqueue([new_job(queue="g")] + [new_job(queue=q) for q in ("h", "i") for _ in range(3)])
    got = spread(store, [("g", 5), ("f", 5), ("h", 5), ("i", 5)], limit=5, turn=2)
    assert [j.queue for j in got.jobs] == ["g", "f", "f", "h", "h"]


def test_after_every_queue_had_its_turn_the_next_turns_go_in_order(
    store: ConformantStore,
) -> None:
    store.enqueue([new_job(queue=q) for q in ("a", "b") for _ in range(6)])
    got = spread(store, [("a", 5), ("b", 4)], limit=7, turn=2)
    # a 2, b 2, then the second turns: a 2, b 1 of its two.
    assert [j.queue for j in got.jobs] == ["a"] * 4 + ["b"] * 3
    more = spread(store, [("b", 4), ("a", 5)], limit=10, turn=2)
    # The caps count what the first claim took: a may take one more, b one.
    assert Counter(j.queue for j in more.jobs) == {"a": 1, "b": 1}


def test_a_turn_stops_at_the_global_cap(store: ConformantStore) -> None:
    store.enqueue([new_job(queue=q) for q in ("a", "b", "c") for _ in range(4)])
    got = spread(store, [("a", 5), ("b", 5), ("c", 5)], global_cap=5, turn=3)
    assert [j.queue for j in got.jobs] == ["a", "a", "a", "b", "b"]
    assert got.global_blocked


def test_claimed_rows_are_running_under_the_worker(store: ConformantStore) -> None:
    job = new_job(queue="a")
    store.enqueue([job, new_job(queue="a", type="t.other")])
    [got] = spread(store, [("a", 5)], worker="w7").jobs
    assert got.id == job.id
    assert got.started_at == 10_000
    row = store.get(job.id)
    assert col(row, L.C_STATUS) == "running"
    assert col(row, L.C_WORKER) == "w7"


def test_rows_of_excluded_owners_wait(store: ConformantStore) -> None:
    mine, dead = new_job(queue="a"), new_job(queue="a", enqueued_by="dead")
    store.enqueue([mine, dead])
    got = spread(store, [("a", 5)], exclude=("dead",))
    assert [j.id for j in got.jobs] == [mine.id]


def test_an_unregistered_worker_claims_nothing(store: ConformantStore) -> None:
    store.enqueue([new_job(queue="a")])
    assert spread(store, [("a", 5)], registered=True).unregistered
    store.register_worker("w1", "host", 1, ["t.a=retry"], 5)
    assert len(spread(store, [("a", 5)], registered=True).jobs) == 1


def test_finalize_and_claim_spreads_over_the_slots_the_outcomes_freed(
    store: ConformantStore,
) -> None:
    store.enqueue([new_job(queue=q) for q in ("a", "a", "b", "b", "c")])
    first = spread(store, [("a", 1), ("b", 1)], global_cap=2)
    assert len(first.jobs) == 2
    assert first.global_blocked
    request = SpreadRequest((("c", 1), ("a", 1), ("b", 1)), 2, 10, "w1", ("t.a",))
    rows, taken = store.finalize_and_claim([outcome(j.id) for j in first.jobs], 20_000, request)
    assert all(r is not None for r in rows)
    assert taken is not None
    # Both slots freed: c's turn first, then a's; b waits.
    assert Counter(j.queue for j in taken.jobs) == {"c": 1, "a": 1}
    assert taken.global_blocked
    assert store.count(JobFilter(status=("running",))) == 2


def test_concurrent_spread_claims_never_exceed_either_cap(backend: Backend) -> None:
    backend.store.enqueue([new_job(queue=f"q{i % 6}") for i in range(60)])
    stores = [backend.open_other() for _ in range(4)]
    start = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait(timeout=10)
            # Every store asks for every queue, each in its own turn order.
            order = [(f"q{(i + k) % 6}", 2) for k in range(6)]
            for _ in range(3):
                spread(stores[i], order, global_cap=7, worker=f"w{i}")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    running = backend.rows("SELECT queue FROM jobs WHERE status = 'running'")
    assert len(running) == 7
    assert max(Counter(q for (q,) in running).values()) <= 2
