"""data_version: changes when another connection commits, so a watcher need not scan."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.conformance import Backend, ConformantStore, claim, new_job, outcome

DEADLINE = 10.0


def _changes(store: ConformantStore, before: int, what: str) -> int:
    deadline = time.monotonic() + DEADLINE
    while True:
        now = store.data_version()
        if now != before:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"data_version did not change after {what}")
        time.sleep(0.01)


def _enqueue_one_to_a_known_queue(store: ConformantStore) -> None:
    # PostgreSQL writes it in one autocommit statement, its change note included.
    store.remember_queues(["q"])
    store.enqueue([new_job()])


def _steps(other: ConformantStore) -> list[tuple[str, Callable[[], object]]]:
    a, b, c = new_job(), new_job(), new_job(status="delayed", scheduled_at=20_000)
    pair = [new_job(queue="pair"), new_job(queue="pair")]
    return [
        ("enqueue", lambda: other.enqueue([a, b, c])),
        ("enqueue one", lambda: _enqueue_one_to_a_known_queue(other)),
        ("claim+finalize", lambda: (claim(other, limit=1), other.finalize([outcome(a.id)], 1))),
        ("cancel", lambda: other.request_cancel(b.id, None, "{}", 2)),
        ("enqueue a pair, claim it", lambda: (other.enqueue(pair), claim(other, queue="pair"))),
        # Two outcomes: PostgreSQL writes them in one statement (FINISH_MANY), noted too.
        ("finalize a batch", lambda: other.finalize([outcome(j.id) for j in pair], 2)),
        ("promote", lambda: other.promote_due(20_000)),
        ("cancel_many", lambda: other.cancel_many("q", None, None, "{}", 3)),
    ]


def test_commits_of_another_store_change_the_version(backend: Backend) -> None:
    store = backend.store
    other = backend.open_other()
    version = store.data_version()
    for what, step in _steps(other):
        step()
        version = _changes(store, version, what)


def test_the_version_holds_still_while_nobody_writes(backend: Backend) -> None:
    store = backend.store
    other = backend.open_other()
    before = store.data_version()
    other.enqueue([new_job()])
    version = _changes(store, before, "enqueue")
    time.sleep(0.05)
    assert store.data_version() == version
    assert store.data_version() == version
