from __future__ import annotations

from django.db import models


class Note(models.Model):
    """A row a task writes, to show the ORM working inside the worker."""

    text: models.CharField[str, str] = models.CharField(max_length=200)
