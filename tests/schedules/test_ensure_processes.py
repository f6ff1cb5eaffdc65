"""Six processes import one app module at the same moment, on a database nobody has
created yet (a new SQLite file; a PostgreSQL schema that does not exist): the module's
`ensure_job_schedule` leaves exactly one schedule, every process gets its id, and none
raises (DESIGN §8.4). The children are `ensure_proc.py`, released together once all are
loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import db_rows, postgres_url
from tests.schedules import TICK

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 6


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database that does not exist yet: the children create (and migrate) it."""
    if request.param == "sqlite":
        yield str(tmp_path / "fresh.db")
        return
    from tests.conformance.conftest import new_schema_name, require_postgres, schema_factory

    require_postgres()
    schema = new_schema_name()  # never created: the first child makes it
    try:
        yield postgres_url(schema)
    finally:
        schema_factory().give_back(schema)  # dropped with the suite's other schemas


def test_six_processes_declaring_one_schedule_at_once_get_one(fresh_db: str) -> None:
    env = {**os.environ, "JOBLEDGER_DB": fresh_db}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.schedules.ensure_proc"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    failed = [
        (c.returncode, err) for c, (_, err) in zip(children, results, strict=True) if c.returncode
    ]
    assert failed == []
    ids = {out.strip() for out, _ in results}
    assert len(ids) == 1, ids
    rows = db_rows(fresh_db, "SELECT id, type, name FROM job_schedules")
    assert rows == [(ids.pop(), TICK.name, "every-five")]
