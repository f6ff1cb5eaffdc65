"""The Django project's tests (`tests/django_project/`), each run in its own process.

Django is configured once per process, so the main suite cannot import that project;
this runs its tests with `pytest` in a subprocess per combination of databases:
Django's and the job database both on SQLite, then both on PostgreSQL (a fresh test
database for Django, a fresh schema per test for jobledger). A PostgreSQL run skips
when the server is unreachable, as the suite's other PostgreSQL tests do (and fails
under CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conformance.conftest import _pg_unavailable

REPO = Path(__file__).resolve().parents[2]


def _run_project_tests(tmp_path: Path, django_db: str, jobs: str) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.django_project.settings",
        "JL_DJANGO_DB": django_db,
        "JL_DJANGO_JOBS_KIND": jobs,
        "JL_DJANGO_DIR": str(tmp_path),
        "JL_DJANGO_TEST_NAME": f"test_jl_django_{uuid.uuid4().hex[:12]}",
    }
    env.pop("JOBLEDGER_DB", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*args, "tests/django_project", "--basetemp", str(tmp_path / "pytest")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, f"{summary}\n{proc.stdout[-20000:]}\n{proc.stderr[-5000:]}"
    assert " passed" in summary
    assert "skipped" not in summary, proc.stdout[-5000:]


@pytest.mark.timeout(600)
def test_the_django_project_on_sqlite(tmp_path: Path) -> None:
    _run_project_tests(tmp_path, "sqlite", "sqlite")


@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_the_django_project_on_postgres(tmp_path: Path) -> None:
    reason = _pg_unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    _run_project_tests(tmp_path, "postgres", "postgres")
