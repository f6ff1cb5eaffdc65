"""`JobledgerBackend` in a Django project: enqueue, run, results, defer, priority,
queues, context, retries, schedules, on-commit and the checks."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.db import transaction
from django.test.utils import override_settings
from django.utils import timezone

import jobledger as jl
from jobledger.contrib.django import JobledgerBackend
from jobledger.contrib.django._compat import (
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from tests.conftest import run
from tests.django_project.conftest import Configure, run_worker
from tests.django_project.testapp import tasks
from tests.django_project.testapp.models import Note


def test_enqueue_writes_one_job_and_returns_its_result(configure: Configure) -> None:
    backend = configure()
    received: list[Any] = []

    def on_enqueued(sender: type, task_result: Any, **kwargs: Any) -> None:
        received.append((sender, task_result))

    task_enqueued.connect(on_enqueued, weak=False)
    try:
        result = tasks.noop_task.enqueue(1, two=3)
    finally:
        task_enqueued.disconnect(on_enqueued)
    snap = backend.manager.get(result.id)
    assert snap is not None
    assert snap.type == "tests.django_project.testapp.tasks.noop_task"
    assert snap.payload == {"args": [1], "kwargs": {"two": 3}}
    assert (snap.queue, snap.priority, snap.max_attempts) == ("default", 0, 1)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.attempts) == ([1], {"two": 3}, 0)
    assert result.enqueued_at == snap.created_at
    assert received == [(JobledgerBackend, result)]
    assert backend.get_result(result.id) == result


def test_a_task_runs_and_its_result_is_read_back(configure: Configure) -> None:
    configure()
    result = tasks.calculate_meaning_of_life.enqueue()
    [snap] = run_worker(result.task.get_backend())  # type: ignore[arg-type]
    before = result.status
    result.refresh()
    assert before == TaskResultStatus.READY  # a result is read, not pushed
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.worker_ids == [snap.worker_id]
    assert result.attempts == 1
    assert result.errors == []
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


def test_an_async_task_runs_on_the_loop(configure: Configure) -> None:
    backend = configure()
    result = tasks.add_async.enqueue(2, b=3)
    run_worker(backend)
    result.refresh()
    value: Any = result.return_value
    assert (result.status, value) == (TaskResultStatus.SUCCESSFUL, 5)


def test_a_failure_keeps_the_exception_class_and_traceback(configure: Configure) -> None:
    backend = configure()
    builtin = tasks.failing_task_value_error.enqueue()
    own = tasks.failing_task_own_class.enqueue()
    run_worker(backend)
    for result, cls in ((builtin, ValueError), (own, tasks.TaskBroke)):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        with pytest.raises(ValueError, match="Task failed"):
            _ = result.return_value
        [error] = result.errors
        assert error.exception_class is cls
        assert "Traceback (most recent call last)" in error.traceback
    assert builtin.errors[0].traceback.endswith("ValueError: This task failed due to ValueError\n")
    assert own.errors[0].exception_class_path == "tests.django_project.testapp.tasks.TaskBroke"


def test_retries_follow_the_retry_policy(configure: Configure, tmp_path: Path) -> None:
    backend = configure(retry=jl.RetryPolicy(max_attempts=3, backoff="none"))
    counter = str(tmp_path / "runs")
    result = tasks.flaky.enqueue(counter, fail_times=2)
    assert backend.manager.get(result.id).max_attempts == 3  # type: ignore[union-attr]
    [snap] = run_worker(backend)  # the retries are due at once: one drain runs them all
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3
    assert result.worker_ids == [snap.worker_id] * 3
    assert [e.exception_class for e in result.errors] == [RuntimeError, RuntimeError]
    assert "run 1 fails" in result.errors[0].traceback


def test_a_task_of_its_own_retry_policy(configure: Configure, tmp_path: Path) -> None:
    path = "tests.django_project.testapp.tasks.flaky"
    backend = configure(tasks={path: {"retry": jl.RetryPolicy(max_attempts=2), "timeout": 9}})
    result = tasks.flaky.enqueue(str(tmp_path / "runs"), fail_times=5)
    other = tasks.noop_task.enqueue()
    snap, plain = backend.manager.get(result.id), backend.manager.get(other.id)
    assert snap is not None
    assert plain is not None
    assert (snap.max_attempts, snap.timeout) == (2, 9)
    assert (plain.max_attempts, plain.timeout) == (1, None)


def test_run_after_defers_the_task(configure: Configure) -> None:
    backend = configure()
    later = tasks.noop_task.using(run_after=timezone.now() + timedelta(hours=10)).enqueue()
    due = tasks.noop_task.using(run_after=timezone.now() - timedelta(seconds=1)).enqueue()
    assert backend.manager.get(later.id).status == jl.JobStatus.DELAYED  # type: ignore[union-attr]
    run_worker(backend, until=lambda: backend.get_result(due.id).is_finished)
    later.refresh()
    due.refresh()
    assert later.status == TaskResultStatus.READY
    assert due.status == TaskResultStatus.SUCCESSFUL
    assert backend.get_result(later.id).task.run_after == later.task.run_after


def test_higher_priority_runs_first(configure: Configure, tmp_path: Path) -> None:
    backend = configure(concurrency=1)  # one at a time: the order is the claim order
    order = str(tmp_path / "order")
    for priority in (-5, 0, 10, 3):
        tasks.log_order.using(priority=priority).enqueue(order, str(priority))
    run_worker(backend)
    assert Path(order).read_text().split() == ["10", "3", "0", "-5"]
    [result] = [backend.get_result(s.id) for s in backend.manager.list() if s.priority == -10]
    assert result.task.priority == 10


def test_queue_name_is_the_jobs_queue(configure: Configure) -> None:
    backend = configure()
    result = tasks.noop_task.using(queue_name="other").enqueue()
    assert backend.manager.get(result.id).queue == "other"  # type: ignore[union-attr]
    assert backend.get_result(result.id).task.queue_name == "other"
    with pytest.raises(InvalidTaskError, match="Queue 'nowhere' is not valid"):
        tasks.noop_task.using(queue_name="nowhere").enqueue()


def test_takes_context_sees_its_own_result(configure: Configure) -> None:
    backend = configure()
    own_id = tasks.get_task_id.enqueue()
    attempt = tasks.test_context.enqueue(1)
    workers = tasks.worker_of.enqueue()
    [*_, snap] = run_worker(backend)
    for result in (own_id, attempt, workers):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert own_id.return_value == own_id.id
    assert workers.return_value == [snap.worker_id]


def test_missing_results(configure: Configure) -> None:
    backend = configure()
    for bad in ("", "123", "0190a9d0-0000-8000-8000-000000000000"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)
    # A job of the same database that is not a task's.
    handle = backend.manager.enqueue(jl.JobType("plain.job", dict[str, Any]), {})
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(handle.id)


def test_aenqueue_and_aget_result(configure: Configure) -> None:
    configure()

    async def go() -> None:
        result = await tasks.noop_task.aenqueue(7)
        again = await tasks.noop_task.aget_result(result.id)
        assert again == result

    run(go())


def test_on_commit_writes_only_what_commits(configure: Configure) -> None:
    backend = configure(enqueue_on_commit=True)
    with transaction.atomic():
        rolled_back = tasks.noop_task.enqueue("rolled back")
        assert rolled_back.id == ""  # no job yet: it is written at COMMIT
        transaction.set_rollback(True)
    assert rolled_back.id == ""
    assert backend.manager.count() == 0
    with transaction.atomic():
        committed = tasks.noop_task.enqueue("committed")
        assert backend.manager.count() == 0
    assert committed.id != ""
    assert backend.get_result(committed.id) == committed
    outside = tasks.noop_task.enqueue("autocommit")  # no transaction: written at once
    assert outside.id != ""
    assert [s.payload["args"] for s in backend.manager.list()] == [["autocommit"], ["committed"]]


def test_without_on_commit_a_rolled_back_enqueue_stays(configure: Configure) -> None:
    backend = configure()
    with transaction.atomic():
        tasks.noop_task.enqueue()
        transaction.set_rollback(True)
    assert backend.manager.count() == 1  # its own database: Django's rollback is not its


def test_a_task_uses_the_orm(configure: Configure) -> None:
    backend = configure()
    result = tasks.write_note.enqueue("hello")
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert Note.objects.get(pk=result.return_value).text == "hello"
    Note.objects.all().delete()


def test_schedules_declared_in_options(configure: Configure) -> None:
    from jobledger.contrib.django._backend import ensure_schedules

    path = "tests.django_project.testapp.tasks.calculate_meaning_of_life"
    backend = configure(schedules={"hourly": {"task": path, "trigger": jl.Interval(3600)}})
    [sid] = ensure_schedules(backend)
    assert ensure_schedules(backend) == [sid]  # idempotent, as every worker calls it
    [schedule] = backend.manager.list_job_schedules()
    assert (schedule.type, schedule.name, schedule.payload) == (
        path,
        "hourly",
        {"args": [], "kwargs": {}},
    )
    assert run(backend.manager.trigger_job_schedule_now_by_id(sid))
    [snap] = run_worker(backend)
    result = backend.get_result(snap.id)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def _check_ids(options: dict[str, Any]) -> list[str]:
    tasks_setting = {
        "default": {"BACKEND": "jobledger.contrib.django.JobledgerBackend", "OPTIONS": options}
    }
    with override_settings(TASKS=tasks_setting):
        return sorted(m.id for m in checks.run_checks() if m.id and m.id.startswith("jobledger"))


def test_the_checks(configure: Configure, tmp_path: Path) -> None:
    good = str(tmp_path / "jobs.db")
    assert _check_ids({"database": good}) == []
    assert _check_ids({}) == ["jobledger.E003"]
    assert _check_ids({"database": ""}) == ["jobledger.E004"]
    assert _check_ids({"database": "mysql://db/x"}) == ["jobledger.E005"]
    assert _check_ids({"database": good, "colour": 1}) == ["jobledger.E002"]
    assert _check_ids({"database": good, "retry": 3}) == ["jobledger.E006"]
    assert _check_ids({"database": good, "timeout": -1}) == ["jobledger.E007"]
    assert _check_ids({"database": good, "concurrency": 0}) == ["jobledger.E008"]
    assert _check_ids({"database": good, "tasks": {"x": {"colour": 1}}}) == ["jobledger.E009"]
    assert _check_ids({"database": good, "schedules": {"s": {"task": "x"}}}) == ["jobledger.E010"]
    assert _check_ids({"database": good, "manager": {"nope": 1}}) == ["jobledger.E011"]
    from django.conf import settings

    django_db = str(settings.DATABASES["default"]["NAME"])
    assert _check_ids({"database": django_db}) == ["jobledger.W002"]
    without = [a for a in settings.INSTALLED_APPS if a != "jobledger.contrib.django"]
    with override_settings(INSTALLED_APPS=without):
        assert _check_ids({"database": good}) == ["jobledger.W001"]
