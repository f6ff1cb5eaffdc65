"""Every observing CLI command on both backends (`--db PATH` or `--db postgresql://...`),
with the same output: jobs list/show/wait/cancel/enqueue, queues, schedules, doctor, gc.
Run in-process (click's CliRunner) against a real file or a real PostgreSQL schema."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import jobledger as jl
from tests.cli.conftest import Cli
from tests.conftest import db_rows, is_postgres


def _run(cli: Cli, *payloads: tuple[str, object]) -> list[jl.JobSnapshot]:
    jobs: jl.JobManager = cli.load().jobs

    async def go() -> list[jl.JobSnapshot]:
        async with jobs:
            handles = [jobs.enqueue(name, payload) for name, payload in payloads]
            return [await asyncio.wait_for(h.finished, 20) for h in handles]

    return asyncio.run(go())


def test_jobs_queues_and_schedules_read_the_same_on_every_backend(cli_on: Cli) -> None:
    cli = cli_on
    ok, boom = _run(cli, ("math.add", {"a": 1, "b": 2}), ("math.boom", {}))
    waiting = cli("jobs", "enqueue", "math.add", "--payload", '{"a":5,"b":5}', "--delay", "600")
    assert waiting.exit_code == 0, waiting.stderr
    waiting_id = waiting.stdout.strip()

    listed = cli("jobs", "list")
    assert listed.exit_code == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:4]] == [
        waiting_id,
        boom.id,
        ok.id,
    ]
    assert "1-3 of 3" in listed.stdout
    shown = json.loads(cli("jobs", "show", ok.id).stdout)
    [done] = shown.pop("attempts")
    assert shown == ok.to_json()
    assert (done["attempt"], done["outcome"], done["error"]) == (1, "completed", None)
    [failed] = json.loads(cli("jobs", "show", boom.id).stdout)["attempts"]
    assert failed["outcome"] == "failed"
    assert 'raise jl.PermanentError("it exploded")' in failed["error"]["traceback"]
    logs = cli("jobs", "logs", boom.id)
    assert logs.exit_code == 0, logs.stderr
    [line] = logs.stdout.splitlines()
    assert line.endswith(" attempt 1 WARNING  about to explode")
    assert cli("jobs", "logs", boom.id, "--attempt", "2").stdout == ""
    assert cli("jobs", "logs", "no-such-id").exit_code == 1
    assert cli("jobs", "show", "no-such-id").exit_code == 1
    waited = cli("jobs", "wait", ok.id, "--json")
    assert waited.exit_code == 0
    assert json.loads(waited.stdout)["status"] == "completed"
    assert cli("jobs", "wait", boom.id).exit_code == 1

    counts = {q["name"]: q["counts"] for q in json.loads(cli("queues", "--json").stdout)}
    assert counts["math.add"] == {
        "pending": 0, "delayed": 1, "running": 0, "completed": 1, "failed": 0, "cancelled": 0,
        "waiting": 0,
    }  # fmt: skip
    assert counts["math.boom"]["failed"] == 1
    table = cli("queues").stdout.splitlines()
    assert table[1].split()[:8] == ["math.add", "math.add", "0", "1", "0", "1", "0", "0"]

    cancelled = cli("jobs", "cancel", waiting_id, "--reason", "not needed")
    assert cancelled.exit_code == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{waiting_id} cancelled"
    assert json.loads(cli("jobs", "show", waiting_id).stdout)["status"] == "cancelled"

    module = cli.load()
    jobs: jl.JobManager = module.jobs
    sid = jobs.register_job_schedule(
        module.ADD, module.Add(a=1, b=2), trigger=jl.Interval(seconds=3600), name="hourly"
    )
    asyncio.run(jobs.stop())
    row = next(line for line in cli("schedules", "list").stdout.splitlines() if sid in line)
    assert row.split()[1:6] == ["math.add", "hourly", "every", "3600s", "enabled"]
    assert json.loads(cli("schedules", "show", sid).stdout)["name"] == "hourly"
    paused = cli("schedules", "pause", sid)
    assert paused.exit_code == 0, paused.stderr
    assert json.loads(cli("schedules", "list", "--json").stdout)[0]["enabled"] is False


def test_schedule_changes_need_only_the_row_on_every_backend(cli_on: Cli) -> None:
    """run-now, pause and resume without `--app`: the job run-now writes is the manager's
    manual fire (payload, `schedule_id`, `last_run` set, calendar untouched), with the
    handler's queue, attempts and timeout taken from the schedule's newest job."""
    cli = cli_on
    add = jl.JobType("math.add", dict)
    jobs = jl.JobManager(cli.db)

    @jobs.handler(
        add, recovery="retry", queue="adders", timeout=30, retry=jl.RetryPolicy(max_attempts=5)
    )
    def adder(ctx: jl.JobContext[dict[str, int]]) -> None:
        return None

    sid = jobs.register_job_schedule(add, {"a": 1}, trigger=jl.Interval(seconds=3600))
    next_run = 4_102_444_800_000  # 2100-01-01, as a leader would have armed it
    db_rows(cli.db, "UPDATE job_schedules SET next_run = ? WHERE id = ?", (next_run, sid))

    def run_now() -> jl.JobSnapshot:
        ran = cli("schedules", "run-now", sid)
        assert ran.exit_code == 0, ran.stderr
        job = jobs.get(ran.stdout.strip())
        assert job is not None, ran.stdout
        assert (job.schedule_id, job.payload, job.idempotency_key) == (sid, {"a": 1}, None)
        return job

    # No job yet: the type's defaults, as `jobs enqueue TYPE` without --app.
    first = run_now()
    assert (first.queue, first.max_attempts, first.timeout) == ("math.add", 3, None)
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap is not None
    assert snap.last_run is not None
    assert snap.next_run is not None
    assert round(snap.next_run.timestamp() * 1000) == next_run
    # After the handler made one, its choices.
    assert asyncio.run(jobs.trigger_job_schedule_now_by_id(sid)) is True
    second = run_now()
    assert (second.queue, second.max_attempts, second.timeout) == ("adders", 5, 30.0)
    assert jobs.count(schedule_id=sid) == 3

    assert cli("schedules", "pause", sid).stdout.strip() == f"{sid} paused"
    paused = jobs.get_job_schedule_by_id(sid)
    assert paused is not None
    assert (paused.enabled, paused.next_run) == (False, None)
    assert cli("schedules", "resume", sid).stdout.strip() == f"{sid} resumed"
    resumed = jobs.get_job_schedule_by_id(sid)
    assert resumed is not None
    assert resumed.enabled is True
    missing = cli("schedules", "run-now", "no-such-schedule")
    assert missing.exit_code == 1
    assert "JOB_SCHEDULE_NOT_FOUND" in missing.stderr
    asyncio.run(jobs.stop())


def test_doctor_on_every_backend_reports_health_then_a_dead_worker(cli_on: Cli) -> None:
    cli = cli_on
    _run(cli, ("math.add", {"a": 1, "b": 1}))
    healthy = cli("doctor")
    assert healthy.exit_code == 0, healthy.stdout
    assert "healthy" in healthy.stdout
    report = json.loads(cli("doctor", "--json").stdout)
    assert report["ok"] is True
    assert report["backend"] == ("postgres" if is_postgres(cli.db) else "sqlite")
    assert report["schema_version"] == report["library_schema_version"]
    if is_postgres(cli.db):
        assert "connected: PostgreSQL" in healthy.stdout
        assert report["server_version"]
        assert json.loads(cli("doctor", "--json", "--checkpoint").stdout)["checkpoint"] is None
    else:
        assert "integrity_check: ok" in healthy.stdout
        assert report["journal_mode"] == "wal"

    job_id = cli("jobs", "enqueue", "math.add", "--payload", '{"a":1,"b":1}').stdout.strip()
    db_rows(
        cli.db,
        "INSERT INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at) "
        "VALUES ('ghost', 'elsewhere', 1, '[\"math.add=retry\"]', 1000, 1000)",
    )
    db_rows(
        cli.db,
        "UPDATE jobs SET status = 'running', worker_id = 'ghost', started_at = 1000 WHERE id = ?",
        (job_id,),
    )
    db_rows(cli.db, "DELETE FROM leader")
    db_rows(
        cli.db,
        "INSERT INTO leader (id, worker_id, term, expires_at) VALUES (1, 'ghost', 3, 2000)",
    )
    sick = cli("doctor")
    assert sick.exit_code == 1
    assert "running jobs of workers not alive: 1" in sick.stdout
    assert "workers: 0 alive, 1 dead (not stopped)" in sick.stdout
    assert "leader: ghost term 3 (expired at" in sick.stdout
    assert job_id in sick.stdout
    report = json.loads(cli("doctor", "--json").stdout)
    assert report["ok"] is False
    assert report["stuck_running"] == [job_id]
    assert report["leader"]["term"] == 3
    assert [w["state"] for w in report["workers"] if w["id"] == "ghost"] == ["dead"]


def test_gc_on_every_backend_deletes_old_finished_jobs(cli_on: Cli) -> None:
    cli = cli_on
    done = _run(cli, ("math.add", {"a": 1, "b": 1}), ("math.boom", {}))
    waiting = cli("jobs", "enqueue", "math.add", "--payload", "{}").stdout.strip()
    assert cli("gc").stdout.strip() == "deleted 0 finished job(s)"
    assert cli("gc", "--older-than", "0", "--dry-run").stdout.strip() == (
        "2 finished job(s) would be deleted"
    )
    time.sleep(0.01)  # finished_at is in milliseconds; make "older than 0 s" strict
    assert cli("gc", "--older-than", "0").stdout.strip() == "deleted 2 finished job(s)"
    left = [json.loads(line)["id"] for line in cli("jobs", "list", "--json").stdout.splitlines()]
    assert left == [waiting]
    assert all(cli("jobs", "show", s.id).exit_code == 1 for s in done)


def test_observing_commands_never_create_the_database(cli_on: Cli) -> None:
    cli = cli_on
    if is_postgres(cli.db):
        cli.db = cli.db.replace("schema=", "schema=absent_")
        missing = "no jobledger schema"
    else:
        cli.db = str(cli.dir / "absent.db")
        missing = "no jobledger database at"
    for args in (("jobs", "list"), ("queues",), ("schedules", "list"), ("doctor",), ("gc",)):
        result = cli(*args)
        assert result.exit_code == 1, args
        assert missing in result.stderr, (args, result.stderr)
    if not is_postgres(cli.db):
        assert not Path(cli.db).exists()


def test_enqueue_unique_for_and_debounce_on_every_backend(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs

    async def run_keyed() -> jl.JobSnapshot:
        async with jobs:
            handle = jobs.enqueue("math.add", {"a": 1, "b": 1}, idempotency_key="u")
            return await asyncio.wait_for(handle.finished, 20)

    done = asyncio.run(run_keyed())
    assert done.status == "completed"
    # Ended a moment ago: inside an hour's window, the same job; a plain key is free.
    again = cli("jobs", "enqueue", "math.add", "--key", "u", "--unique-for", "3600")
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() == done.id
    plain = cli("jobs", "enqueue", "math.add", "--key", "u")
    assert plain.stdout.strip() != done.id

    one = cli("jobs", "enqueue", "math.add", "--payload", '{"a": 1, "b": 0}', "--key", "d",
              "--debounce", "600")  # fmt: skip
    two = cli("jobs", "enqueue", "math.add", "--payload", '{"a": 2, "b": 0}', "--key", "d",
              "--debounce", "600")  # fmt: skip
    assert one.exit_code == two.exit_code == 0, two.stderr
    assert one.stdout == two.stdout
    shown = json.loads(cli("jobs", "show", one.stdout.strip()).stdout)
    assert (shown["status"], shown["payload"]) == ("delayed", {"a": 2, "b": 0})

    before = db_rows(cli.db, "SELECT count(*) FROM jobs")
    for args, message in [
        (["--debounce", "5"], "JOB_INVALID_OPTION: debounce needs an idempotency_key"),
        (["--key", "d", "--debounce", "0"], "JOB_INVALID_OPTION: debounce must be"),
        (["--key", "d", "--debounce", "5", "--unique-for", "5"], "not both"),
        (["--key", "d", "--debounce", "5", "--delay", "5"], "JOB_INVALID_OPTION"),
    ]:
        bad = cli("jobs", "enqueue", "math.add", *args)
        assert bad.exit_code == 2, args
        assert message in bad.stderr, bad.stderr
    assert cli("jobs", "enqueue", "math.add", "--key", "d", "--debounce", "nan").exit_code == 2
    assert db_rows(cli.db, "SELECT count(*) FROM jobs") == before


def test_doctor_reports_a_waiting_workflow_job_nothing_will_release(cli_on: Cli) -> None:
    cli = cli_on
    jobs: jl.JobManager = cli.load().jobs

    async def go() -> tuple[str, str]:
        async with jobs:
            wf = jobs.workflow("stranded")
            first = wf.add("math.add", {"a": 1, "b": 1}, name="first")
            wf.add("math.add", {"a": 2, "b": 2}, name="then", after=[first])
            h = wf.enqueue()
            # A hand edit that the release cannot undo: `then` counts one upstream job
            # more than it has, so the end of `first` leaves it waiting for good.
            then_id = h.jobs["then"][0].id
            db_rows(
                cli.db, "UPDATE jobs SET upstream_left = upstream_left + 1 WHERE id = ?", (then_id,)
            )
            await asyncio.wait_for(h.jobs["first"][0].finished, 20)
            return h.id, then_id

    _, then_id = asyncio.run(go())
    assert db_rows(cli.db, "SELECT status FROM jobs WHERE id = ?", (then_id,)) == [("waiting",)]
    report = cli("doctor")
    assert report.exit_code == 1, report.stdout
    assert "FAIL waiting workflow jobs whose upstream jobs have all finished: 1" in report.stdout
    assert f"{then_id} (nothing will release it" in report.stdout
    data = json.loads(cli("doctor", "--json").stdout)
    assert data["stranded_waiting"] == [then_id]
    assert data["ok"] is False
    cancelled = cli("jobs", "cancel", then_id)
    assert cancelled.exit_code == 0, cancelled.stderr
    assert json.loads(cli("doctor", "--json").stdout)["stranded_waiting"] == []


def test_schedules_backfill_writes_each_past_fire_once_on_every_backend(cli_on: Cli) -> None:
    """`schedules backfill ID --from --to` without `--app`: the jobs carry the natural
    keys, a second run writes none; `list` and `show` show overlap and jitter."""
    cli = cli_on
    add = jl.JobType("math.add", dict)
    jobs = jl.JobManager(cli.db)

    @jobs.handler(add, recovery="retry")
    def adder(ctx: jl.JobContext[dict[str, int]]) -> None:
        return None

    sid = jobs.register_job_schedule(
        add, {"a": 1}, trigger=jl.Cron("0 * * * *"), overlap="skip", jitter=90, enabled=False
    )
    first = cli(
        "schedules", "backfill", sid, "--from", "2026-01-01T00:00", "--to", "2026-01-01T05:00"
    )
    assert first.exit_code == 0, first.stderr
    assert first.stdout.strip() == "5 job(s) written"
    again = cli(
        "schedules",
        "backfill",
        sid,
        "--from",
        "2026-01-01T00:00+00:00",
        "--to",
        "2026-01-01T05:00Z",
    )
    assert again.stdout.strip() == "0 job(s) written"
    keys = sorted(str(s.idempotency_key) for s in jobs.list(schedule_id=sid))
    assert keys == [f"schedule:{sid}:{1_767_225_600_000 + h * 3_600_000}" for h in range(5)]
    shown = json.loads(cli("schedules", "show", sid).stdout)
    assert (shown["overlap"], shown["jitter"], shown["skipped_fires"]) == ("skip", 90.0, 0)
    assert "skip, jitter 90s" in cli("schedules", "list").stdout
    for bad in (
        ["--from", "2026-01-02T00:00", "--to", "2026-01-01T00:00"],
        ["--from", "soon", "--to", "2026-01-01T00:00"],
    ):
        refused = cli("schedules", "backfill", sid, *bad)
        assert refused.exit_code == 1
        assert "JOB_INVALID_OPTION" in refused.stderr
    missing = cli("schedules", "backfill", "nope", "--from", "2026-01-01", "--to", "2026-01-02")
    assert missing.exit_code == 1
    assert "JOB_SCHEDULE_NOT_FOUND" in missing.stderr
    assert jobs.count(schedule_id=sid) == 5
