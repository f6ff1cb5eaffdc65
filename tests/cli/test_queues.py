"""`jobledger queues` (list), `queues pause|resume Q` and `queues limit Q`, run as child
processes on both backends; the settings they write are what a manager reads back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jobledger as jl
from tests.cli.conftest import jobledger


def _limits(db: str, queue: str) -> jl.QueueLimits:
    jobs = jl.JobManager(db)
    try:
        return jobs.queue_limits(queue)
    finally:
        asyncio.run(jobs.stop())


def test_pause_limit_resume_and_the_listing(db: str, tmp_path: Path) -> None:
    jobs = jl.JobManager(db)
    jobs.enqueue(jl.JobType("cli.q", dict), {"n": 1}, queue="kb/1")
    asyncio.run(jobs.stop())

    paused = jobledger("--db", db, "queues", "pause", "kb/1", cwd=tmp_path, check=True)
    assert paused.stdout.strip() == "kb/1: paused, concurrency -, rate -"
    limited = jobledger(
        "--db", db, "queues", "limit", "kb/1", "--concurrency", "3", "--rate", "10/s",
        "--json", cwd=tmp_path, check=True,
    )  # fmt: skip
    assert json.loads(limited.stdout) == {
        "queue": "kb/1",
        "concurrency": 3,
        "rate_limit": {"limit": 10, "per": 1.0, "text": "10/s"},
        "paused": True,
    }
    assert _limits(db, "kb/1") == jl.QueueLimits("kb/1", 3, jl.RateLimit(10, 1), True)

    listed = jobledger("--db", db, "queues", "--json", cwd=tmp_path, check=True)
    (row,) = [q for q in json.loads(listed.stdout) if q["name"] == "kb/1"]
    assert (row["counts"]["pending"], row["concurrency"], row["paused"]) == (1, 3, True)
    assert row["rate_limit"]["text"] == "10/s"
    table = jobledger("--db", db, "queues", cwd=tmp_path, check=True)
    assert "paused, concurrency 3, rate 10/s" in table.stdout

    jobledger("--db", db, "queues", "resume", "kb/1", cwd=tmp_path, check=True)
    cleared = jobledger("--db", db, "queues", "limit", "kb/1", "--clear", cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    assert _limits(db, "kb/1") == jl.QueueLimits("kb/1", None, None, False)


def test_bad_limits_exit_1_with_a_code_and_write_nothing(db: str, tmp_path: Path) -> None:
    cases = [
        ("--rate", "ten/s"),
        ("--rate", "0/s"),
        ("--concurrency", "0"),
    ]
    for option, value in cases:
        proc = jobledger("--db", db, "queues", "limit", "q", option, value, cwd=tmp_path)
        assert proc.returncode == 1, (option, value, proc.stdout, proc.stderr)
        assert "JOB_INVALID_OPTION" in proc.stderr
    none = jobledger("--db", db, "queues", "limit", "q", cwd=tmp_path)
    assert none.returncode == 1
    assert "JOB_INVALID_OPTION" in none.stderr
    assert _limits(db, "q") == jl.QueueLimits("q", None, None, False)
