"""`jobledger demo` (what `make demo` runs): a worker, sample jobs, a cron schedule, an
interval schedule whose jobs keep progress moving, and the dashboard, from a directory of
its own, stopped with Ctrl-C. Also what `make demo` installs, and that the files the demo
leaves next to its database are ignored by git."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import cli_env

REPO = Path(__file__).resolve().parents[2]


def test_demo_serves_the_dashboard_with_sample_jobs_and_a_schedule(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "--db", str(db), "demo", "--port", "0"],
        cwd=tmp_path,  # not the checkout: the demo app is found next to the package
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any(line.strip().startswith("dashboard ") for line in lines):
            line = proc.stdout.readline()
            assert line, f"the demo exited early: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line)
        url = next(line for line in lines if line.strip().startswith("dashboard ")).split()[-1]
        assert url.startswith("http://127.0.0.1:")

        jobs = httpx.get(f"{url}api/jobs", timeout=10).json()
        assert jobs["total"] >= 6
        types = {j["type"] for j in jobs["items"]}
        assert {"demo.report", "demo.flaky", "demo.invoice", "demo.reminder"} <= types
        schedules = httpx.get(f"{url}api/schedules", timeout=10).json()["items"]
        assert sorted((s["type"], s["trigger_text"]) for s in schedules) == [
            ("demo.cleanup", "cron * * * * *"),
            ("demo.ingest", "every 4s"),
        ]
        workers = httpx.get(f"{url}api/workers", timeout=10).json()["items"]
        assert [w["state"] for w in workers] == ["alive"]
        # The worker runs the jobs: the permanent failure is quick to show.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            failed = httpx.get(f"{url}api/jobs?status=failed", timeout=10).json()["items"]
            if failed:
                break
            time.sleep(0.05)
        assert [j["error"]["code"] for j in failed] == ["PAYMENT_DECLINED"]
        assert "demo.report" in httpx.get(url, timeout=10).text

        # Work keeps flowing after the sample jobs: the interval schedule fires an ingest
        # job every few seconds, and one is seen running part way through.
        deadline = time.monotonic() + 20
        seen: list[float] = []
        while time.monotonic() < deadline and not any(0 < p < 100 for p in seen):
            running = httpx.get(
                f"{url}api/jobs?status=running&type=demo.ingest", timeout=10
            ).json()["items"]
            seen += [j["progress"] for j in running if j["progress"] is not None]
            time.sleep(0.05)
        assert any(0 < p < 100 for p in seen), seen
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    # Every file the demo left next to its database (-wal, -shm, .lock, .gate, ...).
    side_files = sorted(p.name for p in tmp_path.iterdir() if p.name != "demo.db")
    assert any(name.endswith(".gate") for name in side_files), side_files
    _assert_ignored_by_git(["demo.db", *side_files])


def _assert_ignored_by_git(names: list[str]) -> None:
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(
        [git, "check-ignore", "--no-index", "--verbose", "--non-matching", *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    # `::<TAB>name` is a name no pattern of .gitignore matches.
    unmatched = [line.split("\t")[-1] for line in proc.stdout.splitlines() if line.startswith("::")]
    assert unmatched == [], proc.stdout + proc.stderr


def test_make_demo_installs_the_web_extra_only() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    # -n: print, do not run; -B: as if nothing were installed yet.
    proc = subprocess.run(
        [make, "-n", "-B", "demo"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    installs = [line for line in proc.stdout.splitlines() if "pip install" in line]
    assert any("-e '.[web]'" in line for line in installs), proc.stdout
    assert not any("dev" in line or "postgres" in line for line in installs), proc.stdout
