"""The app `jobledger.contrib.django`: the `jobledger_worker` command and the checks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks


class JobledgerConfig(AppConfig):
    name = "jobledger.contrib.django"
    label = "jobledger"  # the default, "django", would read as Django's own
    verbose_name = "jobledger"

    def ready(self) -> None:
        checks.register(check_backends)


def check_backends(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> Iterable[checks.CheckMessage]:
    """Each `JobledgerBackend`'s `check()`, unless the tasks framework runs it itself
    (reported twice otherwise)."""
    from jobledger.contrib.django._backend import JobledgerBackend
    from jobledger.contrib.django._compat import framework_checks_run, task_backends

    if framework_checks_run():
        return []
    out: list[checks.CheckMessage] = []
    for backend in task_backends.all():
        if isinstance(backend, JobledgerBackend):
            out.extend(backend.check())
    return out


__all__ = ["JobledgerConfig", "check_backends"]
