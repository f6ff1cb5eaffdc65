"""The CLI as users run it: separate processes sharing one database file."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.cli.conftest import jobledger, spawn


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise
    return proc.returncode, err


def test_enqueue_worker_wait_show(app_dir: Path) -> None:
    db = str(app_dir / "app.db")
    enq = jobledger(
        "--db", db, "jobs", "enqueue", "math.add", "--payload", '{"a": 2, "b": 40}',
        "--app", "cliapp:jobs", cwd=app_dir, check=True,
    )  # fmt: skip
    job_id = enq.stdout.strip()
    assert len(job_id.splitlines()) == 1
    assert job_id

    worker = spawn("--db", db, "worker", "cliapp:jobs", "--startup-delay", "0", cwd=app_dir)
    try:
        waited = jobledger(
            "--db", db, "jobs", "wait", job_id, "--timeout", "30", "--interval", "0.02",
            cwd=app_dir,
        )  # fmt: skip
        assert waited.returncode == 0, waited.stderr
        assert waited.stdout.strip() == f"{job_id} completed"
        assert "100.0%" in waited.stderr  # the progress bar reached the end

        shown = jobledger("--db", db, "jobs", "show", job_id, cwd=app_dir, check=True)
        snap = json.loads(shown.stdout)
        assert snap["status"] == "completed"
        assert snap["output"] == 42
        assert snap["progress"] == 100
        assert snap["finished_at"].endswith("Z")

    finally:
        code, err = _stop(worker)
    assert code == 0, err
    assert "worker stopped" in err


def test_bad_payload_is_one_line_and_exit_code_2(app_dir: Path) -> None:
    db = str(app_dir / "app.db")
    bad_json = jobledger("--db", db, "jobs", "enqueue", "math.add", "--payload", "{a:", cwd=app_dir)
    assert bad_json.returncode == 2
    assert bad_json.stdout == ""
    lines = bad_json.stderr.strip().splitlines()
    assert len(lines) == 1, bad_json.stderr
    assert lines[0].startswith("jobledger: error: --payload is not valid JSON")
    assert "Traceback" not in bad_json.stderr


def test_worker_process_max_concurrency_option(app_dir: Path) -> None:
    db = str(app_dir / "app.db")
    worker = spawn(
        "--db", db, "worker", "cliapp:jobs", "--startup-delay", "0",
        "--process-max-concurrency", "3", cwd=app_dir,
    )  # fmt: skip
    try:
        assert worker.stderr is not None
        banner = ""
        for line in worker.stderr:  # log lines may come first; pytest-timeout bounds it
            if line.startswith("jobledger worker "):
                banner = line
                break
    finally:
        code, err = _stop(worker)
    assert "at most 3 at once here" in banner, banner + err
    assert code == 0, err

    refused = jobledger(
        "--db", db, "worker", "cliapp:jobs", "--process-max-concurrency", "0", cwd=app_dir
    )
    assert refused.returncode == 2
    assert "--process-max-concurrency" in refused.stderr
