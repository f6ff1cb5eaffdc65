"""The seven-state machine: the only place its edges are written down.

```mermaid
stateDiagram-v2
    [*] --> pending: enqueue (due now)
    [*] --> delayed: enqueue (run_at / delay in the future)
    delayed --> pending: promote (scheduled_at <= now)
    pending --> running: claim
    running --> completed: handler returned
    running --> delayed: retryable failure, attempts left (attempt + 1)
    running --> failed: permanent failure or attempts exhausted
    running --> cancelled: cancel / shutdown (abandon) / recovery
    pending --> cancelled: cancel / recovery
    delayed --> cancelled: cancel / recovery
    running --> pending: shutdown (retry, singleton) / rescue of a dead worker's row
    [*] --> waiting: workflow enqueue (upstream steps unfinished) / a held-back fire
    waiting --> pending: last upstream job finished (completed, or policy run) / held fire freed
    waiting --> cancelled: an upstream job failed or was cancelled (policy cancel) / cancel
```

Terminal states (completed, failed, cancelled) are never left. Storage applies every edge
as a compare-and-set on the expected status (and, for a running row, on the claim:
worker id and attempt), so the first terminal write wins. `docs/design/state-machine.md`
carries the same diagram; a test checks that the two agree with `EDGES`.
"""

from __future__ import annotations

from jobledger._types import TERMINAL_STATUSES, JobStatus

__all__ = ["EDGES", "INITIAL", "can_transition", "is_terminal"]

P, D, R = JobStatus.PENDING, JobStatus.DELAYED, JobStatus.RUNNING
C, F, X = JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED
W = JobStatus.WAITING

INITIAL: frozenset[JobStatus] = frozenset({P, D, W})

EDGES: frozenset[tuple[JobStatus, JobStatus]] = frozenset(
    {
        (D, P),
        (P, R),
        (R, C),
        (R, D),
        (R, F),
        (R, X),
        (P, X),
        (D, X),
        (R, P),
        (W, P),
        (W, X),
    }
)


def can_transition(source: JobStatus, target: JobStatus) -> bool:
    return (source, target) in EDGES


def is_terminal(status: JobStatus | str) -> bool:
    return status in TERMINAL_STATUSES
