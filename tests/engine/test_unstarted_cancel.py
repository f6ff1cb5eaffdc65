"""An attempt whose task is cancelled before its first step never runs `Engine._run`,
so `_run`'s own last step (`ensure_outcome`, which interrupts an attempt that submitted
nothing) never runs either. A task has no done callback (one a job cost the drain about
10,000 instructions: docs/benchmarks.md, twenty-eighth round); instead `Engine.abort`
adds one to a task it cancels before its start, and the heartbeat settles one that
something else cancelled (`Engine.settle_unstarted`: a framework cancelling every task).
Either way the handler never runs, the attempt leaves the engine, its claim leaves the
claim-ahead count (`_runtime/ahead.py`), and the interrupted row goes back to `pending`
(recovery "retry"; its `scheduled_at`, an hour ahead here, keeps it from running again
within the test)."""

from __future__ import annotations

import asyncio

import jobledger as jl
from tests.conftest import db_rows, sql_for
from tests.engine import hand_claim, recording_manager
from tests.recovery import arun

T = jl.JobType("unstarted.t", int)


def _cancel_before_start(db: str, *, by_abort: bool) -> tuple[list[int], list[str], int]:
    """Hand the engine a claim of a row this worker runs, cancel the task it makes in the
    same turn of the loop (by `abort`, or directly), then wait for the row to leave
    `running`. Returns the handler's runs, the job's statuses as seen and the claim-ahead
    count's change."""
    ran: list[int] = []

    async def body() -> tuple[list[str], int]:
        # Through `abort` nothing waits for the heartbeat (an hour away then).
        beat = 3600.0 if by_abort else 0.05
        jobs = recording_manager(db, T, ran, poll_interval=0.02, heartbeat_interval=beat)
        async with jobs:
            await jobs.recovery_done
            engine = jobs._engine
            before = engine.ahead.unstarted
            h = hand_claim(jobs, db, T, owner=jobs.worker_id)
            attempt = engine.inflight[h.id]
            assert attempt.task is not None
            assert attempt.claimed_at  # not started yet
            if by_abort:
                engine.abort(attempt, "shutdown", "the test's cancel")
            else:
                attempt.task.cancel()
            seen: list[str] = []
            for _ in range(100):  # the interrupt's write: at most a heartbeat away
                await asyncio.sleep(0.02)
                row = db_rows(db, sql_for(db, "SELECT status FROM jobs WHERE id = ?"), (h.id,))
                status = str(row[0][0])
                if not seen or seen[-1] != status:
                    seen.append(status)
                if status != "running":
                    break
            for _ in range(100):  # the flush that wrote it releases the attempt
                if h.id not in engine.inflight:
                    break
                await asyncio.sleep(0.01)
            assert h.id not in engine.inflight
            return seen, engine.ahead.unstarted - before

    seen, unstarted = arun(body)
    return ran, seen, unstarted


def test_a_task_abort_cancels_before_its_first_step_is_settled(db: str) -> None:
    ran, seen, unstarted = _cancel_before_start(db, by_abort=True)
    assert seen[-1] == "pending", seen
    assert ran == []  # the cancelled task never ran the handler
    assert unstarted == 0


def test_a_task_cancelled_by_someone_else_before_its_first_step_is_settled(db: str) -> None:
    ran, seen, unstarted = _cancel_before_start(db, by_abort=False)
    assert seen[-1] == "pending", seen
    assert ran == []
    assert unstarted == 0
