"""Workflows end to end (DESIGN §8.8): a graph written in one transaction, run in
dependency order with upstream outputs passed on, failure and cancel propagated by
policy, transitively, and invalid graphs writing nothing. Both backends (`db`)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import jobledger as jl
from tests.conftest import db_one, run
from tests.engine import make_manager, statuses


class N(pydantic.BaseModel):
    n: int = 0


ADD = jl.JobType("wf.add", N)
SUM = jl.JobType("wf.sum", N)
BOOM = jl.JobType("wf.boom", N)


def manager(db: str, seen: list[tuple[str, Any]] | None = None) -> jl.JobManager:
    """ADD returns n + 1 (+ the sum of its upstream outputs); SUM records what it saw
    upstream and returns the total; BOOM always fails, at once."""
    jobs = make_manager(db)
    log = seen if seen is not None else []

    def total(upstream: Any) -> int:
        out = 0
        for value in upstream.values():
            if isinstance(value, list):
                out += sum(value)
            elif value is not None:  # a failed upstream (policy "run") has no output
                out += value
        return out

    @jobs.handler(ADD, recovery="retry")
    async def add(ctx: jl.JobContext[N]) -> int:
        log.append((ctx.job_id, dict(ctx.upstream)))
        return ctx.payload.n + 1 + total(ctx.upstream)

    @jobs.handler(SUM, recovery="retry")
    async def sum_(ctx: jl.JobContext[N]) -> int:
        log.append((ctx.job_id, dict(ctx.upstream)))
        return total(ctx.upstream)

    @jobs.handler(BOOM, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def boom(ctx: jl.JobContext[N]) -> int:
        raise jl.PermanentError("boom")

    return jobs


def test_a_diamond_runs_in_dependency_order_with_outputs_passed(db: str) -> None:
    seen: list[tuple[str, Any]] = []
    jobs = manager(db, seen)

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            wf = jobs.workflow("diamond")
            # `join` names its upstream steps before they exist.
            wf.add(SUM, N(), name="join", after=["left", "right"])
            top = wf.add(ADD, N(n=1), name="top")
            wf.add(ADD, N(n=10), name="left", after=[top])
            wf.add(ADD, N(n=100), name="right", after="top")
            h = wf.enqueue()
            assert isinstance(h, jl.WorkflowHandle)
            # Written at once: the root pending, the rest waiting, all in the workflow.
            snap = jobs.get_workflow(h.id)
            assert snap is not None
            return await h.finished

    done = run(main())
    assert done.name == "diamond"
    assert done.status == "completed"
    steps = done.steps()
    assert [j.output for j in steps["top"]] == [2]
    assert [j.output for j in steps["left"]] == [13]
    assert [j.output for j in steps["right"]] == [103]
    assert [j.output for j in steps["join"]] == [116]
    order = [job_id for job_id, _ in seen]
    by_id = {j.id: j.step for j in done.jobs}
    ran = [by_id[i] for i in order]
    assert ran[0] == "top"
    assert ran[-1] == "join"
    assert seen[-1][1] == {"left": 13, "right": 103}
    assert all(j.workflow_id == done.id for j in done.jobs)
    assert {j.step for j in jobs.list(workflow_id=done.id)} == {"top", "left", "right", "join"}
    assert jobs.count(workflow_id=done.id) == 4


def test_a_fan_out_of_100_joins_with_a_list_of_outputs_in_order(db: str) -> None:
    seen: list[tuple[str, Any]] = []
    jobs = manager(db, seen)

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            wf = jobs.workflow("fan")
            parts = wf.add_many(ADD, [N(n=i) for i in range(100)], name="parts")
            wf.add(SUM, N(), name="join", after=[parts])
            h = wf.enqueue()
            assert len(h.jobs["parts"]) == 100
            return await h.finished

    done = run(main())
    assert done.status == "completed"
    join = done.steps()["join"][0]
    assert join.output == sum(range(1, 101))
    upstream = next(u for job_id, u in seen if job_id == join.id)
    assert upstream == {"parts": list(range(1, 101))}


def _chain(jobs: jl.JobManager, policy: str) -> jl.WorkflowHandle:
    """bad -> mid (policy) -> tail (cancel), and bad -> side (run)."""
    wf = jobs.workflow("chain")
    bad = wf.add(BOOM, N(), name="bad")
    mid = wf.add(ADD, N(), name="mid", after=[bad], on_upstream_failure=policy)  # type: ignore[arg-type]
    wf.add(ADD, N(), name="tail", after=[mid])
    wf.add(ADD, N(n=5), name="side", after=[bad], on_upstream_failure="run")
    return wf.enqueue()


def test_a_failure_cancels_downstream_transitively_under_policy_cancel(db: str) -> None:
    jobs = manager(db)

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            return await _chain(jobs, "cancel").finished

    done = run(main())
    got = {j.step: j for j in done.jobs}
    assert got["bad"].status == jl.JobStatus.FAILED
    assert got["mid"].status == jl.JobStatus.CANCELLED
    assert got["tail"].status == jl.JobStatus.CANCELLED
    error = got["tail"].error
    assert error is not None
    assert error.code == "JOB_CANCELLED"
    assert error.params["reason"] == "upstream"
    # "run": the failed upstream counts as finished; its output is None.
    assert got["side"].status == jl.JobStatus.COMPLETED
    assert got["side"].output == 6
    assert done.status == "failed"


def test_policy_run_runs_downstream_of_a_failure(db: str) -> None:
    seen: list[tuple[str, Any]] = []
    jobs = manager(db, seen)

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            return await _chain(jobs, "run").finished

    done = run(main())
    got = {j.step: j for j in done.jobs}
    assert got["mid"].status == jl.JobStatus.COMPLETED
    assert got["tail"].status == jl.JobStatus.COMPLETED
    assert dict(seen)[got["mid"].id] == {"bad": None}


def test_cancel_workflow_cancels_every_unfinished_job(db: str) -> None:
    producer = make_manager(db)  # never started: nothing runs, every row stays put

    async def main() -> None:
        wf = producer.workflow("stop")
        a = wf.add(ADD, N(), name="a")
        b = wf.add_many(ADD, [N(), N()], name="b", after=[a])
        wf.add(ADD, N(), name="c", after=[b], on_upstream_failure="run")
        h = wf.enqueue()
        assert sorted(statuses(db).values()) == ["pending"] + ["waiting"] * 3
        assert await producer.cancel_workflow(h.id) == 4
        snap = await h.finished
        assert snap.status == "cancelled"
        assert {j.status for j in snap.jobs} == {jl.JobStatus.CANCELLED}
        assert await producer.cancel_workflow(h.id) == 0
        assert await producer.cancel_workflow("no-such-workflow") == 0

    run(main())
    assert producer.get_workflow("no-such-workflow") is None


@pytest.mark.parametrize(
    ("build", "step", "reason"),
    [
        (lambda wf: wf.add(ADD, N(), name="a", after=["ghost"]), "a", "unknown"),
        (lambda wf: (wf.add(ADD, N(), name="a"), wf.add(ADD, N(), name="a")), "a", "duplicate"),
        (
            lambda wf: (
                wf.add(ADD, N(), name="a", after=["b"]),
                wf.add(ADD, N(), name="b", after=["a"]),
            ),
            "a",
            "cycle",
        ),
        (lambda wf: wf.add(ADD, {"n": "x"}, name="a"), "a", "entry"),
    ],
)
def test_an_invalid_graph_writes_nothing(db: str, build: Any, step: str, reason: str) -> None:
    jobs = manager(db)
    wf = jobs.workflow("bad")
    wf.add(ADD, N(), name="ok")
    build(wf)
    with pytest.raises(jl.JobValidationError) as info:
        wf.enqueue()
    assert info.value.code == "JOB_WORKFLOW_INVALID"
    assert info.value.params["step"] == step
    assert info.value.params["reason"] == reason
    assert db_one(db, "SELECT count(*) FROM jobs") == 0
    assert db_one(db, "SELECT count(*) FROM workflows") == 0
    assert db_one(db, "SELECT count(*) FROM job_deps") == 0


def test_enqueue_tx_writes_the_graph_with_the_callers_transaction(db: str) -> None:
    jobs = manager(db)
    wf = jobs.workflow("tx")
    a = wf.add(ADD, N(), name="a")
    wf.add(ADD, N(), name="b", after=[a])

    def rolled_back() -> None:
        with jobs.write_tx() as tx:
            wf.enqueue_tx(tx)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert db_one(db, "SELECT count(*) FROM jobs") == 0
    assert db_one(db, "SELECT count(*) FROM workflows") == 0
    again = jobs.workflow("tx")
    again.add(ADD, N(), name="a")
    with jobs.write_tx() as tx:
        h = again.enqueue_tx(tx)
    snap = jobs.get_workflow(h.id)
    assert snap is not None
    assert [j.step for j in snap.jobs] == ["a"]
    with pytest.raises(jl.JobValidationError, match="JOB_WORKFLOW_INVALID"):
        again.enqueue()


def test_cancel_of_a_waiting_step_cancels_its_downstream_steps(db: str) -> None:
    producer = make_manager(db)  # never started: only the cancels move rows

    async def main() -> None:
        wf = producer.workflow("one")
        a = wf.add(ADD, N(), name="a")
        b = wf.add(ADD, N(), name="b", after=[a])
        wf.add(ADD, N(), name="c", after=[b])
        wf.add(ADD, N(), name="d", after=[b], on_upstream_failure="run")
        h = wf.enqueue()
        assert await producer.cancel(h.jobs["b"][0].id) == "cancelled"
        snap = producer.get_workflow(h.id)
        assert snap is not None
        got = {j.step: j.status for j in snap.jobs}
        # d's only upstream ended: under "run" it may go now; a is untouched.
        assert got == {"a": "pending", "b": "cancelled", "c": "cancelled", "d": "pending"}
        assert snap.status == "running"
        assert (await h.jobs["c"][0].finished).status == "cancelled"

    run(main())


FLAKY = jl.JobType("wf.flaky", N)


def test_a_retried_step_releases_its_downstream_only_when_it_completes(db: str) -> None:
    jobs = manager(db)
    tries: list[int] = []

    @jobs.handler(
        FLAKY,
        recovery="retry",
        retry=jl.RetryPolicy(max_attempts=3, backoff="fixed", base_delay=0.001),
    )
    async def flaky(ctx: jl.JobContext[N]) -> int:
        tries.append(ctx.attempt)
        if ctx.attempt == 0:
            raise RuntimeError("once")
        return 7

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            wf = jobs.workflow("retry")
            first = wf.add(FLAKY, N(), name="first")
            wf.add(ADD, N(), name="then", after=[first])
            return await wf.enqueue().finished

    done = run(main())
    assert tries == [0, 1]
    got = {j.step: j for j in done.jobs}
    assert got["first"].attempt == 1
    assert got["then"].output == 8
    assert done.status == "completed"


def test_a_workflow_a_producer_wrote_runs_on_another_manager(db: str) -> None:
    producer = make_manager(db)  # a web app: enqueues, never starts
    worker = manager(db)

    async def main() -> jl.WorkflowSnapshot:
        async with worker:
            wf = producer.workflow("remote")
            parts = wf.add_many(ADD, [N(n=1), N(n=2)], name="parts")
            wf.add(SUM, N(), name="join", after=[parts])
            return await wf.enqueue().finished

    done = run(main())
    assert done.steps()["join"][0].output == 5
    # The edges of collected jobs go with them.
    assert db_one(db, "SELECT count(*) FROM job_deps") == 2
    worker_store = make_manager(db)
    assert db_one(db, "SELECT count(*) FROM workflows") == 1
    assert worker_store._store.gc(10**15) == 3
    assert db_one(db, "SELECT count(*) FROM job_deps") == 0
    assert db_one(db, "SELECT count(*) FROM workflows") == 0
    assert worker_store.get_workflow(done.id) is None
