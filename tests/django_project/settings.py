"""Settings of the Django project the Django tests run in (`tests/django/`).

The environment picks the databases, so one project serves every combination:

* `JL_DJANGO_DB`: `sqlite` (a file under `JL_DJANGO_DIR`) or `postgres` (database
  `test` on the suite's server; Django's test runner makes `JL_DJANGO_TEST_NAME` from it
  and drops it after the run);
* `JL_DJANGO_JOBS`: the job database: a SQLite path or a postgresql:// URL.

Tests replace `TASKS` per test (a fresh job database each); these are the defaults a
`manage.py jobledger_worker` started by a test reads.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import jobledger as jl

HERE = Path(__file__).resolve().parent
WORKDIR = Path(os.environ.get("JL_DJANGO_DIR", HERE))

SECRET_KEY = "not-a-secret: tests only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "jobledger.contrib.django",
    "tests.django_project.testapp",
]
if importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.insert(0, "django_tasks")  # the backport's checks and signals

_TEST_NAME = os.environ.get("JL_DJANGO_TEST_NAME")
DATABASES: dict[str, dict[str, Any]]
if os.environ.get("JL_DJANGO_DB") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("JL_DJANGO_DB_NAME", "test"),
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "TEST": {"NAME": _TEST_NAME},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("JL_DJANGO_DB_NAME", str(WORKDIR / "django.sqlite3")),
            # A file, not memory: the worker's threads and processes open it too.
            "TEST": {"NAME": _TEST_NAME or str(WORKDIR / "django-test.sqlite3")},
        }
    }

TASKS = {
    "default": {
        "BACKEND": "jobledger.contrib.django.JobledgerBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {
            "database": os.environ.get("JL_DJANGO_JOBS", str(WORKDIR / "jobs.db")),
            "retry": jl.RetryPolicy(max_attempts=1),
        },
    }
}
