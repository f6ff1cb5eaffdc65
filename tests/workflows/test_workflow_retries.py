"""Re-running workflows (DESIGN §8.8): `jobs.retry_workflow` writes a new workflow of
the failed and cancelled steps with the completed steps' outputs carried over; `jobs.retry`
of a step re-runs that step alone with its old upstream values; GC keeps a job whose
output a job yet to end will read. Both backends (`db`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

import jobledger as jl
from jobledger.testing import drain
from tests.conftest import db_one, run
from tests.engine import fast_retry, make_manager


class N(pydantic.BaseModel):
    n: int = 0


ADD = jl.JobType("wfr.add", N)
SUM = jl.JobType("wfr.sum", N)
FLAKY = jl.JobType("wfr.flaky", N)
SLOW = jl.JobType("wfr.slow", N)


def _total(upstream: Any) -> int:
    out = 0
    for value in upstream.values():
        out += sum(value) if isinstance(value, list) else (value or 0)
    return out


class Graph:
    """A manager whose FLAKY jobs fail (permanently, one attempt) while `broken` holds
    their `n`, and which logs every run's job id, step and upstream values."""

    def __init__(self, db: str) -> None:
        self.jobs = make_manager(db)
        self.broken: set[int] = set()
        self.runs: list[tuple[str, str | None, dict[str, Any]]] = []
        self.release = asyncio.Event()
        jobs = self.jobs

        @jobs.handler(ADD, recovery="retry")
        async def add(ctx: jl.JobContext[N]) -> int:
            self._log(ctx)
            return ctx.payload.n + _total(ctx.upstream)

        @jobs.handler(SUM, recovery="retry")
        async def sum_(ctx: jl.JobContext[N]) -> int:
            self._log(ctx)
            return _total(ctx.upstream)

        @jobs.handler(FLAKY, recovery="retry", retry=fast_retry(1))
        async def flaky(ctx: jl.JobContext[N]) -> int:
            self._log(ctx)
            if ctx.payload.n in self.broken:
                raise jl.PermanentError(f"broken {ctx.payload.n}")
            return ctx.payload.n + _total(ctx.upstream)

        @jobs.handler(SLOW, recovery="retry")
        async def slow(ctx: jl.JobContext[N]) -> int:
            self._log(ctx)
            await self.release.wait()
            return ctx.payload.n

    def _log(self, ctx: jl.JobContext[N]) -> None:
        snap = self.jobs.get(ctx.job_id)
        assert snap is not None
        self.runs.append((ctx.job_id, snap.step, dict(ctx.upstream)))

    def steps_run(self) -> list[str | None]:
        return [step for _, step, _ in self.runs]


def _diamond(jobs: jl.JobManager) -> jl.WorkflowHandle:
    """top (1) -> left (10), right (FLAKY 100) -> join (sum) -> tail (+1000)."""
    wf = jobs.workflow("diamond")
    top = wf.add(ADD, N(n=1), name="top")
    left = wf.add(ADD, N(n=10), name="left", after=[top])
    right = wf.add(FLAKY, N(n=100), name="right", after=[top])
    join = wf.add(SUM, N(), name="join", after=[left, right])
    wf.add(ADD, N(n=1000), name="tail", after=[join])
    return wf.enqueue()


def test_retry_workflow_reruns_the_failed_and_cancelled_steps_with_outputs_carried(
    db: str,
) -> None:
    g = Graph(db)
    g.broken.add(100)
    jobs = g.jobs

    async def main() -> tuple[jl.WorkflowSnapshot, jl.WorkflowSnapshot, jl.WorkflowSnapshot]:
        async with jobs:
            first = await _diamond(jobs).finished
            g.runs.clear()
            g.broken.clear()
            again = jobs.retry_workflow(first.id)
            assert isinstance(again, jl.WorkflowHandle)
            assert set(again.jobs) == {"right", "join", "tail"}
            second = await again.finished
            old = jobs.get_workflow(first.id)
            assert old is not None
            return first, second, old

    first, second, old = run(main())
    by_step = {j.step: j for j in first.jobs}
    assert by_step["right"].status == jl.JobStatus.FAILED
    assert by_step["join"].status == by_step["tail"].status == jl.JobStatus.CANCELLED
    assert first.status == "failed"
    # The new workflow holds the re-run steps alone, fresh jobs that re-run the old ones.
    assert second.name == "diamond"
    assert second.retry_of == first.id
    assert first.retry_of is None
    assert second.status == "completed"
    new = {j.step: j for j in second.jobs}
    assert set(new) == {"right", "join", "tail"}
    assert all(j.workflow_id == second.id and j.attempt == 0 for j in second.jobs)
    assert {new[s].retry_of for s in new} == {by_step[s].id for s in new}
    # The completed steps did not run again; their outputs reached the re-run steps.
    assert g.steps_run() == ["right", "join", "tail"]
    upstream = {step: up for _, step, up in g.runs}
    assert upstream["right"] == {"top": 1}
    assert upstream["join"] == {"left": 11, "right": 101}
    assert new["tail"].output == 1000 + 112
    # The old rows are as they were.
    assert old.status == "failed"
    assert [(j.id, j.status) for j in old.jobs] == [(j.id, j.status) for j in first.jobs]


