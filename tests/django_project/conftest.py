"""Fixtures of the Django tests: run only as `DJANGO_SETTINGS_MODULE=tests.django_project.
settings pytest tests/django_project` (Django is set up once per process, so the main
suite runs this directory in subprocesses: `tests/contrib/test_django.py`).

* Django's own database is made by Django's test runner functions once per run (a file,
  or a fresh PostgreSQL database named by `JL_DJANGO_TEST_NAME`) and dropped after it.
* Every test gets a fresh job database (`JL_DJANGO_JOBS_KIND`: a SQLite file, or a
  fresh PostgreSQL schema from `tests.conformance.conftest.schema_factory`, dropped
  after the test) through `configure`, which swaps
  `TASKS` for the test.
* `run_worker(backend)` is one batch worker: a new `JobManager` with every task's
  handler, drained (`jobledger.testing.drain`) and stopped, as a worker process would.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import django
import pytest

django.setup()

from django.test.utils import (  # noqa: E402  (after django.setup())
    override_settings,
    setup_databases,
    setup_test_environment,
    teardown_databases,
    teardown_test_environment,
)

import jobledger as jl  # noqa: E402
from jobledger.contrib.django import JobledgerBackend  # noqa: E402
from jobledger.contrib.django._backend import _shared_for  # noqa: E402
from jobledger.contrib.django._compat import task_backends  # noqa: E402
from jobledger.testing import drain  # noqa: E402
from tests.conftest import postgres_url, run, wait_until  # noqa: E402

Configure = Callable[..., JobledgerBackend]


@pytest.fixture(scope="session", autouse=True)
def django_databases() -> Iterator[None]:
    setup_test_environment()
    old = setup_databases(verbosity=0, interactive=False)
    yield
    teardown_databases(old, verbosity=0)
    teardown_test_environment()


@pytest.fixture
def jobs_database(tmp_path: Path) -> Iterator[str]:
    """A fresh job database: what `OPTIONS["database"]` takes."""
    if os.environ.get("JL_DJANGO_JOBS_KIND") != "postgres":
        yield str(tmp_path / "jobs.db")
        return
    from tests.conformance.conftest import schema_factory

    # A fresh schema no test has touched, migrated ahead of need on the factory's
    # threads and dropped on another (as the main suite's `db` fixture does).
    schema = schema_factory().take()
    try:
        yield postgres_url(schema)
    finally:
        schema_factory().give_back(schema)


@pytest.fixture
def configure(jobs_database: str) -> Iterator[Configure]:
    """`configure(**OPTIONS)` -> the `default` backend on the test's job database."""
    overrides: list[override_settings] = []

    def make(
        *, enqueue_on_commit: bool = False, queues: list[str] | None = None, **options: Any
    ) -> JobledgerBackend:
        options.setdefault("database", jobs_database)
        options.setdefault("retry", jl.RetryPolicy(max_attempts=1))
        override = override_settings(
            TASKS={
                "default": {
                    "BACKEND": "jobledger.contrib.django.JobledgerBackend",
                    "QUEUES": queues or ["default", "other"],
                    "ENQUEUE_ON_COMMIT": enqueue_on_commit,
                    "OPTIONS": options,
                }
            }
        )
        override.enable()
        overrides.append(override)
        backend = task_backends["default"]
        assert isinstance(backend, JobledgerBackend)
        return backend

    yield make
    shared = _shared_for("default")
    with shared.lock:
        managers = list(shared.managers.values())
        shared.managers.clear()
    for manager in managers:
        run(manager.stop())  # closes its connections (it was never started)
    for override in reversed(overrides):
        override.disable()


def run_worker(
    backend: JobledgerBackend, until: Callable[[], object] | None = None
) -> list[jl.JobSnapshot]:
    """Run every runnable task, as a fresh worker does, and stop: until none is left
    (`drain`), or until `until()` is true (a worker cannot drain a delayed job)."""
    config = backend.config
    manager = jl.JobManager(config.database, **config.manager)
    for path, task in list(backend._shared.tasks.items()):
        backend._register(manager, path, task)

    async def batch() -> list[jl.JobSnapshot]:
        try:
            if until is None:
                return await drain(manager)
            await manager.start()
            manager.end_quiet_window()
            await wait_until(until)
            return []
        finally:
            await manager.stop()

    return run(batch())
