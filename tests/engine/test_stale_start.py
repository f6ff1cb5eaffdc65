"""A claim whose handler is about to start after a stall longer than `worker_timeout` is
checked against its row first: rescued meanwhile (the chaos run's finding 3 in
docs/reliability.md: a frozen worker ran, on SIGCONT, the jobs it had claimed just before
the freeze, which another worker was running by then), it is not run here. The check is
made where the claim is taken (`Engine._start`) and again at the task's first step
(`Engine._run`): a freeze right after the claim falls between the two (bench/chaos.py,
SQLite seed 2, eighth session: 16 handlers under a global cap of 8)."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

import jobledger as jl
from tests.conftest import db_rows, sql_for
from tests.engine import hand_claim, recording_manager
from tests.recovery import arun

T = jl.JobType("stale.t", int)
WORKER_TIMEOUT = 0.5


def _claim(
    db: str, *, age_ms: int, stall: float, rescued: bool
) -> tuple[list[int], str | None, tuple[str, str]]:
    """Hand the engine a claim made `age_ms` ago of a row running under this worker, or
    (`rescued`) under another live worker by now; then hold the loop for `stall` seconds
    before the claim's task takes its first step, as a SIGSTOP right after the claim
    does. Returns what the handler ran, the job's final status (None: it did not finish
    within 0.5 s) and its row's (status, worker) at the end."""
    ran: list[int] = []

    async def body() -> tuple[str | None, tuple[str, str]]:
        jobs = recording_manager(db, T, ran, poll_interval=0.02, worker_timeout=WORKER_TIMEOUT)
        async with jobs:
            await jobs.recovery_done
            engine = jobs._engine
            owner = jobs.worker_id
            if rescued:
                # A live worker (its heartbeat an hour ahead, so no rescue tick takes its
                # row back within the test) has the job now.
                owner = "other"
                now = engine.now_ms()
                jobs._store.register_worker(owner, socket.gethostname(), os.getpid(), [], now)
                jobs._store.heartbeat(owner, now + 3_600_000)
            h = hand_claim(jobs, db, T, owner=owner, age_ms=age_ms)
            qu = engine.queues[T.name]
            time.sleep(stall)  # noqa: ASYNC251 (the stall itself, on the loop's thread)
            try:
                snap = await asyncio.wait_for(h.finished, 0.5)
                status: str | None = str(snap.status)
            except TimeoutError:
                await asyncio.sleep(0.1)  # its outcome's (fenced-out) finalize
                assert h.id not in engine.inflight
                assert qu.running == 0
                status = None
            row = db_rows(db, sql_for(db, "SELECT status, worker_id FROM jobs"))[0]
            return status, (str(row[0]), str(row[1]))

    status, row = arun(body)
    return ran, status, row


# Stalled before the claim was taken up (`_start`), or after it (`_run`).
STALLS = [{"age_ms": 10_000, "stall": 0.0}, {"age_ms": 0, "stall": WORKER_TIMEOUT + 0.1}]


@pytest.mark.parametrize("stall", STALLS, ids=["before-start", "before-first-step"])
def test_a_stale_claim_that_was_rescued_is_not_run(db: str, stall: dict[str, float]) -> None:
    ran, status, row = _claim(db, age_ms=int(stall["age_ms"]), stall=stall["stall"], rescued=True)
    assert (ran, status) == ([], None), "a rescued claim must not run in the stalled worker"
    assert row == ("running", "other")  # the rescuer's claim, untouched


@pytest.mark.parametrize("stall", STALLS, ids=["before-start", "before-first-step"])
def test_a_stale_claim_still_ours_runs(db: str, stall: dict[str, float]) -> None:
    ran, status, row = _claim(db, age_ms=int(stall["age_ms"]), stall=stall["stall"], rescued=False)
    assert (ran, status) == ([7], "completed")
    assert row[0] == "completed"
