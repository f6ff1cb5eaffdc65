"""A job's attempts: the stored records plus the one its row tells (both backends).

Invariant: the job row already holds everything about the attempt that ended it (its
number, worker, claim time, finish time, status and error), so that attempt is stored in
`job_attempts` only when the row cannot tell it all: its `ctx.logger` lines; a retry
that met a cancel request (the row holds the cancel's error, the attempt ended in its
own); a rescue's cancel of a dead worker's running attempt (lost, not cancelled). Every
other ended attempt is stored: retries (the row moves on to the next number), and the
unspent ones, interrupted by a shutdown or lost with their worker (the row goes back to
pending). A job's first and only attempt, the common case, so costs the finalize nothing
(docs/design/storage.md, "Attempts").

Stored records carry `n`: the attempt number for a record that ends an attempt, the
job's next negative number (-1, -2, ...) for an unspent one. Oldest first is by attempt
number, an attempt's unspent runs before the record that ended it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow
from jobledger._storage.records import AttemptRow

__all__ = ["StoredAttempt", "with_final_attempt"]

# (n, attempt, worker_id, started_at, finished_at, outcome, error, logs)
StoredAttempt = Sequence[Any]
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


def with_final_attempt(row: JobRow | None, stored: Sequence[StoredAttempt]) -> list[AttemptRow]:
    """The stored records (oldest first), then the attempt the row ended with, unless a
    stored record already tells it. None for `row`: the job is gone, and so are they."""
    if row is None:
        return []
    out = [AttemptRow(*r[1:]) for r in stored]
    status, attempt = row[L.C_STATUS], row[L.C_ATTEMPT]
    if status not in _TERMINAL or row[L.C_STARTED_AT] is None:
        return out  # not ended, or ended without running (cancelled while waiting)
    if any(r[0] >= 0 and r[1] == attempt for r in stored):
        return out
    worker, started, finished = row[L.C_WORKER], row[L.C_STARTED_AT], row[L.C_FINISHED_AT]
    out.append(AttemptRow(attempt, worker, started, finished, str(status), row[L.C_ERROR], None))
    return out
