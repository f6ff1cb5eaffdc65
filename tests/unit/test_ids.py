"""Job ids: the UUIDv7 layout, creation order, uniqueness, and a fresh sequence per fork."""

from __future__ import annotations

import itertools
import os
import uuid

import pytest

from jobledger._runtime import ids

MS = 1_700_000_000_123


def fields(job_id: str) -> tuple[int, int, int]:
    """(milliseconds, random bits, counter) of an id, checking the fixed bits."""
    u = uuid.UUID(job_id)
    assert str(u) == job_id
    assert u.version == 7
    assert u.variant == uuid.RFC_4122
    n = u.int
    return n >> 80, ((n >> 64) & 0xFFF) << 36 | ((n >> 26) & 0xFFFFFFFFF), n & 0x3FFFFFF


def test_layout_is_milliseconds_random_prefix_then_counter() -> None:
    a, b = ids.new_id(MS), ids.new_id(MS)
    (ms_a, rand_a, n_a), (ms_b, rand_b, n_b) = fields(a), fields(b)
    assert ms_a == ms_b == MS
    assert rand_a == rand_b == ids._rand
    assert n_b == (n_a + 1) & 0x3FFFFFF


def test_ids_sort_in_creation_order_within_and_across_milliseconds() -> None:
    made = [ids.new_id(MS + i // 50) for i in range(200)]
    made += ids.new_ids(MS + 4, 100)
    made.append(ids.new_id(MS + 4))
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_a_batch_is_the_same_as_one_id_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Including batches where the 26-bit counter wraps (as it does every 2**26 ids).
    for start in (0, 2**26 - 3, 5 * 2**26 + 7):
        monkeypatch.setattr(ids, "_counter", itertools.count(start))
        batch = ids.new_ids(MS, 6)
        monkeypatch.setattr(ids, "_counter", itertools.count(start))
        assert batch == [ids.new_id(MS) for _ in range(6)]
        assert [fields(i)[2] for i in batch] == [(start + k) & 0x3FFFFFF for k in range(6)]
    assert ids.new_ids(MS, 0) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_gets_its_own_random_prefix() -> None:
    parent = ids.new_id(MS)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id made in the same millisecond, then leave
        try:
            os.write(write, ids.new_id(MS).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = f.read()
    os.waitpid(pid, 0)
    assert fields(child)[0] == MS
    assert fields(child)[1] != fields(parent)[1]
    assert child != parent
