"""Every `q.<NAME>` that runtime code reads exists in each backend's queries companion.

Runtime modules still issue some statements themselves through `store.write`/`store.read`
(worker rows, schedules, the row layout `C_*`). For a backend to be pluggable, its
`queries` companion must offer each of those names with the same parameters; the tests
in this package check the statements' behaviour, this one checks none is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import jobledger
from tests.conformance import Backend

SRC = Path(jobledger.__file__).parent
_USE = re.compile(r"\bq\.([A-Z][A-Z0-9_]*)\b")


def _names_used_by_runtime() -> set[str]:
    used: set[str] = set()
    for path in SRC.rglob("*.py"):
        if "_storage" in path.parts:
            continue  # the backends themselves
        used.update(_USE.findall(path.read_text(encoding="utf-8")))
    return used


def test_runtime_statements_exist_in_every_backend(backend: Backend) -> None:
    used = _names_used_by_runtime()
    assert "REGISTER_WORKER" in used  # the scan finds what it should
    missing = sorted(name for name in used if not hasattr(backend.queries, name))
    assert missing == []
