"""Job ids: the UUIDv8 layout, the row key each names, creation order, the carry past a
millisecond's sequence, and a fresh sequence per fork."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from jobledger._core import ids

MS = 1_700_000_000_123


def fields(job_id: str) -> tuple[int, int, int]:
    """(milliseconds, sequence, random bits) of an id, checking the fixed bits."""
    u = uuid.UUID(job_id)
    assert str(u) == job_id
    assert u.version == 8
    assert u.variant == uuid.RFC_4122
    n = u.int
    seq = ((n >> 64) & 0xFFF) << 8 | (n >> 54) & 0xFF
    return n >> 80, seq, n & ((1 << 54) - 1)


def test_layout_is_milliseconds_sequence_then_random() -> None:
    a, b = ids.new_id(MS), ids.new_id(MS)
    (ms_a, seq_a, rand_a), (ms_b, seq_b, rand_b) = fields(a), fields(b)
    assert ms_a == ms_b == MS
    assert seq_b == seq_a + 1
    assert rand_a == rand_b  # per process
    assert ids.row_key(a) == MS << 20 | seq_a
    assert ids.row_key(b) == ids.row_key(a) + 1  # type: ignore[operator]


def test_a_new_millisecond_starts_its_sequence_in_the_lower_half() -> None:
    starts = [fields(ids.new_id(MS + 1_000 + i))[1] for i in range(200)]
    assert all(s < 2**19 for s in starts)
    assert len(set(starts)) > 150  # random, not a counter carried over


def test_ids_and_keys_sort_in_creation_order() -> None:
    made = [ids.new_id(MS + 10 + i // 50) for i in range(200)]
    made += ids.new_ids(MS + 14, 100)
    made.append(ids.new_id(MS + 14))
    assert made == sorted(made)
    keys = [ids.row_key(i) for i in made]
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert len(set(keys)) == len(made)


def test_a_batch_takes_consecutive_keys_like_single_ids() -> None:
    first = ids.new_keyed_id(MS + 20)[0]
    batch = ids.new_ids(MS + 20, 6)
    last = ids.new_keyed_id(MS + 20)[0]
    assert [ids.row_key(i) for i in batch] == list(range(first + 1, first + 7))
    assert last == first + 7
    assert ids.new_ids(MS, 0) == []


def test_a_sequence_past_its_millisecond_carries_and_keeps_counting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As if 2**20 - 3 ids had been made in this millisecond already.
    monkeypatch.setattr(ids, "_last_ms", MS + 30)
    monkeypatch.setattr(ids, "_end", (MS + 30) << 20 | (2**20 - 3))
    batch = ids.new_ids(MS + 30, 6)
    assert [fields(i)[0] for i in batch] == [MS + 30] * 3 + [MS + 31] * 3
    assert [fields(i)[1] for i in batch] == [2**20 - 3, 2**20 - 2, 2**20 - 1, 0, 1, 2]
    assert ids.row_key(ids.new_id(MS + 31)) > ids.row_key(batch[-1])  # type: ignore[operator]
    # A carry past any random start of the next millisecond: its ids keep counting up.
    monkeypatch.setattr(ids, "_last_ms", MS + 32)
    monkeypatch.setattr(ids, "_end", (MS + 33) << 20 | (2**19 + 5))
    assert ids.new_keyed_id(MS + 33)[0] == (MS + 33) << 20 | (2**19 + 5)


def test_reseat_starts_the_millisecond_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_random", random.Random(7))
    a = ids.new_id(MS + 40)
    ids.reseat()
    b = ids.new_id(MS + 40)
    expected = random.Random(7)
    first, second = expected.getrandbits(19), expected.getrandbits(19)
    assert (fields(a)[1], fields(b)[1]) == (first, second)


def test_row_key_is_none_for_anything_not_made_here() -> None:
    v7 = "018bcfe5-687b-7466-b0dc-1a7139bcd10d"  # an id made before schema 4
    good = ids.new_id(MS)
    signed = "+" + good[1:]
    spaced = " " + good[1:]
    bad_hex = "g" + good[1:]
    others = (v7, "", "job-1", good[:-1], good + "0", "x" * 36, signed, spaced, bad_hex)
    for other in (*others, good.replace("-", "_")):
        assert ids.row_key(other) is None, other
    bad_variant = good[:19] + "0" + good[20:]
    assert ids.row_key(bad_variant) is None


def test_clock_outside_the_key_range_is_refused() -> None:
    assert ids.row_key(ids.new_id(0)) is not None
    assert ids.row_key(ids.new_id(ids.MAX_MS)) is not None
    for bad in (-1, ids.MAX_MS + 1):
        with pytest.raises(ValueError, match="job ids need a clock between"):
            ids.new_id(bad)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_gets_its_own_random_bits_and_sequence() -> None:
    parent = ids.new_id(MS + 50)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id made in the same millisecond, then leave
        try:
            os.write(write, ids.new_id(MS + 50).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = f.read()
    os.waitpid(pid, 0)
    assert fields(child)[0] == MS + 50
    assert fields(child)[2] != fields(parent)[2]
    # Not the parent's next id: the child started the millisecond at its own point.
    assert ids.row_key(child) != ids.row_key(parent) + 1  # type: ignore[operator]


def test_a_clock_that_goes_back_continues_that_milliseconds_sequence() -> None:
    b = ids.new_id(MS + 60)
    c = ids.new_id(MS + 59)
    d = ids.new_id(MS + 60)
    assert fields(d)[0] == MS + 60
    assert d > b
    assert ids.row_key(d) == ids.row_key(b) + 1  # type: ignore[operator]
    assert c < b


def test_key_range_holds_the_key_of_every_id_that_starts_with_the_prefix() -> None:
    rnd = random.Random(25)
    for _ in range(500):
        key, job_id = ids.new_keyed_id(rnd.randrange(0, ids.MAX_MS + 1))
        for n in range(4, len(job_id) + 1):
            for prefix in (job_id[:n], job_id[:n].upper()):
                found = ids.key_range(prefix)
                assert found is not None, (job_id, n)
                assert found[0] <= key <= found[1], (job_id, n)


def test_key_range_is_narrow_for_a_long_prefix_and_none_for_no_id() -> None:
    key, job_id = ids.new_keyed_id(1_764_590_400_000)
    first, last = ids.key_range(job_id[:23]) or (0, -1)
    assert first <= key <= last
    assert last - first < 64  # only the random bits of the variant digits are open
    assert ids.key_range(job_id[:13]) == (key >> 20 << 20, (key >> 20 << 20) | 0xFFFFF)
    for nothing in ("zzzz", "01a2305bx", job_id[:14] + "7", job_id[:19] + "c", "ffffffff-ffff"):
        assert ids.key_range(nothing) is None, nothing
