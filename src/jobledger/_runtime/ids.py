"""Job ids: UUIDv7-shaped strings, ordered by creation time.

48 bits of epoch milliseconds, then a per-process random prefix and a counter, so ids
made in one millisecond by one process still sort in creation order, and ids from two
processes never collide. Made from the wall clock passed in (the injected clock).
"""

from __future__ import annotations

import itertools
import os
import threading

__all__ = ["new_id"]

_lock = threading.Lock()
_counter = itertools.count()
_rand = int.from_bytes(os.urandom(6), "big")
_pid = os.getpid()


def new_id(now_ms: int) -> str:
    global _rand, _pid
    if os.getpid() != _pid:  # a forked child must not share the parent's sequence
        with _lock:
            _pid = os.getpid()
            _rand = int.from_bytes(os.urandom(6), "big")
    n = next(_counter) & 0x3FFFFFFFFFFF
    high = ((now_ms & 0xFFFFFFFFFFFF) << 16) | 0x7000 | ((_rand >> 36) & 0xFFF)
    low = (0b10 << 62) | ((_rand & 0xFFFFFFFFF) << 26) | (n & 0x3FFFFFF)
    h = f"{high:016x}{low:016x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
