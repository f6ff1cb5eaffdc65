"""The statements persistent schedules issue (`queries.*SCHEDULE*`), on both backends.

`_scheduling/job_schedules.py` runs these through `store.write`/`store.read` with the
backend's own connection, so they are part of the storage contract until schedules get
named operations of their own.
"""

from __future__ import annotations

from typing import Any

from jobledger._storage import layout as L
from tests.conformance import Backend, col, new_job


def _insert(backend: Backend, sid: str, *, name: str = "", enabled: int = 1) -> None:
    params = (sid, "t.a", name, '{"kind":"interval"}', "{}", "{}", enabled, "{}", 10, 10)
    backend.store.write(lambda c: c.execute(backend.queries.INSERT_SCHEDULE, params), "insert")


def _one(backend: Backend, sql: str, params: tuple[Any, ...]) -> Any:
    return backend.store.read(lambda c: c.execute(sql, params).fetchone())


def _rowcount(backend: Backend, sql: str, params: tuple[Any, ...]) -> int:
    return int(backend.store.write(lambda c: c.execute(sql, params).rowcount, "schedule"))


def test_schedule_rows_round_trip(backend: Backend) -> None:
    qs = backend.queries
    _insert(backend, "s1")
    _insert(backend, "s2", name="nightly", enabled=0)
    row = _one(backend, qs.GET_SCHEDULE, ("s1",))
    expected = ("s1", "t.a", "", '{"kind":"interval"}', "{}", "{}", 1, None, None, 0, "{}", 10, 10)
    assert tuple(row) == expected
    assert _one(backend, qs.GET_SCHEDULE_BY_NAME, ("t.a", "nightly"))[0] == "s2"
    listed = backend.store.read(lambda c: c.execute(qs.LIST_SCHEDULES).fetchall())
    assert [r[0] for r in listed] == ["s1", "s2"]
    of_type = backend.store.read(lambda c: c.execute(qs.SCHEDULES_OF_TYPE, ("t.a",)).fetchall())
    assert [r[0] for r in of_type] == ["s1", "s2"]


def test_a_natural_fire_is_a_compare_and_set_on_next_run(backend: Backend) -> None:
    qs = backend.queries
    _insert(backend, "s")
    assert _rowcount(backend, qs.SET_NEXT_RUN, (1_000, 11, "s")) == 1
    assert _rowcount(backend, qs.MARK_FIRED, (1_000, 2_000, 12, "s", 1_000)) == 1
    assert _rowcount(backend, qs.MARK_FIRED, (1_000, 2_000, 12, "s", 1_000)) == 0  # lost race
    row = _one(backend, qs.GET_SCHEDULE, ("s",))
    assert (row[7], row[8], row[9]) == (2_000, 1_000, 1)
    assert _rowcount(backend, qs.CATCH_UP_CAS, (3_000, 13, "s", 1_000)) == 0
    assert _rowcount(backend, qs.CATCH_UP_CAS, (3_000, 13, "s", 2_000)) == 1
    assert _rowcount(backend, qs.CATCH_UP_CAS, (4_000, 14, "s", None)) == 0
    assert _rowcount(backend, qs.MARK_MANUAL, (3_500, 3_000, 15, "s")) == 1
    row = _one(backend, qs.GET_SCHEDULE, ("s",))
    assert (row[7], row[8], row[9]) == (3_000, 3_500, 1)


def test_a_disabled_schedule_never_fires(backend: Backend) -> None:
    _insert(backend, "s", enabled=0)
    assert _rowcount(backend, backend.queries.SET_NEXT_RUN, (1_000, 11, "s")) == 1
    assert _rowcount(backend, backend.queries.MARK_FIRED, (1_000, 2_000, 12, "s", 1_000)) == 0


def test_a_fire_and_its_job_commit_together(backend: Backend) -> None:
    qs, store = backend.queries, backend.store
    _insert(backend, "s")
    store.write(lambda c: c.execute(qs.SET_NEXT_RUN, (1_000, 11, "s")), "arm")
    job = new_job(schedule="s", key="schedule:s:1000")

    def fire(conn: Any) -> bool:
        if conn.execute(qs.MARK_FIRED, (1_000, 2_000, 12, "s", 1_000)).rowcount != 1:
            return False
        store.enqueue([job], conn=conn)
        return True

    assert store.write(fire, "fire") is True
    assert store.write(fire, "fire") is False
    assert col(store.get(job.id), L.C_SCHEDULE) == "s"


def test_deleting_a_schedule_detaches_its_jobs(backend: Backend) -> None:
    _insert(backend, "s")
    job = new_job(schedule="s")
    backend.store.enqueue([job])
    assert _rowcount(backend, backend.queries.DELETE_SCHEDULE, ("s",)) == 1
    assert col(backend.store.get(job.id), L.C_SCHEDULE) is None
    assert _one(backend, backend.queries.GET_SCHEDULE, ("s",)) is None
