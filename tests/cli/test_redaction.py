"""A password in a `postgresql://` URL is never printed (docs/reference/cli.md): not in the worker
banner, not in errors, tracebacks or logs. The CLI runs as a child process here, as users
run it, and the password is only ever shown as `***`."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.cli.conftest import jobledger, spawn

SECRET = "s3cret"
UNREACHABLE = f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"

# An app that logs its own database URL, as apps do: the CLI's log handler masks it too.
APP = """
import logging
import os

import jobledger as jl

logging.getLogger("redactapp").warning("using %s", os.environ["JOBLEDGER_DB"])
jobs = jl.JobManager(os.environ["JOBLEDGER_DB"], startup_delay=0)


@jobs.handler(jl.JobType("t", dict), recovery="retry")
async def t(ctx: jl.JobContext[dict]) -> None:
    return None
"""


def with_password(url: str) -> str:
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{SECRET}@{host}"))


@pytest.fixture
def redact_app(tmp_path: Path) -> Path:
    (tmp_path / "redactapp.py").write_text(APP)
    return tmp_path


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def _banner(proc: subprocess.Popen[str]) -> tuple[str, list[str]]:
    """The worker's banner line and the stderr lines before it (pytest-timeout bounds the
    read; a worker that exits ends the loop)."""
    assert proc.stderr is not None
    before: list[str] = []
    for line in proc.stderr:
        if line.startswith("jobledger worker "):
            return line, before
        before.append(line)
    return "", before


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgres"], indirect=True)  # a fresh schema, as ONLY_POSTGRES
def test_the_worker_banner_and_logs_mask_the_password(db: str, redact_app: Path) -> None:
    url = with_password(db)  # trust auth: the server ignores the password
    worker = spawn("--db", url, "worker", "redactapp:jobs", cwd=redact_app)
    try:
        banner, before = _banner(worker)
    finally:
        out, err = _stop(worker)
    everything = banner + "".join(before) + out + err
    assert banner.startswith("jobledger worker "), everything
    masked = url.replace(f":{SECRET}@", ":***@")
    assert f" on {masked}: handles t;" in banner
    assert any(f"using {masked}" in line for line in before), before
    assert SECRET not in everything
    assert worker.returncode == 0, everything


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgres"], indirect=True)  # a fresh schema, as ONLY_POSTGRES
def test_commands_on_a_reachable_server_never_print_the_password(db: str, redact_app: Path) -> None:
    url = with_password(db)
    new = ("jobs", "enqueue", "t", "--allow-unknown-type")
    enqueued = jobledger("--db", url, *new, cwd=redact_app)
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    for args in (
        ("jobs", "enqueue", "t"),
        ("jobs", "list"),
        ("jobs", "show", job_id),
        ("doctor",),
        ("doctor", "--json"),
        ("queues",),
        ("schedules", "list"),
        ("gc", "--dry-run"),
        ("gc",),
        ("--debug", "jobs", "list"),
    ):
        proc = jobledger("--db", url, *args, cwd=redact_app)
        assert SECRET not in proc.stdout + proc.stderr, args
        # Observers read PostgreSQL as they read files (doctor: a healthy schema).
        assert proc.returncode == 0, (args, proc.stderr)
    doctor = jobledger("--db", url, "doctor", cwd=redact_app)
    assert doctor.stdout.splitlines()[0] == url.replace(f":{SECRET}@", ":***@")


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgres"], indirect=True)  # a fresh schema, as ONLY_POSTGRES
def test_serve_on_postgres_never_shows_the_password(db: str, redact_app: Path) -> None:
    url = with_password(db)
    server = spawn("--db", url, "serve", "--port", "0", cwd=redact_app)
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()  # pytest-timeout bounds the read
        assert banner.startswith("jobledger: serving "), banner
        base = banner.rsplit(" at ", 1)[1].strip()
        page = httpx.get(base, timeout=10)
        health = httpx.get(f"{base}api/health", timeout=10)
        metrics = httpx.get(f"{base}metrics", timeout=10)
    finally:
        out, err = _stop(server)
    assert page.status_code == 200
    assert health.json()["status"] == "ok"
    assert "jobledger_jobs_completed_total" in metrics.text
    assert url.replace(f":{SECRET}@", ":***@") in banner
    assert SECRET not in banner + out + err + page.text
    assert server.returncode == 0, err


@pytest.mark.parametrize(
    "args",
    [
        ("jobs", "enqueue", "t"),
        ("jobs", "list"),
        ("jobs", "cancel", "some-id"),
        ("gc",),
        ("serve", "--port", "0"),
        ("--debug", "jobs", "enqueue", "t"),
        ("worker", "redactapp:jobs"),
    ],
    ids=" ".join,
)
def test_errors_about_an_unreachable_server_mask_the_password(
    redact_app: Path, args: tuple[str, ...]
) -> None:
    proc = jobledger("--db", UNREACHABLE, *args, cwd=redact_app)
    assert proc.returncode != 0
    assert "jobledger: error: " in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    if "postgresql://" in proc.stderr:
        assert "postgresql://postgres:***@127.0.0.1:1/test" in proc.stderr


def test_doctor_reports_an_unreachable_server_as_a_failed_check(redact_app: Path) -> None:
    # The finding, printed like every other check (exit 1), not a crash of the command.
    text = jobledger("--db", UNREACHABLE, "doctor", cwd=redact_app)
    assert text.returncode == 1, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "postgresql://postgres:***@127.0.0.1:1/test"
    assert lines[1].startswith("FAIL database server reachable: DB_BUSY")
    assert lines[-1] == "1 problem(s)"
    as_json = jobledger("--db", UNREACHABLE, "doctor", "--json", cwd=redact_app)
    assert as_json.returncode == 1, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["ok"] is False
    assert data["path"] == "postgresql://postgres:***@127.0.0.1:1/test"
    assert "unreachable" in data["problems"][0]
    assert SECRET not in text.stdout + text.stderr + as_json.stdout + as_json.stderr
