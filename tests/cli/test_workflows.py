"""`jobledger workflows list` and `workflows show ID`, run as child processes on both
backends over finished workflows (a diamond with a failed step, a fan-out)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jobledger as jl
from tests.cli.conftest import jobledger
from tests.http.workflows import build


def test_list_shows_each_workflow_with_its_counts(db: str, tmp_path: Path) -> None:
    made = build(db, diamond_name="dia\x1b[2Jmond")
    table = jobledger("--db", db, "workflows", "list", cwd=tmp_path, check=True).stdout
    lines = table.splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "FINISHED", "JOBS", "CREATED"]
    fan, diamond = lines[1], lines[2]
    assert fan.split()[:4] == [made.fan, "fan", "completed", "13/13"]
    # A stored name is shown, never obeyed: the escape is printed as text.
    assert diamond.split()[:4] == [made.diamond, "dia\\x1b[2Jmond", "failed", "6/6"]
    assert "4 completed, 1 failed, 1 cancelled" in diamond
    assert "\x1b" not in table
    assert lines[-1] == "1-2 of 2"

    rows = jobledger(
        "--db", db, "workflows", "list", "--json", "--name", "fan", cwd=tmp_path, check=True
    ).stdout.splitlines()  # fmt: skip
    (only,) = map(json.loads, rows)
    assert (only["id"], only["status"], only["total"]) == (made.fan, "completed", 13)
    assert only["counts"]["completed"] == 13
    paged = jobledger(
        "--db", db, "workflows", "list", "--json", "--limit", "1", "--offset", "1",
        cwd=tmp_path, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert [json.loads(r)["id"] for r in paged] == [made.diamond]


def test_show_prints_each_step_with_its_statuses_and_upstream(db: str, tmp_path: Path) -> None:
    made = build(db)
    shown = jobledger("--db", db, "workflows", "show", made.diamond, cwd=tmp_path, check=True)
    lines = shown.stdout.splitlines()
    assert lines[0] == f"diamond {made.diamond} failed"
    assert lines[1].endswith("6 jobs: 4 completed, 1 failed, 1 cancelled")
    assert lines[2].split() == ["STEP", "TYPE", "STATUS", "JOBS", "AFTER", "JOB"]
    steps = {line.split()[0]: line for line in lines[3:]}
    assert list(steps) == ["top", "left", "right", "join"]
    assert steps["top"].split() == ["top", "wf.ok", "completed", "1", "completed", "-",
                                    made.steps["top"][0]]  # fmt: skip
    assert steps["left"].split() == ["left", "wf.bad", "failed", "1", "failed", "top",
                                     made.steps["left"][0]]  # fmt: skip
    assert steps["right"].split() == ["right", "wf.ok", "completed", "3", "completed", "top",
                                      "3", "jobs"]  # fmt: skip
    assert steps["join"].split()[:6] == ["join", "wf.ok", "cancelled", "1", "cancelled", "left,"]

    fan = jobledger("--db", db, "workflows", "show", made.fan, cwd=tmp_path, check=True).stdout
    assert len(fan.splitlines()) == 3 + 2  # one row per step, not per job
    assert "split (runs on failure)" in fan

    as_json = json.loads(
        jobledger(
            "--db", db, "workflows", "show", made.diamond, "--json", cwd=tmp_path, check=True
        ).stdout
    )  # fmt: skip
    assert [s["key"] for s in as_json["steps"]] == ["top", "left", "right", "join"]
    assert len(as_json["jobs"]) == 6
    assert len(as_json["edges"]) == 8


def test_an_unknown_workflow_is_an_error(db: str, tmp_path: Path) -> None:
    build(db)
    missing = jobledger("--db", db, "workflows", "show", "nope", cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert missing.stderr.strip() == (
        "jobledger: error: JOB_WORKFLOW_NOT_FOUND: no workflow with id 'nope'"
    )


def test_an_empty_database_lists_no_workflows(db: str, tmp_path: Path) -> None:
    asyncio.run(jl.JobManager(db).stop())  # the schema, and nothing in it
    listed = jobledger("--db", db, "workflows", "list", cwd=tmp_path, check=True)
    assert listed.stdout.strip() == "no workflows"


def test_a_retried_workflow_shows_the_steps_it_reads_from_the_old_one(
    db: str, tmp_path: Path
) -> None:
    jobs = jl.JobManager(db, startup_delay=0)
    part = jl.JobType("wf.retry.part", dict)
    broken = {"second": True}

    @jobs.handler(part, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def run_part(ctx: jl.JobContext[dict[str, object]]) -> int:
        if ctx.payload.get("fail") and broken["second"]:
            raise jl.PermanentError("not yet")
        return len(ctx.upstream)

    async def main() -> tuple[str, str]:
        async with jobs:
            wf = jobs.workflow("twice")
            first = wf.add(part, {}, name="first")
            wf.add(part, {"fail": True}, name="second", after=[first])
            old = await wf.enqueue().finished
            broken["second"] = False
            new = await jobs.retry_workflow(old.id).finished
            assert new.status == "completed"
            return old.id, new.id

    old_id, new_id = asyncio.run(main())
    shown = jobledger("--db", db, "workflows", "show", new_id, cwd=tmp_path, check=True).stdout
    lines = shown.splitlines()
    assert lines[0] == f"twice {new_id} completed"
    steps = {line.split()[0]: line for line in lines[3:]}
    # The completed step of the old workflow is drawn as the new one's upstream.
    assert "(other workflow)" in steps["first"]
    assert f"first (workflow {old_id})" in steps["second"]
    shown_json = jobledger(
        "--db", db, "workflows", "show", new_id, "--json", cwd=tmp_path, check=True
    )
    as_json = json.loads(shown_json.stdout)
    assert as_json["retry_of"] == old_id
    outside = [s for s in as_json["steps"] if s["outside"]]
    assert [s["name"] for s in outside] == ["first"]
