"""What makes a backend pluggable: the engine reaches storage only through `Store`.

The runtime used to issue some statements itself (`q.<NAME>` through `store.write`), so
this file checked that every such name existed in each backend's queries companion.
Those statements are now named `Store` operations, so what is left to prove is:

* nothing above the storage package names a dialect statement or imports a dialect
  module (the read model, the CLI and `doctor` open read-only stores like everyone);
* every operation of the `Store` protocol is implemented by each backend's store;
* the statements the shared `schedule_ops.ScheduleOps` issues (`self.q.<NAME>`) exist
  in each backend's queries companion, so the one implementation serves both.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import jobledger
from jobledger._storage import schedule_ops
from jobledger._storage.interface import Store
from tests.conformance import Backend

SRC = Path(jobledger.__file__).parent
# The storage package itself is where dialects live.
FILE_TOOLS = ("_storage",)
_STATEMENT = re.compile(r"\bq\.([A-Z][A-Z0-9_]*)\b")
_DIALECT_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+jobledger\._storage(?:\.(?:sqlite|postgres)\b|"
    r"\s+import\s+.*\b(?:sqlite|postgres)\b)",
    re.MULTILINE,
)
_SCHEDULE_STATEMENT = re.compile(r"\bself\.q\.([A-Za-z_][A-Za-z0-9_]*)\b")


def _engine_sources() -> dict[str, str]:
    return {
        str(path.relative_to(SRC)): path.read_text(encoding="utf-8")
        for path in SRC.rglob("*.py")
        if not set(path.relative_to(SRC).parts) & set(FILE_TOOLS)
    }


def test_the_engine_names_no_dialect_statement_and_imports_no_dialect() -> None:
    sources = _engine_sources()
    assert "_runtime/engine.py" in sources  # the scan looks where it should
    assert "_scheduling/job_schedules.py" in sources
    assert "_observe/read_model.py" in sources
    assert "cli/_ops.py" in sources
    statements = {f: _STATEMENT.findall(text) for f, text in sources.items()}
    assert {f: names for f, names in statements.items() if names} == {}
    imports = {f: _DIALECT_IMPORT.findall(text) for f, text in sources.items()}
    assert {f: found for f, found in imports.items() if found} == {}


def test_the_scans_find_what_they_look_for() -> None:
    assert _STATEMENT.search("row = conn.execute(q.GET_SCHEDULE, (sid,))\n")
    assert _DIALECT_IMPORT.search("from jobledger._storage.sqlite import queries as q\n")
    assert _DIALECT_IMPORT.search("from jobledger._storage import sqlite\n")
    assert _DIALECT_IMPORT.search("from jobledger._storage.postgres.store import X\n")
    assert not _DIALECT_IMPORT.search("from jobledger._storage.interface import Store\n")


def _protocol_operations() -> set[str]:
    return {
        name
        for name, member in vars(Store).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def test_every_store_operation_is_implemented(backend: Backend) -> None:
    operations = _protocol_operations()
    assert {"recover_worker", "take_lease", "fire_schedule", "writer_busy"} <= operations
    missing = sorted(name for name in operations if not callable(getattr(backend.raw, name, None)))
    assert missing == []
    assert isinstance(backend.raw.path, str)


def test_the_shared_schedule_statements_exist_in_every_backend(backend: Backend) -> None:
    used = set(_SCHEDULE_STATEMENT.findall(inspect.getsource(schedule_ops)))
    assert {"MARK_FIRED", "CATCH_UP_CAS", "MARK_MANUAL", "update_schedule_sql"} <= used
    missing = sorted(name for name in used if not hasattr(backend.raw.q, name))
    assert missing == []
