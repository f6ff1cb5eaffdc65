"""Workflow factories (`jobs.workflow_handler`, DESIGN §8.8): a job type whose handler
builds a workflow, so a schedule fires a whole graph; the workflow takes the starting
job's id, so a second attempt of that job writes no second workflow. Both backends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pydantic
import pytest

import jobledger as jl
from tests.conftest import db_one, run
from tests.engine import fast_retry, make_manager


class Ingest(pydantic.BaseModel):
    parts: int


class Part(pydantic.BaseModel):
    i: int


NIGHTLY = jl.JobType("wff.nightly", Ingest)
PART = jl.JobType("wff.part", Part)
JOIN = jl.JobType("wff.join", Part)


def manager(db: str, builds: list[str]) -> jl.JobManager:
    jobs = make_manager(db)

    @jobs.workflow_handler(NIGHTLY, name="ingest")
    def nightly(ctx: jl.JobContext[Ingest], wf: jl.Workflow) -> None:
        builds.append(ctx.job_id)
        parts = wf.add_many(PART, [Part(i=i) for i in range(ctx.payload.parts)], name="parts")
        wf.add(JOIN, Part(i=-1), name="join", after=[parts])

    @jobs.handler(PART, recovery="retry")
    async def part(ctx: jl.JobContext[Part]) -> int:
        return ctx.payload.i * 10

    @jobs.handler(JOIN, recovery="retry")
    async def join(ctx: jl.JobContext[Part]) -> list[int]:
        parts: list[int] = ctx.upstream["parts"]
        return parts

    return jobs


async def settled(jobs: jl.JobManager, workflow_id: str) -> jl.WorkflowSnapshot:
    """The workflow once it exists and every job of it has finished."""
    while True:
        snap = jobs.get_workflow(workflow_id)
        if snap is not None and snap.status != "running":
            return snap
        await asyncio.sleep(0.01)


def test_a_schedule_fires_a_workflow_named_by_its_job_type(db: str) -> None:
    builds: list[str] = []
    jobs = manager(db, builds)

    async def main() -> tuple[jl.JobSnapshot, jl.WorkflowSnapshot]:
        async with jobs:
            at = datetime.now(UTC) + timedelta(milliseconds=50)
            sid = jobs.register_job_schedule(NIGHTLY, Ingest(parts=3), trigger=jl.Once(at=at))
            while not jobs.count(schedule_id=sid):
                await asyncio.sleep(0.01)
            fire_id = jobs.list(schedule_id=sid)[0].id
            workflow = await settled(jobs, fire_id)
            fire = jobs.get(fire_id)
            assert fire is not None
            return fire, workflow

    fire, workflow = run(main())
    assert fire.status == jl.JobStatus.COMPLETED
    assert fire.output == {"workflow_id": fire.id}
    assert builds == [fire.id]
    assert workflow.name == "ingest"
    assert workflow.status == "completed"
    assert [j.output for j in workflow.steps()["parts"]] == [0, 10, 20]
    assert workflow.steps()["join"][0].output == [0, 10, 20]


def test_a_factory_job_enqueued_directly_starts_its_workflow(db: str) -> None:
    builds: list[str] = []
    jobs = manager(db, builds)

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            fire = await jobs.enqueue(NIGHTLY, Ingest(parts=2)).finished
            assert fire.output == {"workflow_id": fire.id}
            return await settled(jobs, fire.id)

    workflow = run(main())
    assert workflow.steps()["join"][0].output == [0, 10]
    assert db_one(db, "SELECT count(*) FROM workflows") == 1


def test_a_second_start_under_one_id_writes_nothing_and_answers_the_first(db: str) -> None:
    jobs = make_manager(db)

    def build() -> jl.Workflow:
        wf = jobs.workflow("once")
        first = wf.add(PART, Part(i=1), name="first")
        wf.add(JOIN, Part(i=2), name="second", after=[first])
        return wf

    # What a re-run attempt of the starting job does (`workflow_handler`): the same id.
    first = build()._enqueue_once("01a20000-0000-8000-8000-000000000001")
    again = build()._enqueue_once("01a20000-0000-8000-8000-000000000001")
    assert again.id == first.id
    assert {s: [h.id for h in hs] for s, hs in again.jobs.items()} == {
        s: [h.id for h in hs] for s, hs in first.jobs.items()
    }
    assert db_one(db, "SELECT count(*) FROM workflows") == 1
    assert db_one(db, "SELECT count(*) FROM jobs") == 2


def test_a_builder_that_raises_writes_nothing_and_is_retried(db: str) -> None:
    jobs = make_manager(db)
    tries: list[int] = []
    BUILD = jl.JobType("wff.build", Ingest)

    @jobs.workflow_handler(BUILD, retry=fast_retry(2))
    async def build(ctx: jl.JobContext[Ingest], wf: jl.Workflow) -> None:
        tries.append(ctx.attempt)
        wf.add(PART, Part(i=0), name="only")
        if ctx.attempt == 0:
            raise RuntimeError("the source is down")

    @jobs.handler(PART, recovery="retry")
    async def part(ctx: jl.JobContext[Part]) -> int:
        return 5

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(BUILD, Ingest(parts=0)).finished

    fire = run(main())
    assert tries == [0, 1]
    assert fire.status == jl.JobStatus.COMPLETED
    assert db_one(db, "SELECT count(*) FROM workflows") == 1
    workflow = jobs.get_workflow(fire.id)
    assert workflow is not None
    assert workflow.name == "wff.build"


def test_a_bad_workflow_name_fails_at_registration(db: str) -> None:
    jobs = make_manager(db)
    with pytest.raises(jl.JobError) as err:
        jobs.workflow_handler(NIGHTLY, name="")
    assert err.value.code == "JOB_WORKFLOW_INVALID"
