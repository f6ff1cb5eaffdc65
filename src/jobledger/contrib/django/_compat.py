"""One import site for the Django tasks framework: Django 6's `django.tasks` when it is
there, else the `django-tasks` backport (Django 5.2 on Python 3.11), whose interface is
the same. The type checker reads the backport's names (the one installed for the
checks here); at run time the first that imports wins, for the whole process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = [
    "DEFAULT_TASK_PRIORITY",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "framework_checks_run",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

if TYPE_CHECKING:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    try:
        from django.tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
        from django.tasks.exceptions import (
            InvalidTaskError,
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.tasks.utils import normalize_json

        _BUILT_IN = True
    except ImportError:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
        from django_tasks.exceptions import (
            InvalidTaskError,
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        _BUILT_IN = False


def framework_checks_run() -> bool:
    """Whether the tasks framework itself runs each backend's `check()`: Django 6 always
    does (a core check); the backport only when `django_tasks` is an installed app."""
    if globals().get("_BUILT_IN"):
        return True
    from django.apps import apps

    return apps.is_installed("django_tasks")
