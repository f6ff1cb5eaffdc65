"""Job ids: UUIDv8 strings, ordered by creation time, each naming its SQLite rowid.

An id's first bits are a 63-bit *row key*, `(milliseconds << 20) | sequence`, and the
SQLite backend stores each row under that key as its rowid: a lookup by id is a rowid
lookup, so the id needs no index of its own (schema 4). `row_key` reads it back.

Invariants:
* Within one millisecond the sequence counts up from a random start in the lower half
  of its 20 bits, and past 2**20 it carries into the millisecond (a batch of over half a
  million ids in one millisecond). A clock that goes back to one of the last 1,024
  milliseconds used continues that millisecond's sequence. So within a process, text
  order is key order is creation order among ids of one millisecond, and one process
  never makes a key twice but by a carry meeting a later millisecond's random start.
* Keys from two processes can meet; the SQLite store sees the rowid conflict and makes
  fresh ids for that statement (`store._insert_keyed`).

Layout (hex digits of the 128-bit value): 12 of milliseconds, the version nibble 8, 3 of
the sequence's high 12 bits; then the variant bits 10, the sequence's low 8 bits, and 54
bits random per process. Milliseconds must be below 2**43 (the year 2248) for the key
to fit in a signed 64-bit rowid. Made from the wall clock passed in (the injected clock).
"""

from __future__ import annotations

import os
import random
import threading

__all__ = ["key_range", "new_id", "new_ids", "new_keyed_id", "reseat", "row_key"]

SEQ_BITS = 20
MAX_MS = (1 << 43) - 1

_lock = threading.Lock()
_last_ms = -1
_end = 0  # the key after the last one reserved
# Where the sequences of the milliseconds used before the last one ended, so a clock that
# goes back (a fake clock, a stepped wall clock) continues them: ids made later still sort
# later. Only the most recent `_REMEMBERED` are kept.
_ends: dict[int, int] = {}
_REMEMBERED = 1024
_tail = ""  # "-" and the last 12 random hex digits
_pid = 0
_random = random.Random()
# The text of an id is looked up in parts: the 4,096 values of the sequence's high bits
# ("hhh-"), and the 256 of its low byte with this process's variant byte ("vvvv").
_HIGH = [f"{h:03x}-" for h in range(4096)]
_low: list[str] = []
# (milliseconds, "mmmmmmmm-mmmm-8") of the last id made; one tuple, so a reader on another
# thread always sees a matching pair.
_prefix: tuple[int, str] = (-1, "")


def _reseed() -> None:
    global _last_ms, _end, _tail, _pid
    with _lock:
        _pid = os.getpid()
        _random.seed(os.urandom(16))
        rand = _random.getrandbits(54)
        variant = 0x8000 | (rand >> 48)  # the variant bits 10, then 6 random bits
        _low[:] = [f"{variant | b << 6:04x}" for b in range(256)]
        _tail = f"-{rand & 0xFFFFFFFFFFFF:012x}"
        _last_ms = -1  # a child must not continue its parent's sequence
        _end = 0
        _ends.clear()


_reseed()
os.register_at_fork(after_in_child=_reseed)


def _take(now_ms: int, n: int) -> int:
    """Reserve `n` consecutive keys for `now_ms`; returns the first."""
    global _last_ms, _end
    if not 0 <= now_ms <= MAX_MS:
        raise ValueError(f"job ids need a clock between 0 and {MAX_MS} ms, got {now_ms}")
    if now_ms != _last_ms and os.getpid() != _pid:
        _reseed()  # a fork that bypassed os.register_at_fork's hooks
    with _lock:
        if now_ms != _last_ms:
            if _last_ms >= 0:
                _ends[_last_ms] = _end
                if len(_ends) > _REMEMBERED:
                    del _ends[next(iter(_ends))]
            start = _ends.pop(now_ms, None)
            if start is None:
                start = (now_ms << SEQ_BITS) + _random.getrandbits(SEQ_BITS - 1)
                # After a batch that carried past its millisecond, keep counting up.
                if now_ms > _last_ms:
                    start = max(start, _end)
            _end = start
            _last_ms = now_ms
        first = _end
        _end += n
    return first


