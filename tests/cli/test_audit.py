"""`jobledger audit`, the audit entries the CLI's own actions write, and `schedules edit`,
on both backends (the `cli_on` fixture)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jobledger as jl
from jobledger.cli._common import cli_actor
from tests.cli.conftest import Cli


def _entries(cli: Cli, *args: str) -> list[dict[str, Any]]:
    result = cli("audit", "--json", *args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_cli_actions_are_audited_and_listed(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs

    async def go() -> tuple[str, str]:
        async with jobs:
            failed = jobs.enqueue("math.boom", {"x": 1})
            await asyncio.wait_for(failed.finished, 20)
        return failed.id, jobs.enqueue("math.add", {"a": 1, "b": 2}, delay=3600).id

    failed_id, pending_id = asyncio.run(go())
    sid = jobs.register_job_schedule(
        "math.add", {"a": 0, "b": 0}, trigger=jl.Cron("0 0 1 1 *"), name="yearly"
    )
    assert _entries(cli) == []
    assert "no audit entries" in cli("audit").stdout

    steps = [
        ("queues", "pause", "math.add"),
        ("queues", "limit", "math.add", "--concurrency", "2"),
        ("queues", "resume", "math.add"),
        ("jobs", "retry", failed_id),
        ("jobs", "cancel", pending_id, "--reason", "not needed"),
        ("schedules", "edit", sid, "--cron", "15 3 * * *", "--timezone", "Asia/Tokyo"),
        ("schedules", "pause", sid),
        ("schedules", "resume", sid),
        ("schedules", "run-now", sid),
    ]
    for step in steps:
        result = cli(*step)
        assert result.exit_code == 0, (step, result.output)

    entries = _entries(cli)
    assert [e["action"] for e in reversed(entries)] == [
        "queue.pause",
        "queue.limits",
        "queue.resume",
        "job.retry",
        "job.cancel",
        "schedule.trigger",
        "schedule.pause",
        "schedule.resume",
        "schedule.run_now",
    ]
    assert {e["actor"] for e in entries} == {cli_actor()}
    by_action = {e["action"]: e for e in entries}
    assert by_action["job.cancel"]["target"] == pending_id
    assert by_action["job.cancel"]["detail"] == {"outcome": "cancelled", "reason": "not needed"}
    assert by_action["queue.limits"]["detail"] == {"concurrency": 2, "rate_limit": None}
    assert by_action["schedule.trigger"]["detail"]["to"] == {
        "cron": "15 3 * * *",
        "timezone": "Asia/Tokyo",
    }
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    assert snap.trigger == jl.Cron("15 3 * * *", timezone="Asia/Tokyo")

    only = _entries(cli, "--action", "queue.pause")
    assert [e["target"] for e in only] == ["math.add"]
    assert _entries(cli, "--actor", "someone-else") == []
    assert len(_entries(cli, "--limit", "2", "--offset", "1")) == 2
    table = cli("audit").stdout
    assert "schedule.run_now" in table
    assert cli_actor() in table


def test_schedules_edit_refuses_bad_input_and_writes_nothing(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs
    sid = jobs.register_job_schedule("math.add", {"a": 0, "b": 0}, trigger=jl.Interval(60))
    for args, why in [
        ((), "give one of --cron or --every"),
        (("--cron", "* * * * *", "--every", "5"), "give one of --cron or --every"),
        (("--every", "5", "--timezone", "UTC"), "--timezone goes with --cron"),
        (("--cron", "61 * * * *"), "JOB_SCHEDULE_TRIGGER_INVALID"),
        (("--cron", "* * * * *", "--timezone", "Nowhere/Land"), "JOB_SCHEDULE_TRIGGER_INVALID"),
    ]:
        result = cli("schedules", "edit", sid, *args)
        assert result.exit_code != 0, args
        assert why in result.stderr, (args, result.stderr)
    missing = cli("schedules", "edit", "no-such-id", "--every", "5")
    assert "JOB_SCHEDULE_NOT_FOUND" in missing.stderr
    assert _entries(cli) == []
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    assert snap.trigger == jl.Interval(60)
