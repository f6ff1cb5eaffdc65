"""Overlap policies (DESIGN §8.11, docs/design/schedules.md "Overlap"): what a natural
fire does while the schedule's previous job has not ended.

The fake-clock tests step an interval of 60 s while the handler is held on a gate, so
"the previous job is still running" is a fact the test controls; the real-time tests run
intervals of 0.1-0.3 s on the wall clock and check invariants sampled from the table,
never elapsed times.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import jobledger as jl
from jobledger._scheduling.overlap import Overlap
from jobledger.testing import FakeClock
from tests.conftest import db_reader
from tests.schedules import START, TICK, Tick, advance, keys_of, make_manager, run, sid_key, until


class Gated(jl.JobHandler[Tick, None]):
    """Runs until the test opens the gate; counts how many run at once."""

    recovery = "retry"
    concurrency = 4

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.running = 0
        self.most = 0
        self.started = 0

    async def execute(self, ctx: jl.JobContext[Tick]) -> None:
        self.started += 1
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1


def _at(seconds: int) -> Any:
    return START + timedelta(seconds=seconds)


def _snap(jobs: jl.JobManager, sid: str) -> jl.ScheduleSnapshot:
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    return snap


def _statuses(jobs: jl.JobManager, sid: str) -> dict[str | None, str]:
    return {s.idempotency_key: str(s.status) for s in jobs.list(schedule_id=sid)}


@pytest.mark.parametrize("overlap", ["allow", "skip", "buffer_one"])
def test_each_policy_on_a_fake_clock(db: str, overlap: Overlap) -> None:
    clock = FakeClock(START)
    handler = Gated()

    async def scenario() -> None:
        jobs = make_manager(db, clock, handler=handler)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Interval(seconds=60), overlap=overlap
            )
            assert _snap(jobs, sid).overlap == overlap
            await advance(clock, 60)
            await until(lambda: handler.running == 1)
            await advance(clock, 60)  # the fire at +120 meets +60 still running
            await advance(clock, 60)  # and so does +180
            got = _statuses(jobs, sid)
            snap = _snap(jobs, sid)
            # Whatever the policy, the calendar moved on.
            assert snap.next_run == _at(240)
            assert snap.last_run == _at(180)
            k60, k120, k180 = (sid_key(sid, _at(s)) for s in (60, 120, 180))
            if overlap == "allow":
                assert got == {k60: "running", k120: "running", k180: "running"}
                assert snap.skipped_fires == 0
            elif overlap == "skip":
                assert got == {k60: "running"}
                assert snap.skipped_fires == 2
            else:
                # One held back behind the running job (never claimed), the next skipped.
                assert got == {k60: "running", k120: "waiting"}
                assert snap.skipped_fires == 1
            handler.gate.set()
            await until(lambda: all(s.status.is_terminal for s in jobs.list(schedule_id=sid)))
            if overlap == "buffer_one":
                assert keys_of(jobs, sid) == {k60: 1, k120: 1}
                assert handler.started == 2
            # Nothing left unfinished: the next fire runs under every policy.
            handler.gate.clear()
            await advance(clock, 60)
            assert _statuses(jobs, sid)[sid_key(sid, _at(240))] in ("pending", "running")
            handler.gate.set()
        assert handler.most == (3 if overlap == "allow" else 1)

    run(scenario())


def test_a_held_back_fire_starts_when_the_job_ahead_fails_or_retries_out(db: str) -> None:
    """A retry's backoff is the previous run still going: the held fire waits for the
    final end, whatever it is."""
    clock = FakeClock(START)
    attempts: list[int] = []

    class Flaky(jl.JobHandler[Tick, None]):
        recovery = "retry"
        retry = jl.RetryPolicy(max_attempts=2, base_delay=100, max_delay=100, backoff="fixed")

        async def execute(self, ctx: jl.JobContext[Tick]) -> None:
            attempts.append(ctx.attempt)
            if ctx.payload.n == 1:
                raise RuntimeError("boom")

    async def scenario() -> None:
        jobs = make_manager(db, clock, handler=Flaky())

        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Interval(seconds=60), overlap="buffer_one"
            )
            await advance(clock, 60)  # +60 fails, backs off 100 s (delayed until +160)
            await until(lambda: attempts == [0])
            jobs.update_job_schedule(sid, payload=Tick(n=2))
            k60, k120 = sid_key(sid, _at(60)), sid_key(sid, _at(120))
            await advance(clock, 60)  # +120: held back behind the delayed retry
            assert _statuses(jobs, sid) == {k60: "delayed", k120: "waiting"}
            await advance(clock, 40)  # +160: the retry fails for good; +120 runs
            await until(lambda: _statuses(jobs, sid).get(k120) == "completed")
            assert _statuses(jobs, sid)[k60] == "failed"
            assert attempts == [0, 1, 0]

    run(scenario())


# --- on the wall clock --------------------------------------------------------------------


def _unfinished(db: str, sid: str) -> tuple[int, int]:
    """(pending, delayed or running rows; waiting rows) of the schedule, one snapshot."""
    with db_reader(db) as sql:
        rows = sql(
            "SELECT status FROM jobs WHERE schedule_id = ? AND finished_at IS NULL",
            (sid,),
        )
    statuses = [r[0] for r in rows]
    return sum(s != "waiting" for s in statuses), statuses.count("waiting")


@pytest.mark.parametrize(("overlap", "period"), [("skip", 0.1), ("buffer_one", 0.3)])
def test_each_policy_on_the_wall_clock(db: str, overlap: Overlap, period: float) -> None:
    handler = Gated()

    async def scenario() -> None:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)
        jobs.register_handler(TICK, handler)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=jl.Interval(seconds=period), overlap=overlap
            )
            # Hold the first job until two fires met it (skipped, or held then skipped).
            await until(lambda: handler.running == 1, timeout=20)
            await until(lambda: _snap(jobs, sid).skipped_fires >= 2, timeout=20)
            live, waiting = _unfinished(db, sid)
            assert live == 1
            assert waiting == (1 if overlap == "buffer_one" else 0)
            handler.gate.set()
            await until(lambda: handler.started >= 3, timeout=20)
            for _ in range(10):
                live, waiting = _unfinished(db, sid)
                assert live <= 1
                assert waiting <= 1
                await asyncio.sleep(period / 3)
            jobs.pause_job_schedule_by_id(sid)
        assert handler.most == 1

    run(scenario())


def test_allow_runs_overlapping_jobs_on_the_wall_clock(db: str) -> None:
    handler = Gated()

    async def scenario() -> None:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)
        jobs.register_handler(TICK, handler)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=0.2))
            await until(lambda: handler.running >= 3, timeout=20)
            jobs.pause_job_schedule_by_id(sid)
            handler.gate.set()
            assert _snap(jobs, sid).skipped_fires == 0

    run(scenario())


def test_two_armed_leaders_decide_each_fire_once(db: str) -> None:
    """Both managers arm (a leadership overlap) and fire every point: the loser of each
    compare-and-set decides nothing, so each fire is skipped (and counted) once."""
    clock = FakeClock(START)
    gated = [Gated(), Gated()]

    async def scenario() -> None:
        a, b = (make_manager(db, clock, handler=h) for h in gated)
        sid = a.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), overlap="skip"
        )
        async with a, b:
            await a.recovery_done
            await b.recovery_done
            for m in (a, b):
                m._schedules.on_leadership(True)
            for _ in range(5):
                await advance(clock, 60)
            assert keys_of(a, sid) == {sid_key(sid, _at(60)): 1}
            assert _snap(a, sid).skipped_fires == 4
            for h in gated:
                h.gate.set()

    run(scenario())
