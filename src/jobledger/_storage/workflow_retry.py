"""The re-run of a failed workflow (`jobs.retry_workflow`), planned from its rows alone.

Invariants of the plan (DESIGN.md §8.8):

* Only a workflow whose every job is terminal is re-run; one with nothing failed or
  cancelled has nothing to re-run. The old rows are never touched.
* A step is re-run whole when any of its jobs did not complete (an `add_many` step's
  outputs are read as one ordered list, so its jobs stay together); a step whose every
  job completed is not re-run.
* Each re-run job is a fresh row as `jobs.retry` makes one (type, queue, priority,
  payload, attempts, timeout, metadata; `retry_of` names the old job), in the new
  workflow, under its old step name, in the old order.
* An edge between two re-run steps is written anew and counts in the downstream job's
  `upstream_left`; an edge from a completed job is kept pointing at that old job, so
  `ctx.upstream` reads its output, and counts in nothing (that job has finished). GC
  keeps such a job while a job that reads it has not ended.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobledger._core import ids
from jobledger._storage import layout as L
from jobledger._storage.interface import TERMINAL, JobRow, NewWorkflow, WorkflowHead, retry_row

__all__ = ["NOTHING_TO_RETRY", "STILL_RUNNING", "plan_workflow_retry"]

STILL_RUNNING = "running"
NOTHING_TO_RETRY = "completed"


def plan_workflow_retry(
    old: WorkflowHead,
    rows: Sequence[JobRow],
    edges: Sequence[tuple[str, str, str, bool]],
    *,
    enqueued_by: str,
    now_ms: int,
) -> NewWorkflow | str:
    """The new workflow that re-runs `old`'s failed and cancelled steps, or the reason
    there is none (`STILL_RUNNING`, `NOTHING_TO_RETRY`)."""
    if any(r[L.C_STATUS] not in TERMINAL for r in rows):
        return STILL_RUNNING
    rerun_steps = {r[L.C_STEP] for r in rows if r[L.C_STATUS] != "completed"}
    if not rerun_steps:
        return NOTHING_TO_RETRY
    workflow_id = ids.new_id(now_ms)
    again = [r for r in rows if r[L.C_STEP] in rerun_steps]
    new_of: dict[str, str] = dict(
        zip((r[L.C_ID] for r in again), ids.new_ids(now_ms, len(again)), strict=True)
    )
    left = dict.fromkeys(new_of.values(), 0)
    new_edges: list[tuple[str, str, str, bool]] = []
    for up, down, policy, many in edges:
        if down not in new_of:
            continue  # into a completed step, which is not re-run
        if up in new_of:
            new_edges.append((new_of[up], new_of[down], policy, many))
            left[new_of[down]] += 1
        else:
            new_edges.append((up, new_of[down], policy, many))
    new_rows: list[JobRow] = []
    for r in again:
        fresh = retry_row(r, new_of[r[L.C_ID]], None, enqueued_by, now_ms)
        status = "waiting" if left[fresh[L.C_ID]] else "pending"
        new_rows.append(
            (*fresh[: L.C_STATUS], status, *fresh[L.C_STATUS + 1 : L.C_WORKFLOW],
             workflow_id, r[L.C_STEP])
        )  # fmt: skip
    return NewWorkflow(
        workflow_id,
        old.name,
        now_ms,
        new_rows,
        [left[r[L.C_ID]] for r in new_rows],
        new_edges,
        retry_of=old.id,
    )