def test_an_add_many_step_with_one_failed_job_reruns_whole_and_joins_in_order(db: str) -> None:
    g = Graph(db)
    g.broken.add(3)
    jobs = g.jobs

    async def main() -> tuple[jl.WorkflowSnapshot, jl.WorkflowSnapshot]:
        async with jobs:
            wf = jobs.workflow("fan")
            seed = wf.add(ADD, N(n=0), name="seed")
            parts = wf.add_many(FLAKY, [N(n=i) for i in range(6)], name="parts", after=[seed])
            wf.add(SUM, N(), name="join", after=[parts])
            first = await wf.enqueue().finished
            g.runs.clear()
            g.broken.clear()
            again = jobs.retry_workflow(first.id)
            assert len(again.jobs["parts"]) == 6
            return first, await again.finished

    first, second = run(main())
    assert [j.status for j in first.steps()["parts"]].count(jl.JobStatus.FAILED) == 1
    assert second.status == "completed"
    assert [j.output for j in second.steps()["parts"]] == list(range(6))
    assert {step for _, step, _ in g.runs} == {"parts", "join"}
    join_upstream = next(up for _, step, up in g.runs if step == "join")
    assert join_upstream == {"parts": list(range(6))}


def test_a_retry_of_a_retry_carries_outputs_from_both_generations(db: str) -> None:
    g = Graph(db)
    jobs = g.jobs

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            wf = jobs.workflow("two-failures")
            a = wf.add(ADD, N(n=1), name="a")
            b = wf.add(FLAKY, N(n=2), name="b", after=[a])
            wf.add(FLAKY, N(n=3), name="c", after=[a, b])
            g.broken.update({2, 3})
            first = await wf.enqueue().finished
            g.broken.discard(2)  # b completes on the first retry, c fails again
            second = await jobs.retry_workflow(first.id).finished
            assert {j.step: j.status for j in second.jobs} == {
                "b": jl.JobStatus.COMPLETED,
                "c": jl.JobStatus.FAILED,
            }
            g.broken.clear()
            g.runs.clear()
            third = await jobs.retry_workflow(second.id).finished
            assert third.retry_of == second.id
            return third

    third = run(main())
    assert [j.step for j in third.jobs] == ["c"]
    assert third.jobs[0].output == 3 + 1 + 3  # a from the first run, b from the second
    assert g.runs[0][2] == {"a": 1, "b": 3}


def test_retry_workflow_refuses_unknown_running_and_completed_workflows(db: str) -> None:
    g = Graph(db)
    jobs = g.jobs

    async def main() -> None:
        async with jobs:
            with pytest.raises(jl.JobError) as unknown:
                jobs.retry_workflow("no-such-workflow")
            assert unknown.value.code == "JOB_WORKFLOW_NOT_FOUND"
            assert isinstance(unknown.value, jl.JobNotFound)
            assert unknown.value.params["workflow_id"] == "no-such-workflow"
            with pytest.raises(jl.JobError) as bad:
                jobs.retry_workflow(7)  # type: ignore[arg-type]
            assert bad.value.code == "JOB_INVALID_OPTION"

            wf = jobs.workflow("slow")
            first = wf.add(SLOW, N(n=1), name="first")
            wf.add(ADD, N(), name="then", after=[first])
            h = wf.enqueue()
            before = db_one(db, "SELECT count(*) FROM jobs")
            with pytest.raises(jl.JobError) as running:
                jobs.retry_workflow(h.id)
            assert running.value.code == "JOB_NOT_RETRYABLE"
            assert running.value.params == {"workflow_id": h.id, "status": "running"}
            g.release.set()
            done = await h.finished
            assert done.status == "completed"
            with pytest.raises(jl.JobError) as completed:
                jobs.retry_workflow(h.id)
            assert completed.value.code == "JOB_NOT_RETRYABLE"
            assert completed.value.params["status"] == "completed"
            assert db_one(db, "SELECT count(*) FROM jobs") == before
            assert db_one(db, "SELECT count(*) FROM workflows") == 1

    run(main())


