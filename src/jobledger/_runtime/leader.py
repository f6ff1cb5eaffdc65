"""Leadership: one started manager per database runs the cluster-wide chores.

The leader alone rescues dead workers' rows mid-session, collects old terminal rows
(GC) and arms persistent schedules (through `ScheduleHooks.on_leadership`). Startup
recovery is *not* leader-only: each process runs it once after its quiet window, and it
is safe to run concurrently because every reset is a compare-and-set and a dead worker's
row is deleted in the same transaction that recovers its jobs.

The lease is a term-scoped row, `leader(id=1, worker_id, term, expires_at)`:

    follower --(lease free: vacant, expired, holder stopped/unregistered,
                or holder's pid gone on this host)--> take: term + 1 --> leader
    leader --renew (CAS on worker_id+term) every `renew_every`--> leader
    leader --renew matched no row / could not renew before expiry / stop()--> follower

* Acquire. A follower first reads the row without any lock (most ticks end here: a live
  leader holds it). If it looks free, `Store.take_lease` serialises the takers (SQLite: a
  cross-process lock file taken without waiting; PostgreSQL: an advisory lock) and,
  under that guard, re-reads and writes the row in one transaction; that re-read is the
  authoritative check (another process may have won in between). A busy guard means
  "try at the next tick".
* Renew. The leader extends `expires_at = now + ttl` with a compare-and-set on its
  `(worker_id, term)`; a miss means a successor took over, and it steps down at once.
  If renewing fails (e.g. `DB_BUSY`), it stays leader only while its last lease has
  more than one renew period left, then steps down locally.
* Step down. `resign()` at stop expires the row (keeping the term), so a follower takes
  over at its next tick instead of after `ttl`.
* A holder whose process is gone on this host is replaced at once; one on another host
  (or hung) after `ttl`. Times are wall-clock epoch ms from the injected clock, shared by
  every process of the database (one host, or hosts with synchronised clocks).

Limits: leadership is advisory. A leader that stalls past its expiry (a long GC pause)
may act once more before its next renew notices the lost term. Every leader duty is
therefore itself a compare-and-set or idempotent (rescue deletes the worker row it
recovers in the same transaction, schedule fires are CAS on `next_run` with an
idempotency key, GC deletes only terminal rows), so an overlap can never do work twice.
An in-memory (":memory:") database is private to its manager, which always leads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobledger._core.recovery import holder_alive
from jobledger._storage.interface import Store
from jobledger._storage.records import LeaseRow

__all__ = ["LeaderLease"]

log = logging.getLogger("jobledger.leader")


class LeaderLease:
    """This manager's view of the lease; `step()` is its only periodic entry point."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        hostname: str,
        *,
        ttl: float,
        renew_every: float,
        now_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.hostname = hostname
        self.ttl_ms = max(1, int(ttl * 1000))
        # Renew at least three times per ttl, so one skipped renew never loses the lease.
        self.renew_ms = max(1, min(int(renew_every * 1000), self.ttl_ms // 3))
        self.now_ms = now_ms
        self.term: int | None = None
        self.expires_at = 0
        self._renewed_at = 0

    @property
    def is_leader(self) -> bool:
        return self.term is not None

    @property
    def cadence(self) -> float:
        """How often `step()` should run (seconds)."""
        return self.renew_ms / 1000

    def step(self) -> bool:
        """Renew (as leader) or try to take (as follower) the lease; returns `is_leader`."""
        now = self.now_ms()
        if self.term is not None:
            self._renew(now)
        else:
            self._try_take(now)
        return self.is_leader

    def _renew(self, now: int) -> None:
        assert self.term is not None
        if now - self._renewed_at < self.renew_ms and now < self.expires_at:
            return
        expires = now + self.ttl_ms
        try:
            held = self.store.renew_lease(self.worker_id, self.term, expires_at=expires)
        except Exception:
            log.warning("could not renew the leader lease (term %s)", self.term, exc_info=True)
            if now + self.renew_ms >= self.expires_at:
                self._lose("the lease would expire before the next renew")
            return
        if not held:
            self._lose("another worker holds the lease now")
            return
        self.expires_at = expires
        self._renewed_at = now

    def _try_take(self, now: int) -> None:
        seen = self.store.read_lease()
        if seen is not None and seen.worker_id != self.worker_id and self._alive(seen, now):
            return
        self._take(now)

    def _alive(self, lease: LeaseRow, now: int) -> bool:
        return holder_alive(lease, now_ms=now, hostname=self.hostname)

    def _take(self, now: int) -> None:
        try:
            # The store serialises would-be leaders (a lock file, an advisory lock) and
            # re-reads the lease under that guard: its answer, not ours above, decides.
            term = self.store.take_lease(
                self.worker_id,
                now_ms=now,
                ttl_ms=self.ttl_ms,
                alive=lambda lease: self._alive(lease, now),
            )
        except Exception:
            log.warning("could not take the leader lease", exc_info=True)
            return
        if term is None:
            return
        self.term = term
        self.expires_at = now + self.ttl_ms
        self._renewed_at = now
        log.info("worker %s is leader (term %d)", self.worker_id, term)

    def _lose(self, why: str) -> None:
        log.warning(
            "worker %s stepped down as leader (term %s): %s", self.worker_id, self.term, why
        )
        self.term = None
        self.expires_at = 0

    def resign(self) -> None:
        """Step down and free the lease for a follower's next tick (at stop)."""
        term, self.term = self.term, None
        self.expires_at = 0
        if term is None:
            return
        try:
            self.store.resign_lease(self.worker_id, term)
        except Exception:
            log.warning("could not resign the leader lease; it expires by itself", exc_info=True)
