"""How far ahead of its event loop a process claims.

A claimed job counts as running in SQL, against its queue's cap and the global cap, from
the claim's commit. A process whose handlers hold the CPU (an `async def` that computes
without awaiting) runs what it claimed one job at a time, so a batch it claimed waits for
the loop while the other processes, seeing the caps full, idle: two processes ran 2 ms
CPU jobs no faster than one (docs/benchmarks.md, "CPU-bound jobs across processes").

Invariant: a claim never leaves more than `budget` of this process's claimed jobs waiting
for their first step. The budget follows the loop's start lag (the time from a job's
claim to its handler's first step, real time, never the injected clock): it halves when
a job waited longer than LAG_HIGH (at most once per LAG_HIGH, so one slow batch is one
cut) and grows by one for each job that started within LAG_LOW, up to `ceiling` (what
the process may run at once). At the ceiling it never binds: every claimed job is also
in flight, and the in-flight limit is at least as tight. It limits claims ahead of the
loop, never how many jobs run at once: jobs that have started and await keep their slots.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

__all__ = ["LAG_HIGH", "LAG_LOW", "ClaimAhead"]

# A job that waited this long for the loop after its claim: this process claimed more
# than it can start. About 20 ms of work ahead keeps a CPU-bound loop busy between two
# claims (a claim costs ~1 ms) while leaving the other processes the rest of the slots.
LAG_HIGH = 0.020
# Started this promptly: the loop keeps up with what it claims.
LAG_LOW = 0.002


class ClaimAhead:
    __slots__ = ("_cut_at", "_now", "budget", "ceiling", "held", "late", "unstarted")

    def __init__(self, ceiling: int, now: Callable[[], float] = perf_counter) -> None:
        self._now = now
        self.ceiling = ceiling
        self.budget = float(ceiling)
        self.unstarted = 0  # claimed here, first step not yet run
        self.held = False  # a claim was cut short by the budget: claim again once started
        self.late = False  # the job `started` last saw waited past LAG_HIGH
        self._cut_at = -1.0

    def set_ceiling(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.budget = min(self.budget, float(ceiling))

    def limit(self, free: int) -> int:
        """Of `free` jobs a claim may take by the caps, those the loop can start promptly.
        Cut short, the claim is retried once every claimed job here has started."""
        room = int(self.budget) - self.unstarted
        if room < free:
            self.held = True
            return max(room, 0)
        return free

    def claimed(self) -> float:
        """One job claimed; returns its claim time for `started`."""
        self.unstarted += 1
        return self._now()

    def started(self, claimed_at: float) -> bool:
        """The job claimed at `claimed_at` runs its first step. True when a claim cut
        short by the budget may go now (nothing claimed here waits any more)."""
        self.unstarted -= 1
        now = self._now()
        lag = now - claimed_at
        self.late = late = lag > LAG_HIGH
        if late:
            if now - self._cut_at > LAG_HIGH:
                self.budget = max(1.0, self.budget / 2)
                self._cut_at = now
        elif lag < LAG_LOW and self.budget < self.ceiling:
            self.budget += 1.0
        return self._release()

    def dropped(self) -> bool:
        """A claimed job never started (its task was cancelled first)."""
        self.unstarted -= 1
        return self._release()

    def _release(self) -> bool:
        if self.held and self.unstarted == 0:
            self.held = False
            return True
        return False
