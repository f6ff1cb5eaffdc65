"""`jobledger search-index add|drop|list` and `jobledger jobs list --search`, on both
backends (`cli_on`); and that neither creates a database where there is none."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jobledger as jl
from jobledger.cli._common import cli_actor
from tests.cli.conftest import Cli
from tests.conftest import run


def _ids(cli: Cli, *args: str) -> list[str]:
    result = cli("jobs", "list", "--json", *args)
    assert result.exit_code == 0, result.output
    return [json.loads(line)["id"] for line in result.stdout.splitlines()]


def test_add_list_drop_audited_and_searched(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs
    ada = jobs.enqueue("math.add", {"a": 7, "b": 1}).id
    other = jobs.enqueue("math.add", {"a": 8, "b": 1}).id
    run(jobs.stop())

    assert "no search indexes" in cli("search-index", "list").stdout
    assert _ids(cli, "--search", "payload.a:7") == [ada]  # read from every row

    added = cli("search-index", "add", "payload.a")
    assert (added.exit_code, added.stdout) == (0, "payload.a: indexed\n")
    again = cli("search-index", "add", "payload.a")
    assert (again.exit_code, again.stdout) == (0, "payload.a: already indexed\n")
    listed = cli("search-index", "list", "--json")
    assert [json.loads(line) for line in listed.stdout.splitlines()] == ["payload.a"]
    assert _ids(cli, "-q", "payload.a:7") == [ada]  # now from the index
    assert _ids(cli, "-q", "payload.a:8", "--status", "pending") == [other]
    table = cli("jobs", "list", "-q", "payload.a:7")
    assert ada in table.stdout
    assert "1-1 of 1" in table.stdout

    dropped = cli("search-index", "drop", "payload.a")
    assert (dropped.exit_code, dropped.stdout) == (0, "payload.a: dropped\n")
    assert cli("search-index", "drop", "payload.a").stdout == "payload.a: had no index\n"
    assert _ids(cli, "-q", "payload.a:7") == [ada]

    audit = cli("audit", "--json")
    entries = [json.loads(line) for line in audit.stdout.splitlines()]
    assert [(e["action"], e["target"], e["detail"]) for e in entries] == [
        ("search_index.drop", "payload.a", {"changed": False}),
        ("search_index.drop", "payload.a", {"changed": True}),
        ("search_index.add", "payload.a", {"changed": False}),
        ("search_index.add", "payload.a", {"changed": True}),
    ]
    assert {e["actor"] for e in entries} == {cli_actor()}


def test_bad_input_exits_2_and_writes_nothing(cli_on: Cli) -> None:
    cli = cli_on
    run(cli.load().jobs.stop())  # the database exists
    for args in (
        ("search-index", "add", "payload"),
        ("search-index", "add", "output.x"),
        ("search-index", "drop", "payload.a b"),
        ("jobs", "list", "--search", "payload.x"),
        ("jobs", "list", "-q", "ab"),
    ):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "JOB_INVALID_OPTION" in result.output, args
    assert "no search indexes" in cli("search-index", "list").stdout
    assert cli("audit", "--json").stdout == ""


def test_no_database_is_created_where_there_is_none(cli: Cli, tmp_path: Path) -> None:
    missing = str(tmp_path / "typo.db")
    for args in (("add", "payload.a"), ("drop", "payload.a"), ("list",)):
        result = cli("--db", missing, "search-index", *args, db=False)
        assert result.exit_code == 1, (args, result.output)
        assert "no jobledger database" in result.output
    assert not os.path.exists(missing)
