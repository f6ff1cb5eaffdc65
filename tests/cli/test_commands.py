"""Every CLI command, run in-process (click's CliRunner) against a real database file."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from typing import Any

import pytest

import jobledger as jl
from jobledger.testing import drain
from tests.cli.conftest import Cli


def _run_jobs(cli: Cli, *payloads: tuple[str, Any]) -> list[jl.JobSnapshot]:
    """Enqueue (type name, payload) pairs through the app's manager and run them all."""
    jobs: jl.JobManager = cli.load().jobs

    async def go() -> list[jl.JobSnapshot]:
        async with jobs:
            for name, payload in payloads:
                jobs.enqueue(name, payload)
            return await drain(jobs, timeout=20)

    return asyncio.run(go())


def _lines(text: str) -> list[str]:
    return text.strip().splitlines()


def test_list_show_and_queues(cli: Cli) -> None:
    done = _run_jobs(cli, ("math.add", {"a": 1, "b": 2}), ("math.boom", {"x": 1}))
    ok, boom = done
    pending = cli("jobs", "enqueue", "math.add", "--payload", '{"a": 5, "b": 5}', "--delay", "600")
    assert pending.exit_code == 0, pending.stderr
    waiting_id = pending.stdout.strip()

    listed = cli("jobs", "list")
    assert listed.exit_code == 0
    assert listed.stdout.splitlines()[0].split() == [
        "ID", "TYPE", "STATUS", "QUEUE", "ATTEMPT", "PROGRESS", "CREATED", "FINISHED",
    ]  # fmt: skip
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:4]] == [
        waiting_id,
        boom.id,
        ok.id,
    ]
    assert "1-3 of 3" in listed.stdout

    as_json = [json.loads(line) for line in _lines(cli("jobs", "list", "--json").stdout)]
    assert [j["id"] for j in as_json] == [waiting_id, boom.id, ok.id]
    only = cli("jobs", "list", "--json", "--status", "failed,completed", "--type", "math.add")
    assert [json.loads(line)["id"] for line in _lines(only.stdout)] == [ok.id]
    assert _lines(cli("jobs", "list", "--json", "--queue", "math.boom").stdout) == [
        json.dumps(boom.to_json(), ensure_ascii=False)
    ]
    assert cli("jobs", "list", "--status", "nope").exit_code == 2
    assert "no jobs match" in cli("jobs", "list", "--type", "nothing").stdout

    shown = cli("jobs", "show", ok.id)
    shown_json = json.loads(shown.stdout)
    assert [a["outcome"] for a in shown_json.pop("attempts")] == ["completed"]
    assert shown_json == ok.to_json()
    missing = cli("jobs", "show", "no-such-id")
    assert missing.exit_code == 1
    assert _lines(missing.stderr) == [
        "jobledger: error: JOB_NOT_FOUND: no job with id 'no-such-id'"
    ]

    queues = cli("queues", "--json")
    counts = {q["name"]: q["counts"] for q in json.loads(queues.stdout)}
    assert counts["math.add"]["completed"] == 1
    assert counts["math.add"]["delayed"] == 1
    assert counts["math.boom"]["failed"] == 1
    table = cli("queues").stdout.splitlines()
    assert table[0].split()[:4] == ["QUEUE", "TYPE", "PENDING", "DELAYED"]
    assert table[1].split()[:8] == ["math.add", "math.add", "0", "1", "0", "1", "0", "0"]


def test_wait_exit_codes(cli: Cli) -> None:
    ok, boom = _run_jobs(cli, ("math.add", {"a": 1, "b": 1}), ("math.boom", {}))
    completed = cli("jobs", "wait", ok.id)
    assert completed.exit_code == 0
    assert completed.stdout.strip() == f"{ok.id} completed"
    failed = cli("jobs", "wait", boom.id)
    assert failed.exit_code == 1
    assert failed.stdout.strip() == f"{boom.id} failed: JOB_HANDLER_THREW: it exploded"
    as_json = cli("jobs", "wait", boom.id, "--json")
    assert json.loads(as_json.stdout)["error"]["message"] == "it exploded"

    waiting = cli("jobs", "enqueue", "math.add", "--payload", '{"a":1,"b":1}').stdout.strip()
    began = time.monotonic()
    timed_out = cli("jobs", "wait", waiting, "--timeout", "0.1", "--interval", "0.02")
    assert time.monotonic() - began < 5
    assert timed_out.exit_code == 124
    assert timed_out.stdout.strip() == f"{waiting} pending"
    assert "timed out after 0.1s; the job is still pending" in timed_out.stderr
    assert cli("jobs", "wait", "nope").exit_code == 1


