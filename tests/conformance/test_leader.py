"""The leader lease: `read_lease`, `take_lease` (one holder, growing terms, the caller's
`alive` policy decides about another holder), `renew_lease`, `resign_lease`."""

from __future__ import annotations

import os
import socket
import threading

from jobledger._core.recovery import holder_alive
from jobledger._storage.records import LeaseRow
from tests.conformance import Backend, ConformantStore

HOST = socket.gethostname()
TTL = 10_000


def _register(store: ConformantStore, worker_id: str, *, host: str = HOST) -> None:
    store.register_worker(worker_id, host, os.getpid(), [], 0)


def _take(store: ConformantStore, worker_id: str, now: int) -> int | None:
    def alive(lease: LeaseRow) -> bool:
        return holder_alive(lease, now_ms=now, hostname=HOST)

    return store.take_lease(worker_id, now_ms=now, ttl_ms=TTL, alive=alive)


def _lease(store: ConformantStore) -> LeaseRow:
    lease = store.read_lease()
    assert lease is not None, "expected a lease row"
    return lease


def test_one_holder_at_a_time_and_a_new_term_after_expiry(store: ConformantStore) -> None:
    _register(store, "a")
    _register(store, "b")
    assert store.read_lease() is None
    assert _take(store, "a", 1_000) == 1
    assert _take(store, "b", 2_000) is None  # a second taker is refused
    assert _take(store, "a", 3_000) == 1  # already ours: same term, new expiry
    assert _lease(store) == LeaseRow("a", 1, 3_000 + TTL, True, HOST, os.getpid(), None)
    assert _take(store, "b", 3_000 + TTL) == 2  # expired: b takes over with a new term
    assert (_lease(store).worker_id, _lease(store).term) == ("b", 2)
    # The old holder can no longer extend the lease it lost.
    assert store.renew_lease("a", 1, expires_at=99_999) is False
    assert _lease(store).expires_at == 3_000 + 2 * TTL


def test_the_alive_callback_decides_about_another_holder(store: ConformantStore) -> None:
    _register(store, "a", host="elsewhere")
    _register(store, "b")
    assert _take(store, "a", 1_000) == 1
    seen: list[LeaseRow] = []

    def never(lease: LeaseRow) -> bool:
        seen.append(lease)
        return False

    def always(lease: LeaseRow) -> bool:
        seen.append(lease)
        return True

    # An expired lease whose holder the caller still counts as alive is not taken...
    assert store.take_lease("b", now_ms=50_000, ttl_ms=TTL, alive=always) is None
    assert seen == [LeaseRow("a", 1, 1_000 + TTL, True, "elsewhere", os.getpid(), None)]
    assert _lease(store).worker_id == "a"
    # ...and an unexpired one whose holder it counts as dead is.
    assert store.take_lease("b", now_ms=2_000, ttl_ms=TTL, alive=never) == 2
    assert _lease(store) == LeaseRow("b", 2, 2_000 + TTL, True, HOST, os.getpid(), None)
    # Our own lease is ours whatever the callback says about other holders.
    assert store.take_lease("b", now_ms=3_000, ttl_ms=TTL, alive=always) == 2
    assert _lease(store).expires_at == 3_000 + TTL


def test_renew_extends_and_resign_frees_the_lease(store: ConformantStore) -> None:
    _register(store, "a")
    _register(store, "b")
    assert _take(store, "a", 1_000) == 1
    assert store.renew_lease("a", 1, expires_at=50_000) is True
    assert _lease(store).expires_at == 50_000
    assert store.renew_lease("a", 2, expires_at=60_000) is False  # not our term
    assert store.renew_lease("b", 1, expires_at=60_000) is False  # not our lease
    assert _lease(store).expires_at == 50_000
    assert _take(store, "b", 40_000) is None
    store.resign_lease("b", 1)  # not b's lease: no effect
    store.resign_lease("a", 2)  # not a's term: no effect
    assert _take(store, "b", 40_000) is None
    store.resign_lease("a", 1)
    assert (_lease(store).worker_id, _lease(store).term) == ("a", 1)  # the row stays
    assert _lease(store).expires_at <= 40_000
    assert _take(store, "b", 40_000) == 2  # a new holder: the term never goes back
    store.resign_lease("b", 2)
    assert _take(store, "a", 40_001) == 3


def test_the_lease_shows_its_holders_worker_row(store: ConformantStore) -> None:
    _register(store, "a", host="h1")
    assert _take(store, "a", 1_000) == 1
    store.stop_worker("a", 1_500)
    lease = _lease(store)
    assert (lease.registered, lease.hostname, lease.stopped_at) == (True, "h1", 1_500)
    _register(store, "b")
    assert _take(store, "b", 2_000) == 2  # a stopped holder is not alive


def test_an_unregistered_holder_is_replaced_at_once(store: ConformantStore) -> None:
    _register(store, "b")
    assert _take(store, "ghost", 1_000) == 1  # holds a lease but has no worker row
    assert _lease(store) == LeaseRow("ghost", 1, 1_000 + TTL, False, None, None, None)
    assert _take(store, "b", 1_001) == 2


def test_concurrent_takers_elect_one_leader(backend: Backend) -> None:
    """Takers in separate store instances (as separate processes would be) at the same
    moment: exactly one holds the lease; the others are refused."""
    takers = [backend.store, *(backend.open_other() for _ in range(3))]
    names = [f"w{i}" for i in range(len(takers))]
    for name in names:
        _register(backend.store, name)
    start = threading.Barrier(len(takers))
    terms: dict[str, int | None] = {}
    errors: list[BaseException] = []

    def go(store: ConformantStore, name: str) -> None:
        try:
            start.wait(timeout=10)
            terms[name] = _take(store, name, 1_000)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=pair) for pair in zip(takers, names, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    winners = [name for name, term in terms.items() if term is not None]
    assert len(terms) == len(takers)
    assert len(winners) == 1
    assert terms[winners[0]] == 1
    assert _lease(backend.store).worker_id == winners[0]
    # The losers stay refused while the winner lives.
    for name in names:
        if name != winners[0]:
            assert _take(backend.store, name, 2_000) is None
