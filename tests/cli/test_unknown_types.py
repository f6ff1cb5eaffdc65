"""A type nothing will ever run: `jobs enqueue` without --app refuses it, and `doctor`
warns about waiting jobs that no live worker handles. On both backends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jobledger as jl
from tests.cli.conftest import Cli
from tests.conftest import is_postgres


def test_enqueue_without_app_refuses_a_type_the_database_never_heard_of(cli_on: Cli) -> None:
    cli = cli_on
    refused = cli("jobs", "enqueue", "no.such.type", "--payload", "{}")
    assert refused.exit_code == 2, refused.output
    [line] = refused.stderr.splitlines()
    assert line.startswith("jobledger: error: JOB_UNKNOWN_TYPE: no worker of ")
    assert "'no.such.type'" in line
    assert "--app MODULE:ATTR" in line
    assert "--allow-unknown-type" in line
    if not is_postgres(cli.db):
        assert not Path(cli.db).exists()  # refusing creates no database

    forced = cli("jobs", "enqueue", "no.such.type", "--allow-unknown-type")
    assert forced.exit_code == 0, forced.stderr
    # Now a job has the type: it is known, and a second enqueue needs no flag.
    again = cli("jobs", "enqueue", "no.such.type")
    assert again.exit_code == 0, again.stderr
    assert cli("jobs", "enqueue", "no.such.typo").exit_code == 2


def test_a_type_a_worker_row_lists_is_known_even_after_the_worker_stopped(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs

    async def start_and_stop() -> None:
        async with jobs:
            pass

    asyncio.run(start_and_stop())  # registers the worker row with its handlers, then stops
    workers = json.loads(cli("doctor", "--json").stdout)["workers"]
    assert [(w["state"], w["handlers"]) for w in workers] == [
        ("stopped", ["math.add", "math.boom"])
    ]
    ok = cli("jobs", "enqueue", "math.add", "--payload", '{"a": 1, "b": 2}')
    assert ok.exit_code == 0, ok.stderr
    assert cli("jobs", "enqueue", "math.other").exit_code == 2


def test_doctor_warns_about_waiting_jobs_no_live_worker_handles(cli_on: Cli) -> None:
    cli = cli_on
    for _ in range(2):
        cli("jobs", "enqueue", "no.such.type", "--allow-unknown-type", "--delay", "600")
    jobs: jl.JobManager = cli.load().jobs
    jobs.enqueue("math.add", {"a": 1, "b": 2}, delay=600)

    # No worker at all: both types wait for nobody. A warning, not a problem: exit 0.
    alone = cli("doctor")
    assert alone.exit_code == 0, alone.stdout
    assert (
        "WARN waiting jobs of types no live worker handles: math.add (1), no.such.type (2)"
        in alone.stdout
    )
    assert alone.stdout.splitlines()[-1] == "no problems, 1 warning(s)"
    assert "healthy" not in alone.stdout

    async def with_a_live_worker() -> tuple[int, str, str]:
        async with jobs:
            # The CLI runs in this thread while the worker's loop waits: its row is fresh.
            text = cli("doctor")
            data = cli("doctor", "--json")
            return text.exit_code, text.stdout, data.stdout

    code, text, raw = asyncio.run(with_a_live_worker())
    assert code == 0, text
    assert "WARN waiting jobs of types no live worker handles: no.such.type (2)" in text
    data = json.loads(raw)
    assert (data["ok"], data["problems"], data["unhandled"]) == (True, [], {"no.such.type": 2})
    assert data["warnings"] == ["waiting jobs of types no live worker handles: no.such.type (2)"]


def test_doctor_says_ok_when_every_waiting_type_has_a_live_worker(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs
    jobs.enqueue("math.add", {"a": 1, "b": 2}, delay=600)

    async def with_a_live_worker() -> tuple[int, str]:
        async with jobs:
            result = cli("doctor")
            return result.exit_code, result.stdout

    code, text = asyncio.run(with_a_live_worker())
    assert code == 0, text
    assert "ok   waiting jobs of types no live worker handles: none" in text
    assert text.splitlines()[-1] == "healthy"