def test_jobs_retry_of_a_failed_step_reruns_it_alone_with_its_upstream_values(db: str) -> None:
    g = Graph(db)
    g.broken.add(100)
    jobs = g.jobs

    async def main() -> tuple[jl.WorkflowSnapshot, jl.JobSnapshot]:
        async with jobs:
            first = await _diamond(jobs).finished
            right = next(j for j in first.jobs if j.step == "right")
            g.broken.clear()
            g.runs.clear()
            return first, await jobs.retry(right.id).finished

    first, rerun = run(main())
    assert rerun.status == jl.JobStatus.COMPLETED
    assert rerun.output == 101
    # It is no job of the workflow (nothing waits on it), but keeps its step's name.
    assert rerun.workflow_id is None
    assert rerun.step == "right"
    assert g.runs == [(rerun.id, "right", {"top": 1})]
    assert [j.step for j in g.jobs.list(workflow_id=first.id)].count("right") == 1
    # Its edges go with it when GC collects it, as a workflow job's do.
    assert db_one(db, "SELECT count(*) FROM jobs") == 6
    assert g.jobs._store.gc(10**15) == 6
    assert db_one(db, "SELECT count(*) FROM job_deps") == 0


def test_gc_keeps_a_finished_job_whose_output_a_waiting_job_will_read(db: str) -> None:
    g = Graph(db)
    jobs = g.jobs

    async def main() -> None:
        async with jobs:
            wf = jobs.workflow("long")
            top = wf.add(ADD, N(n=1), name="top")
            fast = wf.add(ADD, N(n=10), name="fast", after=[top])
            slow = wf.add(SLOW, N(n=100), name="slow", after=[top])
            wf.add(SUM, N(), name="join", after=[fast, slow])
            h = wf.enqueue()
            await h.jobs["fast"][0].finished
            while not any(step == "slow" for _, step, _ in g.runs):
                await asyncio.sleep(0.005)
            # Every finished row is past any retention; none may go, as `slow` runs and
            # `join` waits to read `top`'s and `fast`'s outputs.
            assert jobs._store.gc(10**15) == 0
            unrelated = await jobs.enqueue(ADD, N(n=5)).finished
            assert jobs._store.gc(10**15) == 1
            assert jobs.get(unrelated.id) is None
            g.release.set()
            done = await h.finished
            assert done.steps()["join"][0].output == 111
            assert jobs._store.gc(10**15) == 4
            assert jobs.get_workflow(done.id) is None

    run(main())


def test_cancel_many_cancels_waiting_steps_and_their_downstream(db: str) -> None:
    g = Graph(db)
    jobs = g.jobs

    async def main() -> tuple[jl.CancelManyResult, jl.WorkflowSnapshot]:
        async with jobs:
            wf = jobs.workflow("held")
            top = wf.add(SLOW, N(n=1), name="top")
            mid = wf.add(ADD, N(n=2), name="mid", after=[top])
            wf.add(SUM, N(), name="tail", after=[mid])
            h = wf.enqueue()
            result = jobs.cancel_many(type=ADD, reason="bad deploy")
            g.release.set()
            return result, await h.finished

    result, done = run(main())
    assert result.transitioned == 1
    got = {j.step: j for j in done.jobs}
    assert got["top"].status == jl.JobStatus.COMPLETED
    assert got["mid"].status == jl.JobStatus.CANCELLED
    assert got["tail"].status == jl.JobStatus.CANCELLED
    assert g.steps_run() == ["top"]


def test_a_paused_manager_holds_a_workflow_and_drain_runs_it_whole(db: str) -> None:
    g = Graph(db)
    jobs = g.jobs

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            hold = jobs.pause("deploy")
            wf = jobs.workflow("held")
            top = wf.add(ADD, N(n=1), name="top")
            wf.add(SUM, N(), name="after", after=[top])
            wf.enqueue()
            await asyncio.sleep(0.1)
            assert g.runs == []  # paused: not even the root runs
            hold.dispose()
            return await drain(jobs)

    done = run(main())
    assert [(j.step, j.status, j.output) for j in done] == [
        ("top", jl.JobStatus.COMPLETED, 1),
        ("after", jl.JobStatus.COMPLETED, 1),
    ]
