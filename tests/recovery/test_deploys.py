"""Deploys never lose work, proven on the real `jobledger worker` process.

A deploy sends SIGTERM: claims stop, running jobs get `--grace` seconds to finish, then
the rest are interrupted; a retry or singleton job goes back to `pending` with its attempt
unspent, an abandon job ends `cancelled`. The process exits within grace + 2 s whatever
its handlers do; a second signal exits at once. A worker that starts later runs rows that
producers wrote meanwhile at once; only rows of dead workers wait for the sweep.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jobledger as jl
from jobledger.testing import FakeClock
from tests.conftest import db_rows
from tests.recovery import REPO, arun, status_counts, wait_for, wait_for_async

APP = textwrap.dedent(
    """
    import asyncio
    import os
    import time

    import jobledger as jl

    FINISHING = jl.JobType("deploy.finishing", float)
    BLOCKS = jl.JobType("deploy.blocks", int)
    BLOCKS_ABANDON = jl.JobType("deploy.blocks-abandon", int)
    STUCK = jl.JobType("deploy.stuck", int)
    jobs = jl.JobManager(os.environ["JOBLEDGER_DB"], startup_delay=0, poll_interval=0.02)


    @jobs.handler(FINISHING, recovery="retry")
    async def finishing(ctx: jl.JobContext[float]) -> str:
        await asyncio.sleep(ctx.payload)
        return "finished"


    @jobs.handler(BLOCKS, recovery="retry")
    async def blocks(ctx: jl.JobContext[int]) -> None:
        await asyncio.Event().wait()


    @jobs.handler(BLOCKS_ABANDON, recovery="abandon")
    async def blocks_abandon(ctx: jl.JobContext[int]) -> None:
        await asyncio.Event().wait()


    @jobs.handler(STUCK, recovery="retry")
    def stuck(ctx: jl.JobContext[int]) -> None:
        time.sleep(120)  # ignores its token: only the process's exit ends it
    """
)

FINISHING = jl.JobType("deploy.finishing", float)
BLOCKS = jl.JobType("deploy.blocks", int)
BLOCKS_ABANDON = jl.JobType("deploy.blocks-abandon", int)
STUCK = jl.JobType("deploy.stuck", int)


class Worker:
    """`jobledger worker deployapp:jobs` as a child process, stderr to a file."""

    def __init__(self, db: str, workdir: Path, *args: str) -> None:
        (workdir / "deployapp.py").write_text(APP)
        self.log = workdir / "worker.log"
        env = dict(os.environ)
        env["JOBLEDGER_DB"] = db
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(workdir), str(REPO / "src"), env.get("PYTHONPATH", "")) if p
        )
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", "worker", "deployapp:jobs", *args],
                cwd=workdir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text()

    def wait_for_output(self, text: str) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode}: {self.output()}")
            return text in self.output()

        wait_for(seen, what=repr(text))

    def signal(self, sig: int) -> tuple[int, float]:
        """Send `sig`; the exit code and how long the exit took."""
        sent = time.monotonic()
        self.proc.send_signal(sig)
        code = self.proc.wait(30)
        return code, time.monotonic() - sent

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def _producer(db: str) -> jl.JobManager:
    return jl.JobManager(db)


async def _terminal(jobs: jl.JobManager, job_id: str) -> jl.JobSnapshot:
    def done() -> jl.JobSnapshot | None:
        snap = jobs.get(job_id)
        terminal = snap is not None and snap.status in ("completed", "failed", "cancelled")
        return snap if terminal else None

    return await wait_for_async(done, timeout=10.0, what=f"job {job_id} to finish")


def test_sigterm_lets_finishing_jobs_finish_and_requeues_the_interrupted(
    db: str, tmp_path: Path
) -> None:
    worker = Worker(db, tmp_path, "--grace", "1.5")
    producer = _producer(db)
    try:
        worker.wait_for_output("jobledger worker ")
        finishing = producer.enqueue(FINISHING, 0.5).id
        blocked = producer.enqueue(BLOCKS, 1).id
        abandoned = producer.enqueue(BLOCKS_ABANDON, 2).id
        wait_for(lambda: status_counts(db) == {"running": 3}, what="three running jobs")
        code, took = worker.signal(signal.SIGTERM)
    finally:
        worker.stop()
        arun(producer.stop)
    assert code == 0, worker.output()
    assert took < 1.5 + 2.0, took
    rows = {
        i: (status, attempt, output)
        for i, status, attempt, output in db_rows(
            db, "SELECT id, status, attempt, output FROM jobs"
        )
    }
    # 0.5 s from done at SIGTERM: the grace lets it finish (it used to be cancelled).
    assert rows[finishing] == ("completed", 0, '"finished"')
    # Interrupted after the grace: work again, claimable at once, its attempt unspent.
    assert rows[blocked] == ("pending", 0, None)
    assert db_rows(db, "SELECT worker_id, enqueued_by FROM jobs WHERE id = ?", (blocked,)) == [
        (None, None)
    ]
    assert rows[abandoned][0] == "cancelled"


def test_the_next_worker_runs_an_interrupted_job_at_once(db: str, tmp_path: Path) -> None:
    first = Worker(db, tmp_path, "--grace", "0")
    producer = _producer(db)
    try:
        first.wait_for_output("jobledger worker ")
        job = producer.enqueue(BLOCKS, 1).id
        wait_for(lambda: status_counts(db) == {"running": 1})
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(30) == 0
        assert status_counts(db) == {"pending": 1}
    finally:
        first.stop()
        arun(producer.stop)

    async def body() -> tuple[jl.JobSnapshot, float]:
        # startup_delay=60: only the sweep of dead workers' rows may wait for it.
        jobs = jl.JobManager(db, startup_delay=60.0, poll_interval=0.02)

        @jobs.handler(BLOCKS, recovery="retry")
        async def blocks(ctx: jl.JobContext[int]) -> int:
            return ctx.attempt

        t0 = time.monotonic()
        async with jobs:
            snap = await _terminal(jobs, job)
            return snap, time.monotonic() - t0

    snap, took = arun(body)
    assert (snap.status, snap.output, snap.attempt) == ("completed", 0, 0)
    assert took < 5.0, took


def test_the_worker_exits_within_grace_plus_two_seconds_past_a_stuck_thread(
    db: str, tmp_path: Path
) -> None:
    """A plain `def` handler that ignores its token used to hold the exit ~40 s."""
    worker = Worker(db, tmp_path, "--grace", "0.5")
    producer = _producer(db)
    try:
        worker.wait_for_output("jobledger worker ")
        job = producer.enqueue(STUCK, 1).id
        wait_for(lambda: status_counts(db) == {"running": 1})
        code, took = worker.signal(signal.SIGTERM)
    finally:
        worker.stop()
        arun(producer.stop)
    assert code == 0, worker.output()
    assert took < 0.5 + 2.0, took
    assert "worker stopped" in worker.output()
    # The thread never ended: its row is left for the next sweep, by strategy.
    assert db_rows(db, "SELECT status FROM jobs WHERE id = ?", (job,)) == [("running",)]


def test_a_second_signal_stops_at_once(db: str, tmp_path: Path) -> None:
    worker = Worker(db, tmp_path, "--grace", "60")
    producer = _producer(db)
    try:
        worker.wait_for_output("jobledger worker ")
        producer.enqueue(BLOCKS, 1)
        wait_for(lambda: status_counts(db) == {"running": 1})
        worker.proc.send_signal(signal.SIGTERM)
        worker.wait_for_output("jobledger: stopping")
        code, took = worker.signal(signal.SIGINT)
    finally:
        worker.stop()
        arun(producer.stop)
    assert code == 1
    assert took < 2.0, took
    assert "stopping now" in worker.output()
    assert status_counts(db) == {"running": 1}, "left for recovery"


def test_rows_written_while_no_worker_ran_start_at_once_and_dead_owned_rows_wait(
    db: str,
) -> None:
    """Producers' rows run within poll_interval of start(); a dead worker's rows wait
    for the sweep after `startup_delay`, which applies their strategy."""
    clock = FakeClock()
    producer = jl.JobManager(db, clock=clock)
    mine = [h.id for h in producer.enqueue_many(FINISHING, [0.0] * 3)]
    dead_owned = producer.enqueue(BLOCKS_ABANDON, 9).id
    arun(producer.stop)
    db_rows(
        db,
        "INSERT INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at) "
        "VALUES ('ghost', 'another-host', 1, '[]', 0, 0)",
    )
    db_rows(db, "UPDATE jobs SET enqueued_by = 'ghost' WHERE id = ?", (dead_owned,))

    async def body() -> tuple[list[jl.JobSnapshot], str, jl.JobSnapshot | None]:
        jobs = jl.JobManager(db, clock=clock, startup_delay=60.0, poll_interval=0.02)
        jobs.handler(FINISHING, recovery="retry")(_finished)

        @jobs.handler(BLOCKS_ABANDON, recovery="abandon")
        async def never(ctx: jl.JobContext[int]) -> None:
            raise AssertionError("a dead worker's abandon row is swept, never run")

        async with jobs:
            done = [await _terminal(jobs, i) for i in mine]
            before = db_rows(db, "SELECT status FROM jobs WHERE id = ?", (dead_owned,))[0][0]
            await clock.advance_async(60.0)
            await jobs.recovery_done
            return done, str(before), jobs.get(dead_owned)

    done, before, swept = arun(body)
    assert [s.status for s in done] == ["completed"] * 3
    assert before == "pending"
    assert swept is not None
    assert swept.status == "cancelled"


async def _finished(ctx: jl.JobContext[float]) -> str:
    return "finished"


def test_drain_in_flight_waits_for_a_finishing_jobs_on_settled(db: str) -> None:
    class Slow(jl.JobHandler[float, str]):
        recovery = "retry"
        settled: list[str] = []

        async def execute(self, ctx: jl.JobContext[float]) -> str:
            return "done"

        async def on_settled(self, event: jl.SettledEvent) -> None:
            await asyncio.sleep(0.3)
            self.settled.append(event.job_id)

    async def body() -> tuple[str, list[str], jl.DrainVerdict]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)
        handler = Slow()
        jobs.register_handler(FINISHING, handler)
        async with jobs:
            job = jobs.enqueue(FINISHING, 0.0).id
            # The outcome is committed; only the hook still runs.
            await wait_for_async(lambda: status_counts(db) == {"completed": 1})
            hold = jobs.pause("drain")
            verdict = await jobs.drain_in_flight(timeout=5.0)
            settled = list(handler.settled)
            hold.dispose()
            return job, settled, verdict

    job, settled, verdict = arun(body)
    assert settled == [job], "drain returned before on_settled ran"
    assert verdict.straggler_ids == ()
