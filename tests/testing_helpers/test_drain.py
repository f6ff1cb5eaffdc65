"""`drain`: what it runs, what it returns, and when it gives up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pydantic
import pytest

import jobledger as jl
from jobledger.testing import FakeClock, drain


class N(pydantic.BaseModel):
    n: int


PARENT = jl.JobType("t.parent", N)
CHILD = jl.JobType("t.child", N)
ELSEWHERE = jl.JobType("t.elsewhere", N)


def test_drain_starts_the_manager_and_runs_a_producers_row_without_the_quiet_window(
    tmp_path: Path,
) -> None:
    # A row written by another process (a producer) is work at once: it
    # does not wait for the worker's 60 s quiet window, on the fake clock or any other.
    clock = FakeClock()
    producer = jl.JobManager(tmp_path / "j.db", clock=clock)
    jobs = jl.JobManager(tmp_path / "j.db", clock=clock, startup_delay=60)

    @jobs.handler(PARENT, recovery="retry")
    async def parent(ctx: jl.JobContext[N]) -> int:
        return ctx.payload.n * 2

    async def main() -> list[jl.JobSnapshot]:
        producer.enqueue(PARENT, N(n=21))
        await producer.stop()
        try:
            return await drain(jobs, timeout=10)
        finally:
            await jobs.stop()

    done = asyncio.run(main())
    assert [(s.status, s.output) for s in done] == [("completed", 42)]
    assert done[0].started_at is not None
    assert (done[0].started_at - done[0].created_at).total_seconds() < 60


def test_drain_returns_children_and_leaves_unhandled_types_waiting(tmp_path: Path) -> None:
    clock = FakeClock()
    jobs = jl.JobManager(tmp_path / "j.db", clock=clock, startup_delay=0)

    @jobs.handler(PARENT, recovery="retry")
    async def parent(ctx: jl.JobContext[N]) -> None:
        for i in range(ctx.payload.n):
            jobs.enqueue(CHILD, N(n=i), parent_id=ctx.job_id, delay=10 * (i + 1))

    @jobs.handler(CHILD, recovery="retry")
    def child(ctx: jl.JobContext[N]) -> int:
        return ctx.payload.n

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            jobs.enqueue(ELSEWHERE, N(n=0))  # no handler here: a web app's job for another worker
            jobs.enqueue(PARENT, N(n=3))
            return await drain(jobs)

    done = asyncio.run(main())
    assert [s.type for s in done] == ["t.elsewhere", "t.parent", "t.child", "t.child", "t.child"]
    assert [str(s.status) for s in done] == ["pending"] + ["completed"] * 4
    assert [s.output for s in done[2:]] == [0, 1, 2]
    assert {s.parent_id for s in done[2:]} == {done[1].id}


def test_drain_works_on_the_system_clock_with_short_delays(tmp_path: Path) -> None:
    jobs = jl.JobManager(tmp_path / "j.db", startup_delay=0)

    @jobs.handler(PARENT, recovery="retry", retry=jl.RetryPolicy(max_attempts=2, base_delay=0.02))
    async def flaky(ctx: jl.JobContext[N]) -> int:
        if ctx.attempt == 0:
            raise RuntimeError("first try fails")
        return ctx.attempt

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            jobs.enqueue(PARENT, N(n=1), delay=0.02)
            return await drain(jobs, timeout=10)

    done = asyncio.run(main())
    assert [(s.status, s.output) for s in done] == [("completed", 1)]


def test_drain_raises_timeout_when_a_handler_never_ends(tmp_path: Path) -> None:
    jobs = jl.JobManager(tmp_path / "j.db", clock=FakeClock(), startup_delay=0)
    release = asyncio.Event()

    @jobs.handler(PARENT, recovery="retry")
    async def stuck(ctx: jl.JobContext[N]) -> None:
        await release.wait()

    async def main() -> None:
        async with jobs:
            jobs.enqueue(PARENT, N(n=1))
            try:
                with pytest.raises(TimeoutError, match="still running"):
                    await drain(jobs, timeout=0.3)
            finally:
                release.set()

    asyncio.run(main())


def test_drain_refuses_a_stopped_manager(tmp_path: Path) -> None:
    jobs = jl.JobManager(tmp_path / "j.db", clock=FakeClock(), startup_delay=0)

    async def main() -> None:
        async with jobs:
            pass
        with pytest.raises(jl.JobError) as info:
            await drain(jobs)
        assert info.value.code == "JOB_MANAGER_STOPPED"

    asyncio.run(main())


def _state(jobs: jl.JobManager) -> str:
    return jobs.state  # read anew each time (mypy would keep a narrowed literal)


def test_drain_on_a_real_clock_ends_the_quiet_window_instead_of_waiting_it(
    tmp_path: Path,
) -> None:
    # The FastAPI layout: a module-level manager with the defaults (a real clock, a 60 s
    # startup_delay), drained by a test that must not wait the window out.
    jobs = jl.JobManager(tmp_path / "j.db")
    assert jobs.startup_delay == 60.0
    ran: list[int] = []

    @jobs.handler(PARENT, recovery="retry")
    async def parent(ctx: jl.JobContext[N]) -> None:
        ran.append(ctx.payload.n)

    async def main() -> list[jl.JobSnapshot]:
        assert _state(jobs) == "new"
        jobs.enqueue(PARENT, N(n=1))
        try:
            # Far below the window: a drain that waited for it would time out.
            done = await drain(jobs, timeout=10)
            assert jobs.recovery_done.done()
            assert _state(jobs) == "started"
            assert not jobs.busy
            return done
        finally:
            await jobs.stop()
            assert _state(jobs) == "stopped"

    done = asyncio.run(main())
    assert [s.status for s in done] == ["completed"]
    assert ran == [1]


def test_end_quiet_window_runs_recovery_at_once_and_is_idempotent(tmp_path: Path) -> None:
    jobs = jl.JobManager(tmp_path / "j.db", startup_delay=3600)
    jobs.end_quiet_window()  # before start: nothing to end

    async def main() -> None:
        async with jobs:
            assert not jobs.recovery_done.done()
            jobs.end_quiet_window()
            jobs.end_quiet_window()
            await asyncio.wait_for(asyncio.shield(jobs.recovery_done), 5)
            await asyncio.sleep(0)  # give the window's task its turn
            jobs.end_quiet_window()

    asyncio.run(main())
