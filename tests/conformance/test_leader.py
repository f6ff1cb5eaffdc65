"""The leader lease row: take (one holder, growing terms), renew, resign."""

from __future__ import annotations

import os
import socket

from tests.conformance import Backend

HOST = socket.gethostname()
TTL = 10_000


def _register(backend: Backend, worker_id: str) -> None:
    row = (worker_id, HOST, os.getpid(), "[]", 0, 0)
    backend.store.write(lambda c: c.execute(backend.queries.REGISTER_WORKER, row), "register")


def _take(backend: Backend, worker_id: str, now: int) -> int | None:
    term: int | None = backend.leader.take_lease(
        backend.store, worker_id, now_ms=now, ttl_ms=TTL, hostname=HOST
    )
    return term


def test_one_holder_at_a_time_and_a_new_term_after_expiry(backend: Backend) -> None:
    _register(backend, "a")
    _register(backend, "b")
    assert backend.leader.read_lease(backend.store) is None
    assert _take(backend, "a", 1_000) == 1
    assert _take(backend, "b", 2_000) is None
    assert _take(backend, "a", 3_000) == 1  # already ours: same term
    lease = backend.leader.read_lease(backend.store)
    assert (lease.worker_id, lease.term, lease.expires_at, lease.registered) == (
        "a",
        1,
        3_000 + TTL,
        True,
    )
    assert _take(backend, "b", 3_000 + TTL) == 2  # expired: b takes over with a new term
    assert backend.leader.renew_lease(backend.store, "a", 1, expires_at=99_999) is False


def test_renew_extends_and_resign_frees_the_lease(backend: Backend) -> None:
    _register(backend, "a")
    _register(backend, "b")
    assert _take(backend, "a", 1_000) == 1
    assert backend.leader.renew_lease(backend.store, "a", 1, expires_at=50_000) is True
    assert backend.leader.read_lease(backend.store).expires_at == 50_000
    assert _take(backend, "b", 40_000) is None
    backend.leader.resign_lease(backend.store, "b", 1)  # not b's lease: no effect
    assert _take(backend, "b", 40_000) is None
    backend.leader.resign_lease(backend.store, "a", 1)
    assert _take(backend, "b", 40_000) == 2


def test_an_unregistered_holder_is_replaced_at_once(backend: Backend) -> None:
    _register(backend, "b")
    assert _take(backend, "ghost", 1_000) == 1  # holds a lease but has no worker row
    assert _take(backend, "b", 1_001) == 2
