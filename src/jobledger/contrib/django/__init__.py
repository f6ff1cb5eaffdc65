"""Django integration (extra `django`): a backend for Django's tasks framework.

```python
TASKS = {
    "default": {
        "BACKEND": "jobledger.contrib.django.JobledgerBackend",
        "OPTIONS": {"database": "/var/lib/mysite/jobs.db"},
    }
}
INSTALLED_APPS = [..., "jobledger.contrib.django"]   # manage.py jobledger_worker, checks
```

Django 6's `django.tasks` is used when it is installed, else the `django-tasks` backport
(Django 5.2). docs/howto/django.md describes the options and what maps to what.
"""

from jobledger.contrib.django._backend import JobledgerBackend, TaskRaised

__all__ = ["JobledgerBackend", "TaskRaised"]
