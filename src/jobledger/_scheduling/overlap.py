"""Overlap policies: whether a natural fire is enqueued while earlier jobs of its schedule
have not ended. Pure; the storage asks it inside the fire's write transaction
(`_storage/schedule_ops.py`), from the schedule's jobs as that transaction sees them, so
the decision is the fire's own and two leaders can never both take it.

| policy       | nothing unfinished | a job unfinished, none held back | one held back |
|--------------|--------------------|----------------------------------|---------------|
| `allow`      | enqueue            | enqueue                          | enqueue       |
| `skip`       | enqueue            | skip                             | skip          |
| `buffer_one` | enqueue            | hold (written `waiting`)         | skip          |

"Unfinished" is pending, delayed (a retry's backoff, a jittered fire) or running, and
also a workflow step that waits. A held-back fire is a `waiting` job of the schedule
outside any workflow; the write that ends the schedule's last unfinished job makes it
`pending` (the release trigger of SQLite migration 14 / PostgreSQL 10). A skipped fire is
still a fire of the calendar: `next_run` moves on, it counts toward a cron `limit`, and
`skipped_count` counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from jobledger._storage.schedule_ops import OverlapDecision
from jobledger.errors import JobValidationError

__all__ = ["OVERLAP_POLICIES", "Overlap", "decide", "validate_overlap"]

Overlap: TypeAlias = Literal["allow", "skip", "buffer_one"]
OVERLAP_POLICIES: tuple[Overlap, ...] = ("allow", "skip", "buffer_one")


def validate_overlap(value: object) -> Overlap:
    for policy in OVERLAP_POLICIES:
        if value == policy and isinstance(value, str):
            return policy
    raise JobValidationError(
        f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, not {value!r}",
        code="JOB_INVALID_OPTION",
        params={"overlap": repr(value)[:200]},
    )


def decide(policy: str, live: Sequence[tuple[str, bool]]) -> OverlapDecision:
    """`live`: the schedule's jobs that have not ended, as `(status, held_back)`."""
    if policy == "skip":
        return "skip" if live else "enqueue"
    if policy == "buffer_one":
        held = any(status == "waiting" and back for status, back in live)
        if held:
            return "skip"
        return "hold" if live else "enqueue"
    return "enqueue"
