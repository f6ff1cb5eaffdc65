"""Progress and attempt mean one thing per surface (docs/reference/cli.md, "Attempts and
progress"): people (dashboard, `jobs list`, `jobs wait`) see a completed job at 100% and
attempts counted from 1 ("2 of 2"); machines (`to_json()`, the API, `--json`) get the
row's values: progress as last reported, `attempt` from 0."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
from click.testing import CliRunner

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger.cli import main
from jobledger.testing import drain
from tests.http.conftest import WAIT, Item, running_server

TEN = jl.JobType("surfaces.ten", Item)
FLAKY = jl.JobType("surfaces.flaky", Item)


def _jobs(db: str) -> tuple[str, str]:
    """A job that reports 10% and completes, and one that completes on its second attempt."""
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(TEN, recovery="retry")
    async def ten(ctx: jl.JobContext[Item]) -> None:
        await ctx.report_progress(10, "started")

    @jobs.handler(FLAKY, recovery="retry", retry=jl.RetryPolicy(max_attempts=2, base_delay=0))
    async def flaky(ctx: jl.JobContext[Item]) -> None:
        if ctx.attempt == 0:
            raise RuntimeError("once")

    async def run() -> tuple[str, str]:
        async with jobs:
            ten_id = jobs.enqueue(TEN, Item(n=1)).id
            flaky_id = jobs.enqueue(FLAKY, Item(n=2)).id
            done = {s.id: s for s in await drain(jobs, timeout=WAIT)}
        assert done[ten_id].progress == 10  # the row keeps what was reported
        assert done[flaky_id].attempt == 1
        return ten_id, flaky_id

    return asyncio.run(run())


def test_people_see_a_completed_job_at_100_and_attempts_from_1(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    ten_id, flaky_id = _jobs(db)

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["--db", db, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    rows = {line.split()[0]: line.split() for line in cli("jobs", "list").splitlines()[1:-1]}
    # ID TYPE STATUS QUEUE ATTEMPT PROGRESS CREATED FINISHED
    assert rows[ten_id][2:6] == ["completed", "surfaces.ten", "1/3", "100%"]
    assert rows[flaky_id][2:6] == ["completed", "surfaces.flaky", "2/2", "100%"]
    assert "100.0%" in CliRunner().invoke(main, ["--db", db, "jobs", "wait", ten_id]).stderr

    shown = json.loads(cli("jobs", "show", ten_id))
    assert (shown["progress"], shown["attempt"]) == (10, 0)
    listed = {j["id"]: j for j in map(json.loads, cli("jobs", "list", "--json").splitlines())}
    assert (listed[flaky_id]["attempt"], listed[flaky_id]["max_attempts"]) == (1, 2)

    app = create_app(db, poll_interval=0.02)
    try:
        with running_server(app) as url:
            overview = httpx.get(f"{url}/jobs", timeout=10).text
            ten_page = httpx.get(f"{url}/jobs/{ten_id}", timeout=10).text
            flaky_page = httpx.get(f"{url}/jobs/{flaky_id}", timeout=10).text
            api = httpx.get(f"{url}/api/jobs/{ten_id}", timeout=10).json()
            api_flaky = httpx.get(f"{url}/api/jobs/{flaky_id}", timeout=10).json()
    finally:
        app.state.read_model.close()
    row = re.search(rf'href="/jobs/{ten_id}".*?</tr>', overview, flags=re.S)
    assert row is not None
    assert '<span class="pct">100%</span>' in row[0]
    assert '<td class="num">1/3</td>' in row[0]
    assert 'id="progress" class="p-completed" max="100" value="100"' in ten_page
    assert '<span id="progress-text">100%</span>' in ten_page
    assert re.search(r'data-field="attempt"[^>]*>2 of 2<', flaky_page), flaky_page
    assert (api["progress"], api["attempt"]) == (10, 0)
    assert (api_flaky["attempt"], api_flaky["max_attempts"]) == (1, 2)
