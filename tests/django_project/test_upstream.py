"""Cases of the django-tasks projects' own suites, ported to `JobledgerBackend`.

The reference database backend lives in django-tasks-db (`django_tasks_db`, split out of
django-tasks); its suite is `tests/tests.py` there. The Task-level cases are from
django-tasks' `tests/tests/test_tasks.py`. Each test below names the case it ports.
What a port changes: ORM row reads become `backend.manager` reads; `run_worker` (one
batch worker, `conftest.py`) stands for `call_command("db_worker", batch=True)`; ids are
jobledger's UUIDv8 job ids, not UUIDv4.

Not ported, and why (django-tasks-db `tests/tests.py`):
* `DatabaseBackendTestCase`: `test_refresh_result(_async)` (they UPDATE their model's
  row; here only a worker writes outcomes, which `test_run_enqueued_task` covers),
  `test_task_name` and `test_priority_range_check` (their model), `test_index_scan_for_
  ready`, `test_run_after_null_0016_migration` (their schema), the four `id_function`
  cases (an option of theirs), `test_invalid_task_path` / `test_missing_task_path`
  (ported as `test_a_job_that_is_not_a_task_has_no_result`: here reading such a row is
  "no result", not an error on `.task`).
* `DatabaseBackendWorkerTestCase`: the `queue_name` / `exclude_queues` cases and
  `test_doesnt_process_different_backend` (`jobledger_worker` runs every queue of its
  backend's tasks; there is no queue filter); `test_unknown_backend` is ported in
  `test_worker_command.py`; the `--interval`, `--max-tasks`, `--worker-id` option
  cases and `test_verbose_logging` (options and log lines of theirs);
  `test_invalid_task_path`, `test_missing_task_path`, `test_task_import_string` (a job
  whose type no task defines is never claimed: a jobledger worker runs only the types
  it has handlers for, so it stays pending instead of failing); `test_worker_with_
  locked_rows` (row locks of theirs); `test_max_tasks`.
* `DatabaseTaskResultTestCase`, `ConnectionExclusiveTranscationTestCase`,
  `DatabaseBackendPruneTaskResultsTestCase`, `DBTaskResultOrderingTestCase`,
  `AdminTestCase`, `CompatTestCase`: their model, locking helpers, prune command and
  admin.
* `DatabaseWorkerProcessTestCase`: `test_interrupt_signals` and `test_run_subprocess`
  are ported in `test_worker_command.py`; `test_repeat_ctrl_c` differs by design (a
  second signal exits at once, status 1, and leaves the row to jobledger's recovery
  rather than failing it); `test_kill` (the row stays `RUNNING` there too, until
  recovery: jobledger's recovery tests cover that); `test_multiple_workers` (the
  cross-process claim is covered by jobledger's own suites).
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.test.utils import override_settings
from django.utils import timezone

import jobledger as jl
from jobledger.contrib.django import JobledgerBackend
from jobledger.contrib.django._compat import (
    InvalidTaskError,
    Task,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
)
from tests.conftest import run
from tests.django_project.conftest import Configure, run_worker
from tests.django_project.testapp import tasks


def _capture_enqueued() -> tuple[list[tuple[type, Any]], Any]:
    received: list[tuple[type, Any]] = []

    def capture(sender: type, task_result: Any, **kwargs: Any) -> None:
        received.append((sender, task_result))

    task_enqueued.connect(capture, dispatch_uid="ported", weak=False)
    return received, capture


# -- django-tasks-db tests/tests.py: DatabaseBackendTestCase --------------------------


def test_using_correct_backend(configure: Configure, jobs_database: str) -> None:
    configure()
    backend = task_backends["default"]
    assert isinstance(backend, JobledgerBackend)
    assert backend.alias == "default"
    assert backend.options["database"] == jobs_database


@pytest.mark.parametrize("which", ["noop_task", "noop_task_async"])
def test_enqueue_task(configure: Configure, which: str) -> None:
    configure()
    the_task: Task[Any, Any] = getattr(tasks, which)
    received, _ = _capture_enqueued()
    try:
        result = the_task.enqueue(1, two=3)
    finally:
        task_enqueued.disconnect(dispatch_uid="ported")
    assert uuid.UUID(result.id).version == 8
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    assert result.started_at is None
    assert result.last_attempted_at is None
    assert result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert result.task == the_task
    assert result.args == [1]
    assert result.kwargs == {"two": 3}
    assert result.attempts == 0
    assert received == [(JobledgerBackend, result)]


def test_enqueue_task_async(configure: Configure) -> None:
    configure()

    async def go() -> None:
        for the_task in (tasks.noop_task, tasks.noop_task_async):
            result = await the_task.aenqueue()
            assert result.status == TaskResultStatus.READY
            assert (result.args, result.kwargs, result.attempts) == ([], {}, 0)
            assert result.task == the_task

    run(go())


def test_get_result(configure: Configure) -> None:
    backend = configure()
    result = backend.enqueue(tasks.noop_task, [], {})
    assert backend.get_result(result.id) == result


def test_get_result_async(configure: Configure) -> None:
    backend = configure()

    async def go() -> None:
        result = await backend.aenqueue(tasks.noop_task, [], {})
        assert await backend.aget_result(result.id) == result

    run(go())


def test_get_missing_result_and_invalid_uuid(configure: Configure) -> None:
    # test_get_missing_result, test_async_get_missing_result, test_invalid_uuid,
    # test_async_invalid_uuid
    backend = configure()
    for bad in (str(uuid.uuid4()), "123"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)
        with pytest.raises(TaskResultDoesNotExist):
            run(backend.aget_result(bad))


def test_a_job_that_is_not_a_task_has_no_result(configure: Configure) -> None:
    # test_invalid_task_path, test_missing_task_path (adapted: see the module docstring)
    backend = configure()
    for path in ("subprocess.check_output", "missing.func"):
        handle = backend.manager.enqueue(jl.JobType(path, dict[str, Any]), {"args": []})
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(handle.id)


def test_check(configure: Configure) -> None:
    backend = configure()
    assert list(backend.check()) == []


def test_database_backend_app_missing(configure: Configure) -> None:
    backend = configure()
    with override_settings(INSTALLED_APPS=["django_tasks"]):
        [warning] = backend.check()
    assert "jobledger.contrib.django" in str(warning.hint)


def test_doesnt_wait_until_transaction_commit(configure: Configure) -> None:
    backend = configure()
    with transaction.atomic():
        result = tasks.noop_task.enqueue()
        assert result.enqueued_at is not None
        assert backend.manager.count() == 1  # committed in the job database already
    assert backend.manager.count() == 1


def test_enqueue_logs(configure: Configure, caplog: pytest.LogCaptureFixture) -> None:
    configure()
    with caplog.at_level(logging.DEBUG, logger="django_tasks"):
        result = tasks.noop_task.enqueue()
    [line] = [r.getMessage() for r in caplog.records if r.name == "django_tasks"]
    assert "enqueued" in line
    assert result.id in line


@pytest.mark.parametrize("use_tz", [True, False])
def test_run_after_tz(configure: Configure, use_tz: bool) -> None:
    backend = configure()
    with override_settings(USE_TZ=use_tz):
        result = tasks.noop_task.enqueue()
        assert backend.get_result(result.id).task.run_after is None


def test_validate_on_enqueue(configure: Configure) -> None:
    # also test_validate_on_aenqueue
    configure(queues=["unknown_queue"])
    custom = tasks.noop_task.using(queue_name="unknown_queue")
    configure()
    with pytest.raises(InvalidTaskError, match="Queue 'unknown_queue' is not valid"):
        custom.enqueue()
    with pytest.raises(InvalidTaskError, match="Queue 'unknown_queue' is not valid"):
        run(custom.aenqueue())


# -- django-tasks-db tests/tests.py: DatabaseBackendWorkerTestCase --------------------


def test_run_enqueued_task(configure: Configure) -> None:
    backend = configure()
    result = tasks.noop_task.enqueue()
    assert backend.manager.count(status="pending") == 1
    run_worker(backend)
    assert result.attempts == 0  # not refreshed yet
    result.refresh()
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at is not None
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.attempts == 1
    assert backend.manager.count(status="pending") == 0


def test_batch_processes_all_tasks(configure: Configure) -> None:
    backend = configure()
    for _ in range(3):
        tasks.noop_task.enqueue()
    tasks.failing_task_value_error.enqueue()
    run_worker(backend)
    assert backend.manager.count(status="pending") == 0
    assert backend.manager.count(status="completed") == 3
    assert backend.manager.count(status="failed") == 1


def test_no_tasks(configure: Configure) -> None:
    assert run_worker(configure()) == []


def test_failing_task(configure: Configure) -> None:
    backend = configure()
    result = tasks.failing_task_value_error.enqueue()
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.finished_at >= result.started_at
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.errors[0].exception_class is ValueError
    assert result.errors[0].traceback.endswith("ValueError: This task failed due to ValueError\n")


def test_complex_exception(configure: Configure) -> None:
    backend = configure()
    result = tasks.complex_exception.enqueue()
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_complex_return_value(configure: Configure) -> None:
    backend = configure()
    result = tasks.complex_return_value.enqueue()
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result._return_value is None
    assert result.errors[0].exception_class is TypeError
    # Theirs says "is not JSON serializable" (json.dumps); the framework's own
    # normalize_json, used here as by ImmediateBackend, says this.
    assert "Unsupported type" in result.errors[0].traceback


def test_run_after(configure: Configure) -> None:
    backend = configure()
    result = tasks.noop_task.using(run_after=timezone.now() + timedelta(hours=10)).enqueue()
    assert backend.manager.count() == 1
    assert backend.manager.count(status="pending") == 0
    run_worker(backend, until=lambda: True)
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert backend.manager.count(status="completed") == 0


def test_run_after_priority(configure: Configure, tmp_path: Path) -> None:
    # Theirs checks the order of their ready() queryset; here, the order a worker that
    # runs one task at a time runs them in, which is what that order is for.
    backend = configure(concurrency=1)
    order = str(tmp_path / "order")
    now = timezone.now()
    for label, priority, run_after in [
        ("old", 20, now - timedelta(hours=2)),
        ("very_old", 20, now - timedelta(hours=10)),
        ("far_future", 0, now + timedelta(hours=10)),
        ("high_priority_far_future", 10, now + timedelta(hours=10)),
        ("future", 0, now + timedelta(hours=2)),
        ("high_priority", 10, None),
        ("low_priority", 2, None),
        ("lower_priority", -2, None),
    ]:
        the_task = tasks.log_order.using(priority=priority)
        if run_after is not None:
            the_task = the_task.using(run_after=run_after)
        the_task.enqueue(order, label)
    run_worker(backend, until=lambda: backend.manager.count(status="completed") == 5)
    assert Path(order).read_text().split() == [
        "very_old",
        "old",
        "high_priority",
        "low_priority",
        "lower_priority",
    ]


def test_worker_doesnt_exit(configure: Configure) -> None:
    backend = configure()
    result = tasks.exit_task.enqueue()
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


def test_takes_context(configure: Configure) -> None:
    backend = configure()
    result = tasks.get_task_id.enqueue()
    run_worker(backend)
    result.refresh()
    assert result.return_value == result.id


def test_context(configure: Configure) -> None:
    backend = configure()
    result = tasks.test_context.enqueue(1)
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


# -- django-tasks-db tests/tests.py: DatabaseWorkerProcessTestCase (in-process here) ---


@pytest.mark.parametrize(
    ("which", "cls"),
    [
        ("failing_task_system_exit", SystemExit),  # test_system_exit_task
        ("failing_task_keyboard_interrupt", KeyboardInterrupt),  # test_keyboard_interrupt_task
    ],
)
def test_exit_and_interrupt_tasks(configure: Configure, which: str, cls: type) -> None:
    backend = configure()
    result = getattr(tasks, which).enqueue()
    run_worker(backend)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is cls


# -- django-tasks tests/tests/test_tasks.py: TaskTestCase -----------------------------


def test_enqueue_with_invalid_argument(configure: Configure) -> None:
    # also test_aenqueue_with_invalid_argument
    backend = configure()
    with pytest.raises(TypeError, match=re.escape("Unsupported type: <class 'datetime.datetime'>")):
        tasks.noop_task.enqueue(datetime.now())
    with pytest.raises(TypeError, match=re.escape("Unsupported type: <class 'datetime.datetime'>")):
        run(tasks.noop_task.aenqueue(datetime.now()))
    assert backend.manager.count() == 0


def test_naive_datetime(configure: Configure) -> None:
    configure()
    with pytest.raises(InvalidTaskError, match="run_after must be an aware datetime"):
        tasks.noop_task.using(run_after=datetime.now())


def test_invalid_priority(configure: Configure) -> None:
    configure()
    for bad in (-101, 101, 3.1):
        with pytest.raises(InvalidTaskError, match="priority must be a whole number"):
            tasks.noop_task.using(priority=bad)  # type: ignore[arg-type]
    for good in (100, -100, 0):
        tasks.noop_task.using(priority=good)


def test_get_incorrect_result(configure: Configure) -> None:
    # also test_get_incorrect_result_async
    backend = configure()
    result = backend.enqueue(tasks.noop_task_async, (), {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.noop_task.get_result(result.id)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        run(tasks.noop_task.aget_result(result.id))


def test_invalid_function(configure: Configure) -> None:
    configure()

    def local() -> None:
        return None

    for invalid in (any, local):
        with pytest.raises(InvalidTaskError, match="must be defined at a module level"):
            task()(invalid)
