"""The project's tasks. Most mirror django-tasks-db's `tests/tasks.py` (same names), so
the cases ported from its suite (`tests/django_project/test_upstream.py`) read alike."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobledger.contrib.django._compat import TaskContext, task
from tests.django_project.testapp.models import Note


class TaskBroke(Exception):
    """An exception of this project's own, to check the class path kept with an error."""


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
async def add_async(a: int, b: int) -> int:
    return a + b


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_own_class() -> None:
    raise TaskBroke("broke")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    return lambda: True  # neither JSON nor picklable


@task()
def exit_task() -> None:
    exit(1)


@task()
def sleep_for(seconds: float) -> None:
    time.sleep(seconds)


@task(takes_context=True)
def get_task_id(context: TaskContext) -> str:
    return context.task_result.id


@task(takes_context=True)
def test_context(context: TaskContext, attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task(takes_context=True)
def worker_of(context: TaskContext) -> list[str]:
    return list(context.task_result.worker_ids)


@task()
def flaky(counter: str, fail_times: int) -> int:
    """Fails its first `fail_times` runs (counted in the file `counter`), then returns
    how many runs it took."""
    path = Path(counter)
    runs = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(runs))
    if runs <= fail_times:
        raise RuntimeError(f"run {runs} fails")
    return runs


@task()
def write_note(text: str) -> int:
    return int(Note.objects.create(text=text).pk)


@task()
def log_order(path: str, label: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(label + "\n")
