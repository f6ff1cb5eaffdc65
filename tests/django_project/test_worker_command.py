"""`manage.py jobledger_worker` as a real process: it runs the project's tasks (the ORM
included) and stops on SIGTERM and SIGINT, letting a running task finish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from jobledger.contrib.django._compat import TaskResult, TaskResultStatus
from tests.conftest import run, wait_until
from tests.django_project.conftest import Configure
from tests.django_project.testapp import tasks
from tests.django_project.testapp.models import Note

REPO = Path(__file__).resolve().parents[2]
MANAGE = REPO / "tests" / "django_project" / "manage.py"


@pytest.fixture
def worker(jobs_database: str) -> Iterator[list[subprocess.Popen[str]]]:
    """Started workers (`start(proc_list)`), killed at the end if still running."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def start(
    procs: list[subprocess.Popen[str]], jobs_database: str, *args: str
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "JL_DJANGO_JOBS": jobs_database,
        # The test database, which Django's test runner functions made for this run.
        "JL_DJANGO_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    proc = subprocess.Popen(
        [sys.executable, str(MANAGE), "jobledger_worker", "--startup-delay", "0", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    return proc


def finished(results: list[TaskResult[Any]]) -> bool:
    for result in results:
        result.refresh()
    return all(r.is_finished for r in results)


def test_the_worker_runs_the_tasks_and_stops_on_sigterm(
    configure: Configure, jobs_database: str, worker: list[subprocess.Popen[str]]
) -> None:
    configure()
    results: list[TaskResult[Any]] = [
        tasks.noop_task.enqueue(),
        tasks.write_note.enqueue("from the worker"),
        tasks.add_async.enqueue(1, 2),
        tasks.failing_task_system_exit.enqueue(),
    ]
    proc = start(worker, jobs_database)
    run(wait_until(lambda: finished(results), timeout=60, step=0.1), timeout=70)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "runs tests.django_project.testapp.tasks.add_async" in err
    assert err.rstrip().endswith("jobledger: worker stopped")
    statuses = [r.status for r in results]
    assert statuses == [TaskResultStatus.SUCCESSFUL] * 3 + [TaskResultStatus.FAILED]
    assert results[3].errors[0].exception_class is SystemExit  # the worker lived on
    assert Note.objects.get(pk=results[1].return_value).text == "from the worker"
    Note.objects.all().delete()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_lets_the_running_task_finish(
    configure: Configure,
    jobs_database: str,
    worker: list[subprocess.Popen[str]],
    sig: signal.Signals,
) -> None:
    # django-tasks-db tests/tests.py DatabaseWorkerProcessTestCase.test_interrupt_signals
    configure()
    result = tasks.sleep_for.enqueue(1.0)
    proc = start(worker, jobs_database)

    def running() -> bool:
        result.refresh()
        return result.status == TaskResultStatus.RUNNING

    run(wait_until(running, timeout=60, step=0.02), timeout=70)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    [worker_id] = result.worker_ids
    assert f":{proc.pid}:" in worker_id  # "<host>:<pid>:<random>": that process ran it


def test_a_backend_that_is_not_jobledgers_is_refused(
    jobs_database: str, worker: list[subprocess.Popen[str]]
) -> None:
    proc = start(worker, jobs_database, "--backend", "nope")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "nope" in err
