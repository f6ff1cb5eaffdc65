"""Job ids: UUIDv7-shaped strings, ordered by creation time.

48 bits of epoch milliseconds, then a per-process random prefix and a counter, so ids
made in one millisecond by one process still sort in creation order, and ids from two
processes never collide. Made from the wall clock passed in (the injected clock).

Layout (hex digits of the 128-bit value): 12 of milliseconds, the version nibble 7,
3 of random, then the variant bits 10, 34 more random bits and a 26-bit counter. Only
the last 7 digits change within a millisecond (the counter and 2 random bits), so the
rest is formatted once per millisecond and cached: an id costs one small format.
"""

from __future__ import annotations

import itertools
import os
import threading

__all__ = ["new_id", "new_ids"]

_COUNTER_MASK = 0x3FFFFFF  # 26 bits

_lock = threading.Lock()
_counter = itertools.count()
_rand = 0
_pid = 0
_tail_base = 0  # the 2 random bits that share the last 7 hex digits with the counter
_low_head = ""  # "xxxx-xxxxx": the constant part of the low 64 bits
# (ms, prefix up to the counter digits); one tuple, so a reader on another thread
# always sees a matching pair.
_cache: tuple[int, str] = (-1, "")


def _reseed() -> None:
    global _rand, _pid, _tail_base, _low_head, _cache
    with _lock:
        _pid = os.getpid()
        _rand = int.from_bytes(os.urandom(6), "big")
        low = (0b10 << 62) | ((_rand & 0xFFFFFFFFF) << 26)
        text = f"{low:016x}"
        _low_head = f"{text[:4]}-{text[4:9]}"
        _tail_base = low & 0xFFFFFFF & ~_COUNTER_MASK
        _cache = (-1, "")


_reseed()
# A forked child must not share the parent's sequence (the counter is copied with it).
os.register_at_fork(after_in_child=_reseed)


def _prefix(now_ms: int) -> str:
    global _cache
    if os.getpid() != _pid:  # a fork that bypassed os.register_at_fork's hooks
        _reseed()
    high = ((now_ms & 0xFFFFFFFFFFFF) << 16) | 0x7000 | ((_rand >> 36) & 0xFFF)
    h = f"{high:016x}"
    prefix = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{_low_head}"
    _cache = (now_ms, prefix)
    return prefix


def new_id(now_ms: int) -> str:
    ms, prefix = _cache
    if ms != now_ms:
        prefix = _prefix(now_ms)
    return f"{prefix}{_tail_base | (next(_counter) & _COUNTER_MASK):07x}"


def new_ids(now_ms: int, n: int) -> list[str]:
    """`n` ids of one millisecond, in creation order (as `n` calls of `new_id`)."""
    if n <= 0:
        return []
    ms, prefix = _cache
    if ms != now_ms:
        prefix = _prefix(now_ms)
    # `islice` takes the n counter values in one C call: no other thread's id can come
    # between them, so they are consecutive and can be formatted from a range.
    last = next(itertools.islice(_counter, n - 1, None)) & _COUNTER_MASK
    first = last - n + 1
    if first >= 0:
        base = _tail_base
        return [f"{prefix}{v:07x}" for v in range(base + first, base + last + 1)]
    # The 26-bit counter wrapped inside this batch (once per 67M ids), as `new_id` would.
    return [f"{prefix}{_tail_base | (v & _COUNTER_MASK):07x}" for v in range(first, last + 1)]