def test_enqueue_without_app_stores_the_json_as_given(cli: Cli) -> None:
    first = cli(
        "jobs", "enqueue", "math.add", "--payload", '{"a": "not a number"}', "--priority", "3",
        "--key", "k1", "--metadata", '{"who": "cli"}', "--max-attempts", "1",
        "--allow-unknown-type",
    )  # fmt: skip
    assert first.exit_code == 0, first.stderr
    job_id = first.stdout.strip()
    again = cli("jobs", "enqueue", "math.add", "--payload", "{}", "--key", "k1")
    assert again.stdout.strip() == job_id  # the idempotency key is live: the same job

    snap = json.loads(cli("jobs", "show", job_id).stdout)
    assert snap["payload"] == {"a": "not a number"}
    assert (snap["priority"], snap["idempotency_key"], snap["max_attempts"]) == (3, "k1", 1)
    assert snap["metadata"] == {"who": "cli"}
    later = cli(
        "jobs", "enqueue", "other.type", "--payload", "[1, 2]", "--delay", "60",
        "--allow-unknown-type",
    )  # fmt: skip
    assert json.loads(cli("jobs", "show", later.stdout.strip()).stdout)["status"] == "delayed"

    # The worker validates when it runs the job: the payload its type rejects fails it.
    done = _run_jobs(cli)
    by_id = {s.id: s for s in done}
    assert by_id[job_id].status == "failed"
    error = by_id[job_id].error
    assert error is not None
    assert error.code == "JOB_PAYLOAD_INVALID"

    assert cli("jobs", "enqueue", "t", "--metadata", "[1]").exit_code == 2
    bad = cli("jobs", "enqueue", "t", "--payload", "{oops")
    assert bad.exit_code == 2
    assert _lines(bad.stderr)[0].startswith("jobledger: error: --payload is not valid JSON")
    padded = cli("jobs", "enqueue", " padded ", "--payload", "{}", "--allow-unknown-type")
    assert padded.exit_code == 2
    assert "JOB_HANDLER_INVALID: a job type name" in padded.stderr


def test_enqueue_with_app_validates_against_the_registered_type(cli: Cli) -> None:
    ok = cli("jobs", "enqueue", "math.add", "--payload", '{"a": 1, "b": 2}', "--app", cli.app)
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(cli("jobs", "show", ok.stdout.strip()).stdout)["payload"] == {"a": 1, "b": 2}
    factory = cli(
        "jobs",
        "enqueue",
        "math.add",
        "--payload",
        '{"a": 1, "b": 2}',
        "--app",
        f"{cli.module}:make",
    )
    assert factory.exit_code == 0, factory.stderr

    wrong = cli("jobs", "enqueue", "math.add", "--payload", '{"a": "x"}', "--app", cli.app)
    assert wrong.exit_code == 2
    assert len(_lines(wrong.stderr)) == 1
    assert _lines(wrong.stderr)[0].startswith("jobledger: error: JOB_PAYLOAD_INVALID: ")
    unknown = cli("jobs", "enqueue", "math.nope", "--app", cli.app)
    assert unknown.exit_code == 2
    assert "JOB_UNKNOWN_TYPE" in unknown.stderr

    for spec, message in [
        ("nocolon", "expected MODULE:ATTR"),
        ("no_such_module_xyz:jobs", "cannot import 'no_such_module_xyz': no such module"),
        (f"{cli.module}:nothing", "has no attribute 'nothing'"),
        (f"{cli.module}:ADD", "is a JobType, not a jobledger JobManager"),
    ]:
        result = cli("jobs", "enqueue", "math.add", "--app", spec)
        assert result.exit_code == 2, spec
        assert message in result.stderr, result.stderr
    assert len(_lines(cli("jobs", "list", "--json").stdout)) == 2


def test_cancel(cli: Cli) -> None:
    job_id = cli("jobs", "enqueue", "math.add", "--allow-unknown-type").stdout.strip()
    cancelled = cli("jobs", "cancel", job_id, "--reason", "not needed")
    assert cancelled.exit_code == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{job_id} cancelled"
    snap = json.loads(cli("jobs", "show", job_id).stdout)
    assert snap["status"] == "cancelled"
    assert snap["error"]["code"] == "JOB_CANCELLED"
    assert snap["error"]["message"] == "not needed"

    again = cli("jobs", "cancel", job_id)
    assert again.exit_code == 1
    assert "already cancelled" in again.stderr
    assert cli("jobs", "cancel", "nope").exit_code == 1
    assert cli("jobs", "cancel", job_id, "--reason", "x" * 501).exit_code == 2