def _text(key: int) -> str:
    global _prefix
    ms, prefix = _prefix
    if key >> SEQ_BITS != ms:
        ms = key >> SEQ_BITS
        prefix = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-8"
        _prefix = (ms, prefix)
    return f"{prefix}{_HIGH[(key >> 8) & 0xFFF]}{_low[key & 0xFF]}{_tail}"


def reseat() -> None:
    """Start the next id at a fresh random point of its millisecond's sequence (after a
    row key turned out taken: the one after it likely is too)."""
    global _last_ms, _end
    with _lock:
        _last_ms = -1
        _end = 0
        _ends.clear()


def new_id(now_ms: int) -> str:
    return _text(_take(now_ms, 1))


def new_keyed_id(now_ms: int) -> tuple[int, str]:
    """`new_id` with its row key."""
    key = _take(now_ms, 1)
    return key, _text(key)


def new_ids(now_ms: int, n: int) -> list[str]:
    """`n` ids of one millisecond, in creation order (as `n` calls of `new_id`)."""
    if n <= 0:
        return []
    first = _take(now_ms, n)
    return [_text(k) for k in range(first, first + n)]


# `row_key` reads an id in three parts ("mmmmmmmm-mmmm-" "8hhh-" "vvvv") by lookup: a
# parse of the hex costs twice as much, and the SQLite store reads every new row's key.
_HIGH_OF = {f"8{h:03x}-": h << 8 for h in range(4096)}
_LOW_OF = {f"{v:04x}": (v >> 6) & 0xFF for v in range(0x8000, 0xC000)}  # variant 10
# ("mmmmmmmm-mmmm-", its milliseconds << SEQ_BITS) of the last id read.
_ms_read: tuple[str, int] = ("", 0)


def row_key(job_id: str) -> int | None:
    """The row key a job id names, or None for any other string (an id made before
    schema 4, a typo). Two ids may share a key only if they differ elsewhere, so a
    lookup also compares the whole id."""
    global _ms_read
    if len(job_id) != 36:
        return None
    high = _HIGH_OF.get(job_id[14:19])
    low = _LOW_OF.get(job_id[19:23])
    if high is None or low is None:
        return None
    head = job_id[:14]
    text, ms_key = _ms_read
    if head != text:
        if head[8] != "-" or head[13] != "-":
            return None
        digits = head[:8] + head[9:13]
        if not (digits.isascii() and digits.isalnum()):  # int() would take " +_" too
            return None
        try:
            ms = int(digits, 16)
        except ValueError:
            return None
        if ms > MAX_MS:
            return None
        ms_key = ms << SEQ_BITS
        _ms_read = (head, ms_key)
    return ms_key | high | low


_HEX = frozenset("0123456789abcdef")
_DASHES = (8, 13, 18)
_KEYED = 23  # the characters of an id that its row key is read from


def key_range(prefix: str) -> tuple[int, int] | None:
    """The row keys an id that starts with `prefix` (compared case-insensitively) can
    have, as an inclusive range, or None when no id `new_id` makes starts with it.
    Only the first 23 characters carry the key; the rest of the prefix narrows nothing
    here (the caller still compares the ids)."""
    text = prefix.lower()[:_KEYED]
    for i, ch in enumerate(text):
        if i in _DASHES:
            ok = ch == "-"
        elif i == 14:
            ok = ch == "8"
        elif i == 19:
            ok = ch in "89ab"  # the variant bits 10
        else:
            ok = ch in _HEX
        if not ok:
            return None
    low = high = text
    for i in range(len(text), _KEYED):
        if i in _DASHES:
            low, high = low + "-", high + "-"
        elif i == 14:
            low, high = low + "8", high + "8"
        elif i == 19:
            low, high = low + "8", high + "b"
        else:
            low, high = low + "0", high + "f"
    tail = "-000000000000"
    first = row_key(low + tail)
    if first is None:  # its milliseconds are past MAX_MS
        return None
    last = row_key(high + tail)
    return first, (MAX_MS << SEQ_BITS) | ((1 << SEQ_BITS) - 1) if last is None else last
