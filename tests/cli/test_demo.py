"""`jobledger demo` (what `make demo` runs): a worker, sample jobs, a cron schedule and the
dashboard, from a directory of its own, stopped with Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.cli.conftest import cli_env


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
        assert [(s["type"], s["trigger_text"]) for s in schedules] == [
            ("demo.cleanup", "cron * * * * *")
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
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
