"""`manage.py jobledger_worker`: run a jobledger worker for every task of a backend.

It imports each installed app's `tasks` module (tasks register themselves as they are
defined), upserts the schedules that `OPTIONS["schedules"]` declares, then runs the
backend's `JobManager` until SIGINT or SIGTERM exactly as `jobledger worker` does
(`jobledger.cli._worker.run_until_signal`): running tasks get `--grace` seconds to end,
a second signal exits at once and leaves their rows to recovery.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import autodiscover_modules

from jobledger._storage.open import redact
from jobledger.cli._worker import _exit_now, _lingering_threads, run_until_signal
from jobledger.contrib.django._backend import JobledgerBackend, ensure_schedules
from jobledger.contrib.django._compat import task_backends


class Command(BaseCommand):
    help = "Run a jobledger worker for the tasks of a JobledgerBackend until SIGTERM/SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend", default="default", help="The TASKS alias to run (default: default)."
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=25.0,
            help="Seconds running tasks get to finish after SIGTERM/SIGINT (default 25).",
        )
        parser.add_argument(
            "--startup-delay",
            type=float,
            default=None,
            help="Seconds before recovery runs (default: the manager's own, 60).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except Exception as exc:  # InvalidTaskBackendError: the alias is not in TASKS
            raise CommandError(str(exc)) from exc
        if not isinstance(backend, JobledgerBackend):
            raise CommandError(f"TASKS[{alias!r}] is not a JobledgerBackend")
        autodiscover_modules("tasks")
        manager = backend.manager
        ensure_schedules(backend)
        manager.shutdown_grace = options["grace"]
        if options["startup_delay"] is not None:
            manager.startup_delay = options["startup_delay"]
        types = ", ".join(sorted(manager.job_types)) or "no tasks"
        banner = (
            f"jobledger worker {manager.worker_id} on {redact(manager.path)} "
            f"(TASKS[{alias!r}]): runs {types}. Ctrl-C to stop."
        )
        asyncio.run(run_until_signal(manager, banner=banner, say=self._say))
        self._say("jobledger: worker stopped")
        if _lingering_threads():  # a task thread is still running: do not wait for it
            _exit_now(0)

    def _say(self, text: str) -> None:
        self.stderr.write(text)
        self.stderr.flush()