def test_doctor_reports_a_healthy_database_then_a_dead_worker(cli: Cli) -> None:
    _run_jobs(cli, ("math.add", {"a": 1, "b": 1}))
    healthy = cli("doctor")
    assert healthy.exit_code == 0, healthy.stdout
    assert "integrity_check: ok" in healthy.stdout
    assert "healthy" in healthy.stdout
    # A producer keeps its connection open, so its writes stay in the WAL until a checkpoint.
    producer = jl.JobManager(cli.db)
    try:
        producer.enqueue(jl.JobType("math.other", dict), {})
        assert os.stat(cli.db + "-wal").st_size > 0
        report = json.loads(cli("doctor", "--json", "--checkpoint").stdout)
    finally:
        asyncio.run(producer.stop())
    assert report["ok"] is True
    assert report["schema_version"] == report["library_schema_version"]
    assert report["journal_mode"] == "wal"
    assert report["wal_bytes"] > 0
    assert report["checkpoint"]["busy"] == 0
    assert report["checkpoint"]["wal_bytes_after"] == 0  # TRUNCATE emptied the WAL

    # A worker that died without stopping (a stale heartbeat) and left a running row.
    job_id = cli("jobs", "enqueue", "math.add", "--payload", '{"a":1,"b":1}').stdout.strip()
    conn = sqlite3.connect(cli.db, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at) "
            "VALUES ('ghost', 'elsewhere', 1, '[\"math.add=retry\"]', 1000, 1000)"
        )
        conn.execute(
            "UPDATE jobs SET status = 'running', worker_id = 'ghost', started_at = 1000 "
            "WHERE id = ?",
            (job_id,),
        )
    finally:
        conn.close()
    sick = cli("doctor")
    assert sick.exit_code == 1
    assert "running jobs of workers not alive: 1" in sick.stdout
    assert job_id in sick.stdout
    report = json.loads(cli("doctor", "--json").stdout)
    assert report["ok"] is False
    assert report["stuck_running"] == [job_id]
    assert [w["state"] for w in report["workers"] if w["id"] == "ghost"] == ["dead"]


def test_gc_deletes_only_old_finished_jobs(cli: Cli) -> None:
    done = _run_jobs(cli, ("math.add", {"a": 1, "b": 1}), ("math.boom", {}))
    waiting = cli("jobs", "enqueue", "math.add", "--payload", "{}").stdout.strip()
    assert cli("gc").stdout.strip() == "deleted 0 finished job(s)"  # younger than a week
    assert cli("gc", "--older-than", "0", "--dry-run").stdout.strip() == (
        "2 finished job(s) would be deleted"
    )
    time.sleep(0.01)  # finished_at is in milliseconds; make "older than 0 s" strict
    assert cli("gc", "--older-than", "0").stdout.strip() == "deleted 2 finished job(s)"
    left = [json.loads(line)["id"] for line in _lines(cli("jobs", "list", "--json").stdout)]
    assert left == [waiting]
    assert all(cli("jobs", "show", s.id).exit_code == 1 for s in done)


def test_schedules_list_show_pause_resume_run_now(cli: Cli) -> None:
    module = cli.load()
    jobs: jl.JobManager = module.jobs
    sid = jobs.register_job_schedule(
        module.ADD, module.Add(a=1, b=2), trigger=jl.Interval(seconds=3600), name="hourly"
    )
    asyncio.run(jobs.stop())

    listed = cli("schedules", "list")
    assert listed.exit_code == 0
    row = next(line for line in listed.stdout.splitlines() if line.startswith(sid))
    assert row.split()[1:6] == ["math.add", "hourly", "every", "3600s", "enabled"]
    shown = json.loads(cli("schedules", "show", sid).stdout)
    assert shown["trigger"] == {"kind": "interval", "seconds": 3600}
    assert shown["payload"] == {"a": 1, "b": 2}
    assert shown["name"] == "hourly"
    assert cli("schedules", "show", "nope").exit_code == 1

    assert cli("schedules", "pause", sid).stdout.strip() == f"{sid} paused"
    paused = json.loads(cli("schedules", "list", "--json").stdout)[0]
    assert paused["enabled"] is False
    assert paused["next_run"] is None
    assert cli("schedules", "resume", sid).stdout.strip() == f"{sid} resumed"
    assert json.loads(cli("schedules", "show", sid).stdout)["enabled"] is True
    # `--app`, once required, is still accepted (and not needed).
    with_app = cli("schedules", "pause", sid, "--app", cli.app)
    assert with_app.stdout.strip() == f"{sid} paused"
    assert _lines(with_app.stderr) == [
        "jobledger: warning: pause no longer needs --app (the row is enough); ignored"
    ]

    ran = cli("schedules", "run-now", sid)
    assert ran.exit_code == 0, ran.stderr
    fired = [json.loads(line) for line in _lines(cli("jobs", "list", "--json").stdout)]
    assert [(j["id"], j["schedule_id"], j["payload"]) for j in fired] == [
        (ran.stdout.strip(), sid, {"a": 1, "b": 2})
    ]
    assert json.loads(cli("schedules", "show", sid).stdout)["last_run"] is not None
    assert cli("schedules", "run-now", "nope").exit_code == 1


