"""A bad option value is a usage error: exit 2, click's `Invalid value for '--x'` line,
no traceback and no Python class name (they used to leak as `OverflowError: ...`)."""

from __future__ import annotations

import pytest

from tests.cli.conftest import Cli

HUGE = "100000000000000000000000"

BAD = [
    ("jobs", "list", "--limit", "0"),
    ("jobs", "list", "--limit", "100000"),
    ("jobs", "list", "--offset", "-1"),
    ("jobs", "list", "--offset", HUGE),
    ("jobs", "list", "--status", "bogus"),
    ("jobs", "list", "--status", "pending,nope"),
    ("jobs", "wait", "ID", "--timeout", "nan"),
    ("jobs", "wait", "ID", "--timeout", "-1"),
    ("jobs", "wait", "ID", "--interval", "inf"),
    ("jobs", "wait", "ID", "--interval", "0"),
    ("jobs", "enqueue", "t", "--delay", "1e300"),
    ("jobs", "enqueue", "t", "--delay", "nan"),
    ("jobs", "enqueue", "t", "--priority", HUGE),
    ("jobs", "enqueue", "t", "--priority", "x"),
    ("jobs", "enqueue", "t", "--max-attempts", "0"),
    ("jobs", "enqueue", "t", "--max-attempts", HUGE),
    ("gc", "--older-than", "inf"),
    ("gc", "--older-than", "nan"),
    ("gc", "--older-than", "1e30"),
    ("worker", "m:jobs", "--startup-delay", "inf"),
    ("worker", "m:jobs", "--process-max-concurrency", "0"),
    ("worker", "m:jobs", "--process-max-concurrency", HUGE),
    ("worker", "m:jobs", "--log-level", "loud"),
    ("serve", "--poll", "nan"),
    ("serve", "--port", "70000"),
    ("serve", "--origin", "jobs.example.com"),
    ("serve", "--origin", "ftp://jobs.example.com"),
]


@pytest.mark.parametrize("args", BAD, ids=" ".join)
def test_bad_option_value_exits_2_with_a_usage_line(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    option = next(a for a in args if a.startswith("--"))
    assert line.startswith(f"jobledger: error: Invalid value for '{option}': "), line
    assert "--help" in line
    for leak in ("Traceback", "Error:", "OverflowError", "ValueError"):
        assert leak not in line


@pytest.mark.parametrize("payload", ["NaN", "1e999", '{"x": -Infinity}'])
def test_non_json_numbers_in_a_payload_exit_2(cli: Cli, payload: str) -> None:
    result = cli("jobs", "enqueue", "t", "--payload", payload)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("jobledger: error: --payload is not valid JSON: ")


def test_a_host_that_does_not_resolve_exits_2(cli: Cli) -> None:
    cli("jobs", "enqueue", "t", "--allow-unknown-type")  # serve reads an existing database
    result = cli("serve", "--host", "no-such-host.invalid", "--token", "t", "--port", "0")
    assert result.exit_code == 2, result.output
    assert "--host 'no-such-host.invalid' does not resolve" in result.stderr
