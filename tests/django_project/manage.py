"""`python tests/django_project/manage.py ...` from the repository's root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
