"""Which queues this process knows, and which it has written work to.

The table is the truth: `queues` rows carry a sequence number, and `follow()` reads only
the rows past the highest one seen, so a process that learns of a new queue (another
process enqueued to it) pays one indexed read. `touched` remembers the queues this
process enqueued pending work to before it was started, so `start()` kicks exactly those
(the engine has no dispatcher for them yet). Thread-safe: producers call `touch` from
any thread; everything else runs on the engine's loop.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobledger._storage.interface import Store

if TYPE_CHECKING:
    from jobledger._runtime.engine import Engine

__all__ = ["QueueBook"]


class QueueBook:
    __slots__ = ("_engine", "_lock", "_store", "_touched", "seq")

    def __init__(self, store: Store, engine: Engine) -> None:
        self._store = store
        self._engine = engine
        self.seq = 0
        self._touched: dict[str, str] = {}
        self._lock = threading.Lock()

    def touch(self, queue: str, type_name: str) -> None:
        # Read without the lock: the common case (already touched) writes nothing.
        if self._touched.get(queue) != type_name:
            with self._lock:
                self._touched[queue] = type_name

    def touch_many(self, kicks: Mapping[str, str]) -> None:
        with self._lock:
            self._touched.update(kicks)

    def touched(self) -> dict[str, str]:
        with self._lock:
            return dict(self._touched)

    def load_all(self) -> None:
        """Give the engine a dispatcher for every queue in the table."""
        for seq, name, type_name in self._store.queues_since(0):
            self.seq = max(self.seq, seq)
            self._engine.ensure_queue(name, type_name)

    def follow(self) -> None:
        """Only the queues created since the last read."""
        for seq, name, type_name in self._store.queues_since(self.seq):
            self.seq = seq
            self._engine.ensure_queue(name, type_name)

    def kick_known(self, name: str) -> None:
        """Kick `name`, creating its dispatcher first if the table has the queue."""
        engine = self._engine
        if name not in engine.queues:
            for seq, qname, type_name in self._store.queues_since(0):
                if qname == name:
                    engine.ensure_queue(qname, type_name)
                    self.seq = max(self.seq, seq)
                    break
        engine.kick(name)