def test_errors_are_one_line_without_a_traceback_unless_debug(cli: Cli) -> None:
    (cli.dir / "brokenapp_cli.py").write_text("raise RuntimeError('the app is broken')\n")
    broken = cli("worker", "brokenapp_cli:jobs")
    assert broken.exit_code == 1
    assert _lines(broken.stderr) == [
        "jobledger: error: RuntimeError: the app is broken (--debug shows the traceback)"
    ]
    usage = cli("jobs", "frobnicate")
    assert usage.exit_code == 2
    assert len(_lines(usage.stderr)) == 1
    missing = cli("--db", str(cli.dir / "none.db"), "queues", db=False)
    assert missing.exit_code == 1
    assert _lines(missing.stderr) == [
        f"jobledger: error: no jobledger database at {cli.dir / 'none.db'} "
        "(pass --db PATH or set JOBLEDGER_DB)"
    ]


def test_debug_shows_the_traceback(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    (cli.dir / "brokenapp_dbg.py").write_text("raise RuntimeError('the app is broken')\n")
    result = cli("--debug", "--db", cli.db, "worker", "brokenapp_dbg:jobs", db=False)
    assert result.exit_code == 1
    assert "Traceback" in result.stderr + capsys.readouterr().err


def test_db_falls_back_to_the_environment_then_the_working_directory(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli("jobs", "enqueue", "t", "--payload", "1", "--allow-unknown-type")
    monkeypatch.setenv("JOBLEDGER_DB", cli.db)
    assert len(_lines(cli("jobs", "list", "--json", db=False).stdout)) == 1
    monkeypatch.delenv("JOBLEDGER_DB")
    result = cli("jobs", "list", db=False)
    assert result.exit_code == 1
    assert "no jobledger database at jobledger.db" in result.stderr


def test_serve_refuses_to_bind_beyond_loopback_without_a_token(cli: Cli) -> None:
    _run_jobs(cli)
    open_to_all = cli("serve", "--host", "0.0.0.0", "--port", "0")
    assert open_to_all.exit_code == 2
    assert _lines(open_to_all.stderr) == [
        "jobledger: error: binding to 0.0.0.0 (beyond loopback) needs --token or --viewer-token"
    ]
    actions = cli("serve", "--port", "0", "--allow-actions")
    assert actions.exit_code == 2
    assert "--allow-actions needs an operator --token" in actions.stderr
    # A viewer token is enough to bind, but never to act.
    viewer_acts = cli("serve", "--port", "0", "--allow-actions", "--viewer-token", "ann:s3cret-1")
    assert viewer_acts.exit_code == 2
    assert "--allow-actions needs an operator --token" in viewer_acts.stderr
    for bad, why in [
        ("bad name:x", "token name"),
        ("ann:", "secret of token 'ann'"),
        ("ann:has space", "secret of token 'ann'"),
    ]:
        refused = cli("serve", "--port", "0", "--token", bad)
        assert refused.exit_code == 2, bad
        assert why in refused.stderr, refused.stderr
    twice = cli("serve", "--port", "0", "--token", "ann:s1-long", "--viewer-token", "ann:s2-long")
    assert twice.exit_code == 2
    assert "the token name 'ann' is given twice" in twice.stderr
    same = cli("serve", "--port", "0", "--token", "ann:same", "--viewer-token", "bob:same")
    assert same.exit_code == 2
    assert "two tokens have the same secret" in same.stderr
