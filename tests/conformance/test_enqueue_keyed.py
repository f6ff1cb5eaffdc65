"""enqueue_keyed: `unique_for` and `debounce` entries (`interface.KeyRule`), on both backends.

Times are those of the entries: an entry's `created_at` is its enqueue's now.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import (
    JobFilter,
    JobRow,
    KeyRule,
    fresh_row,
    successor_key,
    user_key,
    was_inserted,
)
from jobledger.errors import JobNotFound
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome


def keyed(key: str, at: int, *, status: str = "pending", delay: int = 0, **fields: Any) -> JobRow:
    """An entry enqueued at `at` (ms) with `key`, due `delay` ms later."""
    job = new_job(
        key=key,
        created_at=at,
        scheduled_at=at + delay,
        status="delayed" if delay else "pending",
        **fields,
    )
    return fresh_row(job)


def unique(ms: int) -> KeyRule:
    return KeyRule("unique_for", ms)


def debounce(ms: int) -> KeyRule:
    return KeyRule("debounce", ms)


def ended(store: ConformantStore, key: str, at: int, kind: Any = "completed") -> JobRow:
    """A job with `key`, run and ended at `at`."""
    row = store.enqueue_rows([keyed(key, at - 10)])[0]
    claim(store, now=at - 5)
    store.finalize([outcome(row[L.C_ID], kind)], at)
    return store.get(row[L.C_ID]) or ()


def test_unique_for_answers_a_live_job_as_a_plain_key_does(store: ConformantStore) -> None:
    first = store.enqueue_rows([keyed("k", 1_000)])[0]
    again = store.enqueue_keyed([keyed("k", 2_000)], [unique(60_000)])[0]
    assert again == store.get(first[L.C_ID])
    claim(store, now=3_000)
    running = store.enqueue_keyed([keyed("k", 4_000)], [unique(60_000)])[0]
    assert (running[L.C_ID], running[L.C_STATUS]) == (first[L.C_ID], "running")
    assert store.count(JobFilter()) == 1


@pytest.mark.parametrize("kind", ["completed", "failed", "cancelled"])
def test_unique_for_answers_the_job_that_ended_within_the_window(
    store: ConformantStore, kind: Any
) -> None:
    done = ended(store, "k", 20_000, kind)
    assert done[L.C_STATUS] == kind
    # The window is counted from the end, inclusive: ended exactly 60 s before.
    for now in (20_000, 50_000, 80_000):
        hit = store.enqueue_keyed([keyed("k", now)], [unique(60_000)])[0]
        assert hit == done
    assert store.count(JobFilter()) == 1
    entry = keyed("k", 80_001)
    fresh = store.enqueue_keyed([entry], [unique(60_000)])[0]
    assert was_inserted(entry, fresh)
    assert col(store.get(entry[L.C_ID]), L.C_STATUS) == "pending"
    # The new job is the live one now.
    assert store.enqueue_keyed([keyed("k", 80_002)], [unique(60_000)])[0][L.C_ID] == entry[L.C_ID]
    assert store.count(JobFilter()) == 2


def test_unique_for_answers_the_job_that_ended_last(store: ConformantStore) -> None:
    ended(store, "k", 20_000)
    last = ended(store, "k", 30_000)
    assert store.enqueue_keyed([keyed("k", 40_000)], [unique(60_000)])[0] == last
    # Another key's ended job is no hit.
    other = keyed("k2", 40_000)
    assert was_inserted(other, store.enqueue_keyed([other], [unique(60_000)])[0])


def test_a_plain_entry_still_ignores_ended_jobs(store: ConformantStore) -> None:
    done = ended(store, "k", 20_000)
    entry = keyed("k", 21_000)
    row = store.enqueue_keyed([entry], [None])[0]
    assert row[L.C_ID] == entry[L.C_ID] != done[L.C_ID]


def test_debounce_sets_the_waiting_jobs_payload_and_time(store: ConformantStore) -> None:
    first = store.enqueue_rows([keyed("d", 1_000, priority=3, metadata={"m": 1})])[0]
    entry = keyed("d", 5_000, delay=10_000, payload={"last": True}, priority=9)
    row = store.enqueue_keyed([entry], [debounce(10_000)])[0]
    assert not was_inserted(entry, row)
    assert row == store.get(first[L.C_ID])
    assert row[L.C_PAYLOAD] == entry[L.C_PAYLOAD]
    assert (row[L.C_STATUS], row[L.C_SCHEDULED_AT], row[L.C_UPDATED_AT]) == (
        "delayed",
        15_000,
        5_000,
    )
    # Only the payload and the time: everything else is the job's own.
    for c in (L.C_PRIORITY, L.C_METADATA, L.C_QUEUE, L.C_CREATED_AT, L.C_KEY, L.C_ATTEMPT):
        assert row[c] == first[c]
    assert store.count(JobFilter()) == 1
    # Pushed back again from a delayed job, and promoted only when due.
    again = store.enqueue_keyed([keyed("d", 8_000, delay=10_000)], [debounce(10_000)])[0]
    assert again[L.C_SCHEDULED_AT] == 18_000
    assert store.promote_due(17_999) == []
    assert store.promote_due(18_000) == ["q"]


def test_debounce_without_a_job_writes_one(store: ConformantStore) -> None:
    entry = keyed("d", 1_000, delay=5_000)
    row = store.enqueue_keyed([entry], [debounce(5_000)])[0]
    assert was_inserted(entry, row)
    assert store.get(entry[L.C_ID]) == row
    assert store.queues_since(0)[-1][1] == "q"
    # An ended job with the key is not waiting: a new one is written.
    store.promote_due(6_000)
    claim(store, now=6_000)
    store.finalize([outcome(entry[L.C_ID])], 7_000)
    later = keyed("d", 8_000, delay=5_000)
    assert was_inserted(later, store.enqueue_keyed([later], [debounce(5_000)])[0])


def test_debounce_beside_a_running_job_writes_a_successor(store: ConformantStore) -> None:
    running = store.enqueue_rows([keyed("d", 1_000)])[0]
    claim(store, now=2_000)
    entry = keyed("d", 3_000, delay=5_000, payload={"n": "b"})
    b = store.enqueue_keyed([entry], [debounce(5_000)])[0]
    assert was_inserted(entry, b)
    assert b[L.C_KEY] == successor_key("d", entry[L.C_ID])
    assert user_key(b[L.C_KEY]) == "d"
    assert store.get(entry[L.C_ID]) == b
    # The running job is left alone.
    assert col(store.get(running[L.C_ID]), L.C_PAYLOAD) == running[L.C_PAYLOAD]
    assert col(store.get(running[L.C_ID]), L.C_STATUS) == "running"
    # The next debounce finds the successor; a plain key still answers the running job.
    c = store.enqueue_keyed([keyed("d", 4_000, delay=5_000, payload={"n": "c"})], [debounce(5_000)])
    assert c[0][L.C_ID] == b[L.C_ID]
    assert c[0][L.C_SCHEDULED_AT] == 9_000
    assert store.enqueue_rows([keyed("d", 4_500)])[0][L.C_ID] == running[L.C_ID]
    # Once the successor runs too, the next debounce is a third job; a fourth updates it.
    assert store.promote_due(9_000) == ["q"]
    claim(store, now=9_000)
    third = keyed("d", 9_500, delay=5_000)
    assert was_inserted(third, store.enqueue_keyed([third], [debounce(5_000)])[0])
    fourth = store.enqueue_keyed([keyed("d", 9_600, delay=5_000)], [debounce(5_000)])[0]
    assert fourth[L.C_ID] == third[L.C_ID]
    assert store.count(JobFilter(status=("running",))) == 2
    assert store.count(JobFilter()) == 3
    # When the first ends, the key is free: the successor that waits is still the one.
    store.finalize([outcome(running[L.C_ID])], 10_000)
    fifth = store.enqueue_keyed([keyed("d", 10_500, delay=5_000)], [debounce(5_000)])[0]
    assert fifth[L.C_ID] == third[L.C_ID]
    assert store.count(JobFilter()) == 3


def test_debounce_touches_no_other_key(store: ConformantStore) -> None:
    # Keys that share the key's first characters, or sort right after it.
    others = ["ab", "a b", "a!", "b", "a\u00e9"]
    rows = store.enqueue_rows([keyed(k, 1_000) for k in others])
    entry = keyed("a", 2_000, delay=1_000)
    assert was_inserted(entry, store.enqueue_keyed([entry], [debounce(1_000)])[0])
    for row in rows:
        assert store.get(row[L.C_ID]) == row


def test_one_batch_debouncing_one_key_twice_answers_its_last_version(
    store: ConformantStore,
) -> None:
    a = keyed("d", 1_000, delay=5_000, payload={"n": 1})
    plain = keyed("p", 1_000)
    b = keyed("d", 1_000, delay=5_000, payload={"n": 2})
    rows = store.enqueue_keyed([a, plain, b], [debounce(5_000), None, debounce(5_000)])
    assert rows[0] == rows[2] == store.get(a[L.C_ID])
    assert rows[0][L.C_PAYLOAD] == b[L.C_PAYLOAD]
    assert was_inserted(a, rows[0])
    assert not was_inserted(b, rows[2])
    assert rows[1] == store.get(plain[L.C_ID])
    assert store.count(JobFilter()) == 2


def test_a_missing_parent_writes_nothing_of_the_batch(store: ConformantStore) -> None:
    good = keyed("d", 1_000, delay=5_000)
    orphan = keyed("u", 1_000, parent="no-such-job")
    with pytest.raises(JobNotFound):
        store.enqueue_keyed([good, orphan], [debounce(5_000), unique(5_000)])
    assert store.count(JobFilter()) == 0


def test_inside_a_user_transaction_it_rolls_back_with_it(store: ConformantStore) -> None:
    first = store.enqueue_rows([keyed("d", 1_000)])[0]

    def aborted() -> None:
        with store.user_transaction() as conn:
            store.enqueue_keyed([keyed("d", 2_000, delay=5_000)], [debounce(5_000)], conn)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        aborted()
    assert store.get(first[L.C_ID]) == first
    with store.user_transaction() as conn:
        store.enqueue_keyed([keyed("d", 2_000, delay=5_000)], [debounce(5_000)], conn)
    assert col(store.get(first[L.C_ID]), L.C_SCHEDULED_AT) == 7_000


def run_writers(stores: list[ConformantStore], writer: Callable[[int], None]) -> None:
    """`writer(i)` for each store, each in a thread of its own; re-raises what failed."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            writer(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_two_stores_debouncing_one_key_at_once_keep_one_job(backend: Backend) -> None:
    """Two store instances (two connections, as two processes have) in two threads."""
    stores = [backend.store, backend.open_other()]
    n = 40
    barrier = threading.Barrier(len(stores))
    answered: list[set[str]] = [set() for _ in stores]

    def writer(i: int) -> None:
        barrier.wait(10)
        for j in range(n):
            at = 1_000 + j
            entry = keyed("d", at, delay=5_000, payload={"w": i, "j": j})
            answered[i].add(stores[i].enqueue_keyed([entry], [debounce(5_000)])[0][L.C_ID])
            entry = keyed("u", at)
            answered[i].add(stores[i].enqueue_keyed([entry], [unique(5_000)])[0][L.C_ID])

    run_writers(stores, writer)
    rows = backend.store.list(JobFilter(), limit=10, offset=0)
    assert sorted(r[L.C_KEY] for r in rows) == ["d", "u"]
    assert answered[0] == answered[1] == {r[L.C_ID] for r in rows}
    debounced = next(r for r in rows if r[L.C_KEY] == "d")
    assert debounced[L.C_STATUS] == "delayed"
    assert debounced[L.C_PAYLOAD] in ('{"w": 0, "j": 39}', '{"w": 1, "j": 39}')


def test_two_stores_debouncing_beside_a_running_job_write_one_job(backend: Backend) -> None:
    """The race for the job beside a running one, once per key, both writers released
    together each time."""
    stores = [backend.store, backend.open_other()]
    keys = [f"r{k}" for k in range(20)]
    backend.store.enqueue_rows([keyed(k, 500) for k in keys])
    assert len(claim(backend.store, now=600).jobs) == len(keys)
    barrier = threading.Barrier(len(stores))
    answered: list[list[str]] = [[] for _ in stores]

    def writer(i: int) -> None:
        for k in keys:
            barrier.wait(10)
            entry = keyed(k, 1_000, delay=5_000)
            answered[i].append(stores[i].enqueue_keyed([entry], [debounce(5_000)])[0][L.C_ID])

    run_writers(stores, writer)
    assert answered[0] == answered[1]
    waiting = backend.store.list(JobFilter(status=("delayed",)), limit=100, offset=0)
    assert sorted(str(user_key(r[L.C_KEY])) for r in waiting) == sorted(keys)
    assert {r[L.C_ID] for r in waiting} == set(answered[0])
