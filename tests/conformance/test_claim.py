"""claim: order, both caps (exact, across workers and store instances), eligibility."""

from __future__ import annotations

import threading

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter
from tests.conformance import Backend, ConformantStore, claim, col, new_job


def test_claims_in_priority_then_scheduled_at_then_id_order(store: ConformantStore) -> None:
    a = new_job(priority=5, scheduled_at=100)
    b = new_job(priority=1, scheduled_at=300)
    c = new_job(priority=1, scheduled_at=200)
    d = new_job(priority=1, scheduled_at=200)  # same as c; larger id
    e = new_job(priority=-3, scheduled_at=900)
    store.enqueue([d, a, b, e, c])
    order = [j.id for j in claim(store, limit=10).jobs]
    assert order == [e.id, c.id, d.id, b.id, a.id]


def test_each_claim_takes_the_head_of_the_queue(store: ConformantStore) -> None:
    jobs = [new_job(priority=p) for p in (3, 2, 1)]
    store.enqueue(jobs)
    assert [j.id for j in claim(store, limit=1).jobs] == [jobs[2].id]
    assert [j.id for j in claim(store, limit=1).jobs] == [jobs[1].id]


def test_a_claim_marks_rows_running_under_the_worker(store: ConformantStore) -> None:
    job = new_job(metadata={"m": 1}, timeout_ms=2_500, max_attempts=7)
    store.enqueue([job])
    got = claim(store, worker="w9", now=12_345).jobs
    assert len(got) == 1
    c = got[0]
    assert (c.id, c.type, c.queue, c.attempt, c.max_attempts, c.timeout_ms) == (
        job.id,
        "t.a",
        "q",
        0,
        7,
        2_500,
    )
    assert (c.payload, c.metadata, c.started_at, c.scheduled_at) == (
        job.payload,
        job.metadata,
        12_345,
        job.scheduled_at,
    )
    row = store.get(job.id)
    assert col(row, L.C_STATUS) == "running"
    assert col(row, L.C_WORKER) == "w9"
    assert col(row, L.C_STARTED_AT) == col(row, L.C_UPDATED_AT) == 12_345


def test_limit_bounds_one_claim(store: ConformantStore) -> None:
    store.enqueue([new_job() for _ in range(5)])
    assert len(claim(store, limit=2).jobs) == 2
    assert store.count(JobFilter(status=("running",))) == 2


def test_the_queue_cap_counts_rows_of_every_worker(store: ConformantStore) -> None:
    store.enqueue([new_job() for _ in range(6)])
    assert len(claim(store, worker="other", queue_cap=2).jobs) == 2
    result = claim(store, worker="me", queue_cap=3)
    assert len(result.jobs) == 1  # 2 run elsewhere: one slot left
    assert result.global_blocked is False
    full = claim(store, worker="me", queue_cap=3)
    assert full.jobs == []
    assert full.global_blocked is False  # the queue, not the global cap, is full


def test_the_global_cap_counts_running_rows_of_all_queues(store: ConformantStore) -> None:
    store.enqueue([new_job(queue="x") for _ in range(3)] + [new_job(queue="y") for _ in range(3)])
    assert len(claim(store, "x", worker="other", global_cap=10).jobs) == 3
    limited = claim(store, "y", worker="me", global_cap=4)
    assert len(limited.jobs) == 1
    assert limited.global_blocked is True  # it took all the global cap allowed
    blocked = claim(store, "y", worker="me", global_cap=4)
    assert blocked.jobs == []
    assert blocked.global_blocked is True


def test_global_blocked_is_false_when_the_queue_ran_dry(store: ConformantStore) -> None:
    store.enqueue([new_job()])
    result = claim(store, global_cap=2, limit=10)
    assert len(result.jobs) == 1
    assert result.global_blocked is False


def test_only_the_handled_types_are_claimed(store: ConformantStore) -> None:
    a, b, c = new_job(type="t.a"), new_job(type="t.b"), new_job(type="t.c")
    store.enqueue([a, b, c])
    got = {j.id for j in claim(store, types=("t.a", "t.c")).jobs}
    assert got == {a.id, c.id}
    assert col(store.get(b.id), L.C_STATUS) == "pending"
    assert claim(store, types=("t.zzz",)).jobs == []


def test_rows_not_due_yet_are_not_claimed(store: ConformantStore) -> None:
    due, later = new_job(scheduled_at=10_000), new_job(scheduled_at=10_001)
    store.enqueue([due, later])
    assert [j.id for j in claim(store, now=10_000).jobs] == [due.id]
    assert [j.id for j in claim(store, now=10_001).jobs] == [later.id]


def test_delayed_and_cancel_requested_rows_are_not_claimed(backend: Backend) -> None:
    store = backend.store
    delayed = new_job(status="delayed", scheduled_at=0)
    flagged = new_job()
    store.enqueue([delayed, flagged])
    # request_cancel cancels a pending row at once, so flag it while it runs elsewhere
    # and put it back to pending, as a crash reset leaves such a row.
    assert [j.id for j in claim(store, worker="gone").jobs] == [flagged.id]
    assert store.request_cancel(flagged.id, "stop", "{}", 11_000)[0] == "running"
    reset = "UPDATE jobs SET status = 'pending', worker_id = NULL WHERE id = ?"
    assert backend.execute(reset, (flagged.id,)) == 1
    assert claim(store).jobs == []
    assert col(store.get(delayed.id), L.C_STATUS) == "delayed"


def test_other_queues_are_untouched(store: ConformantStore) -> None:
    mine, theirs = new_job(queue="mine"), new_job(queue="theirs")
    store.enqueue([mine, theirs])
    assert [j.id for j in claim(store, "mine").jobs] == [mine.id]
    assert col(store.get(theirs.id), L.C_STATUS) == "pending"


def _race(backend: Backend, calls: list[dict[str, object]]) -> list[int]:
    """Run each claim on its own store instance, all released together."""
    stores = [backend.open_other() for _ in calls]
    start = threading.Barrier(len(calls))
    counts = [0] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait(timeout=10)
            kw = dict(calls[i])
            queue = str(kw.pop("queue"))
            counts[i] = len(
                stores[i]
                .claim(
                    queue,
                    queue_cap=int(str(kw["queue_cap"])),
                    global_cap=int(str(kw["global_cap"])),
                    limit=100,
                    now_ms=10_000,
                    worker_id=f"w{i}",
                    types=("t.a",),
                )
                .jobs
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return counts


def test_concurrent_claims_never_exceed_the_queue_cap(backend: Backend) -> None:
    backend.store.enqueue([new_job() for _ in range(20)])
    counts = _race(backend, [{"queue": "q", "queue_cap": 3, "global_cap": 100}] * 4)
    assert sum(counts) == 3
    assert backend.store.count(JobFilter(status=("running",))) == 3


def test_concurrent_claims_never_exceed_the_global_cap(backend: Backend) -> None:
    backend.store.enqueue([new_job(queue=f"q{i % 4}") for i in range(20)])
    calls: list[dict[str, object]] = [
        {"queue": f"q{i}", "queue_cap": 5, "global_cap": 4} for i in range(4)
    ]
    counts = _race(backend, calls)
    assert sum(counts) == 4
    assert backend.store.count(JobFilter(status=("running",))) == 4
