"""`jobledger jobs retry`, run as a child process on both backends (`--db PATH` or
`--db postgresql://...`), with and without `--app`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jobledger as jl
from tests.cli.conftest import jobledger
from tests.conftest import db_rows

BOOM = jl.JobType("math.boom", dict)
ADD = jl.JobType("math.add", dict)


def _ended(db: str) -> dict[str, str]:
    """Two failed jobs in two queues, a completed one, and a pending one."""
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(BOOM, recovery="retry")
    async def boom(ctx: jl.JobContext[dict[str, object]]) -> None:
        raise jl.PermanentError("it exploded")

    @jobs.handler(ADD, recovery="retry")
    async def add(ctx: jl.JobContext[dict[str, object]]) -> int:
        return 1

    async def main() -> dict[str, str]:
        async with jobs:
            made = {
                "failed_a": jobs.enqueue(BOOM, {"n": 1}, queue="a", idempotency_key="k"),
                "failed_b": jobs.enqueue(BOOM, {"n": 2}, queue="b"),
                "completed": jobs.enqueue(ADD, {"a": 1, "b": 2}),
            }
            for h in made.values():
                await asyncio.wait_for(h.finished, 20)
            ids = {name: h.id for name, h in made.items()}
        ids["pending"] = jobs.enqueue(ADD, {"a": 0, "b": 0}).id  # after stop: just written
        return ids

    return asyncio.run(main())


def _retry_of(db: str, job_id: str) -> tuple[str, str | None, str, str | None]:
    rows = db_rows(
        db, "SELECT status, retry_of, payload, idempotency_key FROM jobs WHERE id = ?", (job_id,)
    )
    assert len(rows) == 1, rows
    status, retry_of, payload, key = rows[0]
    return str(status), retry_of, str(payload), key


def test_retry_one_job_prints_the_new_id(db: str, app_dir: Path) -> None:
    ids = _ended(db)
    done = jobledger("--db", db, "jobs", "retry", ids["failed_a"], cwd=app_dir, check=True)
    new_id = done.stdout.strip()
    assert new_id not in ids.values()
    status, retry_of, payload, key = _retry_of(db, new_id)
    assert (status, retry_of, json.loads(payload), key) == (
        "pending",
        ids["failed_a"],
        {"n": 1},
        None,
    )
    assert _retry_of(db, ids["failed_a"])[0] == "failed"  # the old row is untouched

    shown = json.loads(
        jobledger("--db", db, "jobs", "show", new_id, cwd=app_dir, check=True).stdout
    )
    assert shown["retry_of"] == ids["failed_a"]
    old = json.loads(jobledger("--db", db, "jobs", "show", ids["failed_a"], cwd=app_dir).stdout)
    assert old["retry_of"] is None

    # Without --app a payload only has to be JSON.
    other = jobledger(
        "--db", db, "jobs", "retry", ids["completed"], "--payload", '{"a": 5}', cwd=app_dir
    )
    assert other.returncode == 0, other.stderr
    assert json.loads(_retry_of(db, other.stdout.strip())[2]) == {"a": 5}


def test_retry_refusals_and_their_exit_codes(db: str, app_dir: Path) -> None:
    ids = _ended(db)
    before = db_rows(db, "SELECT id FROM jobs ORDER BY id")

    live = jobledger("--db", db, "jobs", "retry", ids["pending"], cwd=app_dir)
    assert (live.returncode, live.stdout) == (1, "")
    assert "JOB_NOT_RETRYABLE" in live.stderr
    missing = jobledger("--db", db, "jobs", "retry", "no-such-job", cwd=app_dir)
    assert missing.returncode == 1
    assert "JOB_NOT_FOUND" in missing.stderr
    bad_json = jobledger(
        "--db", db, "jobs", "retry", ids["failed_a"], "--payload", "{", cwd=app_dir
    )
    assert bad_json.returncode == 2
    # With --app the payload is validated against the handler's type (math.add: Add).
    invalid = jobledger(
        "--db", db, "jobs", "retry", ids["completed"], "--payload", '{"a": "x"}',
        "--app", "cliapp:jobs", cwd=app_dir,
    )  # fmt: skip
    assert invalid.returncode == 2
    assert "JOB_PAYLOAD_INVALID" in invalid.stderr
    for args in (
        (),  # neither an id nor --status
        ("--status", "pending"),
        ("--status", "failed", "--payload", "{}"),
        (ids["failed_a"], "--status", "failed"),
        ("--status", "failed", "--limit", "0"),
    ):
        refused = jobledger("--db", db, "jobs", "retry", *args, cwd=app_dir)
        assert refused.returncode == 2, (args, refused.stderr)
    assert db_rows(db, "SELECT id FROM jobs ORDER BY id") == before


def test_retry_by_status_queue_and_type_prints_one_id_per_line(db: str, app_dir: Path) -> None:
    ids = _ended(db)

    by_queue = jobledger(
        "--db", db, "jobs", "retry", "--status", "failed", "--queue", "b", cwd=app_dir, check=True
    )
    (one,) = by_queue.stdout.split()
    assert _retry_of(db, one)[1] == ids["failed_b"]

    every = jobledger(
        "--db", db, "jobs", "retry", "--status", "failed,completed", "--type", "math.boom",
        cwd=app_dir, check=True,
    )  # fmt: skip
    # failed_b was re-run already; completed is not a math.boom.
    (two,) = every.stdout.split()
    assert _retry_of(db, two)[1] == ids["failed_a"]

    limited = jobledger(
        "--db", db, "jobs", "retry", "--status", "completed", "--limit", "1", cwd=app_dir,
        check=True,
    )  # fmt: skip
    (three,) = limited.stdout.split()
    assert _retry_of(db, three)[1] == ids["completed"]
    nothing = jobledger("--db", db, "jobs", "retry", "--status", "failed", cwd=app_dir, check=True)
    assert nothing.stdout == ""


def test_retry_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    done = jobledger("--db", str(missing), "jobs", "retry", "--status", "failed", cwd=tmp_path)
    assert done.returncode == 1
    assert "no jobledger database" in done.stderr
    assert not missing.exists()
