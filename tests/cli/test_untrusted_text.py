"""Stored strings are shown as plain text: no rich markup, no raw control characters.

The hostile names are written straight into the SQLite file, as an older release, another
tool or an attacker with write access could have: the public API may refuse them.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing

import pytest

import jobledger as jl
from jobledger.testing import drain
from tests.cli.conftest import Cli

# Markup that would crash rich (`[/]` closes nothing) or make a hyperlink, an ESC
# sequence (clear the screen), a C1 CSI, DEL and a right-to-left override.
# Short enough that no table column is cut.
HOSTILE = "[/][link=x]c\x1b[2J\x9b\x7f\u202e"
SHOWN = "[/][link=x]c\\x1b[2J\\x9b\\x7f\\u202e"
RAW = ("\x1b", "\x9b", "\x7f", "\u202e")


def _hostile_database(cli: Cli) -> str:
    """A job of each kind (done, waiting), a queue and a schedule, all renamed HOSTILE."""
    jobs: jl.JobManager = cli.load().jobs

    async def go() -> str:
        async with jobs:
            jobs.enqueue("math.add", {"a": 1, "b": 2})
            (done,) = await drain(jobs, timeout=20)
        return done.id

    done_id = asyncio.run(go())
    jobs.enqueue("math.add", {"a": 3, "b": 4}, delay=600)
    jobs.register_job_schedule("math.add", {"a": 1, "b": 1}, trigger=jl.Interval(seconds=3600))
    asyncio.run(jobs.stop())
    with closing(sqlite3.connect(cli.db, isolation_level=None)) as conn:
        conn.execute("UPDATE jobs SET type = ?, queue = ?, progress_detail = ?", (HOSTILE,) * 3)
        conn.execute("UPDATE queues SET name = ?, type = ?", (HOSTILE, HOSTILE))
        conn.execute("UPDATE job_schedules SET type = ?, name = ?", (HOSTILE, HOSTILE))
    return done_id


@pytest.mark.parametrize(
    "args",
    [
        ("queues",),
        ("jobs", "list"),
        ("schedules", "list"),
        ("doctor",),
    ],
)
def test_hostile_names_are_plain_visible_text(cli: Cli, args: tuple[str, ...]) -> None:
    _hostile_database(cli)
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert SHOWN in result.stdout
    for raw in RAW:
        assert raw not in result.output


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def test_json_output_escapes_what_json_allows_raw(cli: Cli) -> None:
    done_id = _hostile_database(cli)
    for args, documents in (
        (("jobs", "list", "--json"), lambda out: out.splitlines()),  # one job per line
        (("jobs", "show", done_id), lambda out: [out]),
        (("queues", "--json"), lambda out: [out]),
        (("schedules", "list", "--json"), lambda out: [out]),
    ):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        for raw in RAW:
            assert raw not in result.output, args
        for doc in documents(result.stdout):
            # Still JSON, and it still carries the stored value itself.
            assert HOSTILE in _strings(json.loads(doc)), args


def test_wait_shows_a_hostile_progress_detail_as_text(cli: Cli) -> None:
    done_id = _hostile_database(cli)
    result = cli("jobs", "wait", done_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{done_id} completed"
    assert "[/][link=x]c" in result.stderr  # the bar's description, not parsed as markup
    for raw in RAW:
        assert raw not in result.output
