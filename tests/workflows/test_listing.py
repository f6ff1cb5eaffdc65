"""`jobs.list_workflows`, `jobs.count_workflows` and `WorkflowSnapshot.edges`: what an
operator's console reads, through the public API, on both backends (`db`)."""

from __future__ import annotations

import pytest

import jobledger as jl
from tests.conftest import run
from tests.workflows.test_workflows import ADD, BOOM, SUM, N, manager


def _diamond(jobs: jl.JobManager, *, fail_left: bool) -> jl.WorkflowHandle:
    wf = jobs.workflow("diamond")
    top = wf.add(ADD, N(n=1), name="top")
    wf.add(BOOM if fail_left else ADD, N(), name="left", after=[top])
    wf.add_many(ADD, [N(n=2), N(n=3)], name="right", after=[top])
    wf.add(SUM, N(), name="join", after=["left", "right"])
    return wf.enqueue()


def test_a_listing_shows_each_workflows_status_and_counts(db: str) -> None:
    jobs = manager(db)

    async def main() -> tuple[str, str]:
        async with jobs:
            bad = _diamond(jobs, fail_left=True)
            await bad.finished
            good = _diamond(jobs, fail_left=False)
            await good.finished
            return bad.id, good.id

    bad, good = run(main())
    listed = jobs.list_workflows()
    assert [w.id for w in listed] == [good, bad]
    newest, oldest = listed
    assert (newest.name, newest.status, newest.total, newest.finished) == (
        "diamond",
        "completed",
        5,
        5,
    )
    assert newest.counts["completed"] == 5
    assert oldest.status == "failed"
    assert {s: n for s, n in oldest.counts.items() if n} == {
        "completed": 3,
        "failed": 1,
        "cancelled": 1,
    }
    assert set(oldest.counts) == {str(s) for s in jl.JobStatus}
    assert oldest.to_json()["counts"] == dict(oldest.counts)
    assert [w.id for w in jobs.list_workflows(limit=1, offset=1)] == [bad]
    assert jobs.count_workflows() == 2
    assert jobs.count_workflows(name="diamond") == 2
    assert jobs.list_workflows(name="other") == []
    with pytest.raises(jl.JobValidationError):
        jobs.list_workflows(limit=0)


def test_a_snapshot_carries_the_edges_of_its_graph(db: str) -> None:
    jobs = manager(db)

    async def main() -> jl.WorkflowSnapshot:
        async with jobs:
            return await _diamond(jobs, fail_left=False).finished

    done = run(main())
    step_of = {j.id: j.step for j in done.jobs}
    pairs = sorted((step_of[e.upstream_id], step_of[e.job_id], e.many) for e in done.edges)
    assert pairs == [
        ("left", "join", False),
        ("right", "join", True),
        ("right", "join", True),
        ("top", "left", False),
        ("top", "right", False),
        ("top", "right", False),
    ]
    assert {e.on_upstream_failure for e in done.edges} == {"cancel"}
    data = done.to_json()
    assert [j["id"] for j in data["jobs"]] == [j.id for j in done.jobs]
    assert data["edges"][0] == done.edges[0].to_json()
