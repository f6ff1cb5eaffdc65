"""`jobledger worker --log-format text|json` on a real worker process (DESIGN §8.2).

The jobs are written before the worker starts (it claims them at once); the test waits
on their rows, stops the worker with SIGTERM, and reads what it wrote to stdout and
stderr (files, so that a full pipe never stalls the child).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jobledger as jl
from tests.recovery import REPO, status_counts, wait_for

APP = textwrap.dedent(
    """
    import os
    import threading

    import jobledger as jl

    OK = jl.JobType("logs.ok", int)
    BOOM = jl.JobType("logs.boom", int)
    CHATTY = jl.JobType("logs.chatty", int)
    jobs = jl.JobManager(os.environ["JOBLEDGER_DB"], startup_delay=0, poll_interval=0.02)


    @jobs.handler(OK, recovery="retry")
    async def ok(ctx: jl.JobContext[int]) -> int:
        return ctx.payload * 2


    @jobs.handler(BOOM, recovery="retry")
    async def boom(ctx: jl.JobContext[int]) -> None:
        raise RuntimeError("the upstream said no")


    @jobs.handler(CHATTY, recovery="retry")
    def chatty(ctx: jl.JobContext[int]) -> None:
        ctx.logger.info("copying %d files", ctx.payload, extra={"step": "copy"})
        helper = threading.Thread(target=ctx.logger.warning, args=("from a helper thread",))
        helper.start()
        helper.join()
    """
)

OK = jl.JobType("logs.ok", int)
BOOM = jl.JobType("logs.boom", int)
CHATTY = jl.JobType("logs.chatty", int)


@dataclass
class Run:
    ids: dict[str, str]
    stdout: str
    stderr: str


def _run_worker(tmp_path: Path, *args: str, debug: bool = False) -> Run:
    """Enqueue one job of each type, run `jobledger worker` until they end, stop it."""
    (tmp_path / "logapp.py").write_text(APP)
    db = str(tmp_path / "jobs.db")
    producer = jl.JobManager(db)
    ids = {
        "ok": producer.enqueue(OK, 21).id,
        "boom": producer.enqueue(BOOM, 1, max_attempts=1).id,
        "chatty": producer.enqueue(CHATTY, 3).id,
    }
    asyncio.run(producer.stop())
    env = dict(os.environ)
    env.pop("JOBLEDGER_DB", None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tmp_path), str(REPO / "src"), env.get("PYTHONPATH", "")) if p
    )
    group = ["--debug"] if debug else []
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobledger.cli",
                *group,
                "--db",
                db,
                "worker",
                "logapp:jobs",
                *args,
            ],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    try:

        def ended() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker exited {proc.returncode}: {err.read_text()}")
            return status_counts(db) == {"completed": 2, "failed": 1}

        wait_for(ended, what="the three jobs to end")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return Run(ids, out.read_text(), err.read_text())


def _json_lines(text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        record = json.loads(line)  # every line is one JSON object
        assert isinstance(record, dict), line
        records.append(record)
    return records


def test_json_logs_one_object_per_line_with_the_job_fields(tmp_path: Path) -> None:
    run = _run_worker(tmp_path, "--log-format", "json")
    ids = run.ids
    assert run.stdout == ""
    records = _json_lines(run.stderr)
    for record in records:
        assert {"timestamp", "level", "logger", "message"} <= set(record), record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["timestamp"])
    # The worker's own lines are records too.
    assert any(r["message"].startswith("jobledger worker ") for r in records)
    assert records[-1]["message"] == "jobledger: worker stopped"

    worker = [r for r in records if r["logger"] == "jobledger.worker"]
    assert {r["level"] for r in worker} == {"INFO", "WARNING"}
    for name, job_id in ids.items():
        start, end = (r for r in worker if r.get("job_id") == job_id)
        job_fields = {"job_id": job_id, "type": f"logs.{name}", "queue": f"logs.{name}"}
        assert start == {
            "timestamp": start["timestamp"],
            "level": "INFO",
            "logger": "jobledger.worker",
            "message": f"job {job_id} started (type logs.{name}, queue logs.{name}, attempt 0)",
            **job_fields,
            "attempt": 0,
        }
        assert {k: end[k] for k in (*job_fields, "attempt")} == {**job_fields, "attempt": 0}
        assert isinstance(end["duration_ms"], int)
        assert end["duration_ms"] >= 0
        assert f"job {job_id} {end['outcome']} after {end['duration_ms']} ms" in end["message"]
        if name == "boom":
            assert (end["level"], end["outcome"]) == ("WARNING", "failed")
            assert end["error_code"] == "JOB_HANDLER_THREW"
            assert end["error_message"] == "the upstream said no"
            assert end["message"].endswith(": JOB_HANDLER_THREW: the upstream said no")
        else:
            assert (end["level"], end["outcome"]) == ("INFO", "completed")
            assert "error_code" not in end

    chatty = ids["chatty"]
    job_lines = [r for r in records if r["logger"] == "jobledger.job"]
    assert [(r["level"], r["message"]) for r in job_lines] == [
        ("INFO", "copying 3 files"),
        ("WARNING", "from a helper thread"),
    ]
    for record in job_lines:
        fields = {k: record[k] for k in ("job_id", "type", "queue", "attempt")}
        assert fields == {
            "job_id": chatty,
            "type": "logs.chatty",
            "queue": "logs.chatty",
            "attempt": 0,
        }
    assert job_lines[0]["step"] == "copy"


def test_json_stays_json_under_debug_and_carries_the_traceback(tmp_path: Path) -> None:
    run = _run_worker(tmp_path, "--log-format", "json", debug=True)
    records = _json_lines(run.stderr)
    assert "DEBUG" in {r["level"] for r in records}
    (raised,) = (
        r
        for r in records
        if r["logger"] == "jobledger.worker"
        and r["message"].startswith(f"job {run.ids['boom']} raised")
    )
    assert raised["level"] == "DEBUG"
    assert raised["job_id"] == run.ids["boom"]
    assert raised["exc_info"].startswith("Traceback (most recent call last):")
    assert raised["exc_info"].endswith("RuntimeError: the upstream said no")


def test_text_at_debug_shows_the_failure_and_its_traceback(tmp_path: Path) -> None:
    run = _run_worker(tmp_path, "--log-level", "debug")
    boom, chatty = run.ids["boom"], run.ids["chatty"]
    text = run.stderr
    assert re.search(
        rf"WARNING jobledger\.worker: job {boom} failed after \d+ ms "
        r"\(type logs\.boom, queue logs\.boom, attempt 0\): "
        "JOB_HANDLER_THREW: the upstream said no\n",
        text,
    ), text
    assert re.search(
        rf"DEBUG jobledger\.worker: job {boom} raised .*\nTraceback \(most recent call last\):\n",
        text,
    ), text
    assert 'raise RuntimeError("the upstream said no")' in text
    assert "\nRuntimeError: the upstream said no\n" in text
    assert f"INFO jobledger.worker: job {chatty} completed after " in text
    # ctx.logger's lines say which job they belong to.
    assert (
        f"INFO jobledger.job: copying 3 files "
        f"(job {chatty}, type logs.chatty, queue logs.chatty, attempt 0)\n"
    ) in text
