"""The schedule operations (`insert_schedule` ... `manual_fire`, shared by both stores in
`_storage/schedule_ops.py`), on every backend.

The rules that keep two processes from double-firing: a natural fire at T is a
compare-and-set of `next_run <= T` committed with its job; a catch-up is a
compare-and-set of `next_run == expected`; a manual fire re-reads `next_run` under the
write lock instead of writing back what its caller read.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, JobRow, NewJob
from jobledger._storage.records import ScheduleRow
from jobledger.errors import JobNotFound
from tests.conformance import Backend, ConformantStore, col, new_job

TRIGGER = '{"kind":"interval"}'


def _row(
    sid: str,
    *,
    type: str = "t.a",
    name: str = "",
    enabled: int = 1,
    created_at: int = 10,
    payload: str = "{}",
) -> ScheduleRow:
    """A row as registration inserts it (never fired: no next/last run, no fires)."""
    return ScheduleRow(
        sid, type, name, TRIGGER, payload, "{}", enabled, None, None, 0, "{}", created_at,
        created_at,
    )  # fmt: skip


def _insert(store: ConformantStore, sid: str, **kw: Any) -> ScheduleRow:
    row = _row(sid, **kw)
    store.insert_schedule(row)
    return row


def _get(store: ConformantStore, sid: str) -> ScheduleRow:
    row = store.get_schedule(sid)
    assert row is not None, f"schedule {sid} is gone"
    return row


def _get_in(store: ConformantStore, sid: str, conn: Any) -> ScheduleRow:
    row = store.get_schedule(sid, conn)
    assert row is not None, f"schedule {sid} is not in the transaction"
    return row


def _calendar(store: ConformantStore, sid: str) -> tuple[int | None, int | None, int]:
    row = _get(store, sid)
    return row.next_run, row.last_run, row.fire_count


def _fire(
    store: ConformantStore,
    sid: str,
    at: int,
    following: int | None,
    job: NewJob | None,
    *,
    now: int = 12,
    missed: list[NewJob] | None = None,
    missed_from: int | None = None,
) -> list[JobRow] | None:
    """A natural fire of `sid` at `at`, moving `next_run` to `following` (with `missed`,
    the make-ups of the points it skipped, computed from `next_run == missed_from`)."""
    return store.fire_schedule(
        sid,
        job,
        expected_next=at,
        last_run=at,
        next_run=following,
        catch_up_next=None,
        now_ms=now,
        missed=missed or (),
        missed_from=missed_from,
    )


def _jobs_of(store: ConformantStore, sid: str) -> list[str]:
    return [r[L.C_ID] for r in store.list(JobFilter(schedule_id=sid), limit=100, offset=0)]


# -- rows --------------------------------------------------------------------------------


def test_schedule_rows_round_trip(store: ConformantStore) -> None:
    s1 = _insert(store, "s1", created_at=10)
    s2 = _insert(store, "s2", name="nightly", enabled=0, created_at=5)
    s3 = _insert(store, "s3", type="t.b", created_at=7)
    got = store.get_schedule("s1")
    assert isinstance(got, ScheduleRow)
    assert got == s1
    assert got == (
        "s1", "t.a", "", TRIGGER, "{}", "{}", 1, None, None, 0, "{}", 10, 10, "allow", 0, 0,
    )  # fmt: skip
    assert store.get_schedule("missing") is None
    # By name: "" is the type's singleton.
    assert store.get_schedule_by_name("t.a", "nightly") == s2
    assert store.get_schedule_by_name("t.a", "") == s1
    assert store.get_schedule_by_name("t.b", "nightly") is None
    assert store.get_schedule_by_name("t.b", "") == s3
    # Oldest first (creation time, not insertion order).
    assert store.list_schedules() == [s2, s3, s1]
    assert store.schedules_of_type("t.a") == [s2, s1]
    assert store.schedules_of_type("t.b") == [s3]
    assert store.schedules_of_type("t.none") == []
    assert all(isinstance(r, ScheduleRow) for r in store.list_schedules())


class _Abort(Exception):
    pass


def test_schedule_operations_join_the_callers_transaction(store: ConformantStore) -> None:
    def insert_then_abort() -> None:
        with store.user_transaction() as conn:
            store.insert_schedule(_row("gone"), conn)
            assert store.get_schedule("gone", conn) == _row("gone")
            assert store.get_schedule_by_name("t.a", "", conn) == _row("gone")
            raise _Abort

    def update_then_abort() -> None:
        with store.user_transaction() as conn:
            store.update_schedule("kept", {"enabled": 0}, conn)
            assert _get_in(store, "kept", conn).enabled == 0
            raise _Abort

    with pytest.raises(_Abort):
        insert_then_abort()
    assert store.get_schedule("gone") is None
    assert store.list_schedules() == []

    with store.user_transaction() as conn:
        store.insert_schedule(_row("kept"), conn)
        store.update_schedule("kept", {"payload": '{"n":2}', "updated_at": 20}, conn)
        assert _get_in(store, "kept", conn).payload == '{"n":2}'
    assert _get(store, "kept") == _row("kept")._replace(payload='{"n":2}', updated_at=20)

    with pytest.raises(_Abort):
        update_then_abort()
    assert _get(store, "kept").enabled == 1


def test_update_sets_only_the_named_columns(store: ConformantStore) -> None:
    row = _insert(store, "s")
    other = _insert(store, "o", name="other")
    store.update_schedule("s", {"payload": '{"n":2}', "enabled": 0, "updated_at": 20})
    assert _get(store, "s") == row._replace(payload='{"n":2}', enabled=0, updated_at=20)
    assert _get(store, "o") == other
    store.update_schedule("missing", {"enabled": 0})  # no row: nothing to do, no error
    assert store.get_schedule("missing") is None


@pytest.mark.parametrize("fields", [{"name; DROP TABLE jobs": "x"}, {"nope": 1}, {}])
def test_update_refuses_what_is_not_a_schedule_column(
    store: ConformantStore, fields: dict[str, Any]
) -> None:
    row = _insert(store, "s")
    with pytest.raises(ValueError, match="schedule columns"):
        store.update_schedule("s", fields)
    assert _get(store, "s") == row


def test_deleting_a_schedule_detaches_its_jobs(store: ConformantStore) -> None:
    _insert(store, "s")
    job = new_job(schedule="s")
    store.enqueue([job])
    assert store.delete_schedule("s", 20) is True
    assert col(store.get(job.id), L.C_SCHEDULE) is None
    assert store.get_schedule("s") is None
    assert store.delete_schedule("s", 21) is False


def test_set_next_run_arms_and_disarms(store: ConformantStore) -> None:
    row = _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    assert _get(store, "s") == row._replace(next_run=1_000, updated_at=11)
    store.set_schedule_next_run("s", None, 12)
    assert _get(store, "s") == row._replace(next_run=None, updated_at=12)


# -- a natural fire ------------------------------------------------------------------------


def test_a_natural_fire_is_a_compare_and_set_on_next_run(store: ConformantStore) -> None:
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    first, second = new_job(schedule="s"), new_job(schedule="s")  # no key: the CAS decides
    rows = _fire(store, "s", 1_000, 2_000, first)
    assert rows is not None
    assert [r[L.C_ID] for r in rows] == [first.id]
    assert rows[0] == store.get(first.id)
    assert col(rows[0], L.C_SCHEDULE) == "s"
    assert _calendar(store, "s") == (2_000, 1_000, 1)
    assert _get(store, "s").updated_at == 12
    # A second fire of the same T (a stale second leader) loses and writes nothing.
    assert _fire(store, "s", 1_000, 2_000, second, now=13) is None
    assert store.get(second.id) is None
    assert _jobs_of(store, "s") == [first.id]
    assert _calendar(store, "s") == (2_000, 1_000, 1)
    assert _get(store, "s").updated_at == 12
    # A late fire (T past the stored next_run) still wins: the CAS is `next_run <= T`.
    late = new_job(schedule="s")
    assert _fire(store, "s", 2_500, 3_000, late) is not None
    assert _calendar(store, "s") == (3_000, 2_500, 2)
    assert sorted(_jobs_of(store, "s")) == sorted([first.id, late.id])


def test_a_fire_writes_the_points_it_skipped_only_from_the_next_run_they_came_from(
    store: ConformantStore,
) -> None:
    """`missed` (AllMissed's make-ups of fires whose writes failed) go with the fire only
    while `next_run` is still `missed_from`: once another process moved it (and wrote
    those points, or decided they were not to be written), the fire is its own alone."""
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    skipped = [new_job(schedule="s"), new_job(schedule="s")]
    job = new_job(schedule="s")
    rows = _fire(store, "s", 3_000, 4_000, job, missed=skipped, missed_from=1_000)
    assert rows is not None
    assert [r[L.C_ID] for r in rows] == [skipped[0].id, skipped[1].id, job.id]
    assert _calendar(store, "s") == (4_000, 3_000, 1)
    # next_run (5,000 now) is not the one the make-ups came from: the fire alone.
    store.set_schedule_next_run("s", 5_000, 13)
    stale = [new_job(schedule="s")]
    later = new_job(schedule="s")
    rows = _fire(store, "s", 6_000, 7_000, later, now=14, missed=stale, missed_from=4_000)
    assert rows is not None
    assert [r[L.C_ID] for r in rows] == [later.id]
    assert store.get(stale[0].id) is None
    assert _calendar(store, "s") == (7_000, 6_000, 2)
    # The compare-and-set itself still decides: a fire of a time already passed writes
    # neither its job nor its make-ups.
    lost = [new_job(schedule="s")]
    late = new_job(schedule="s")
    assert _fire(store, "s", 6_500, 7_000, late, now=15, missed=lost, missed_from=7_000) is None
    assert store.get(lost[0].id) is None


def test_two_fires_of_one_time_at_once_write_one_job(backend: Backend) -> None:
    store = backend.store
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    firers = [store, backend.open_other()]
    jobs = [new_job(schedule="s") for _ in firers]
    start = threading.Barrier(len(firers))
    answers: list[list[JobRow] | None] = []
    errors: list[BaseException] = []

    def go(firer: ConformantStore, job: NewJob) -> None:
        try:
            start.wait(timeout=10)
            answers.append(_fire(firer, "s", 1_000, 2_000, job))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=pair) for pair in zip(firers, jobs, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    won = [a for a in answers if a is not None]
    assert len(answers) == 2
    assert len(won) == 1
    assert _jobs_of(store, "s") == [won[0][0][L.C_ID]]
    assert _calendar(store, "s") == (2_000, 1_000, 1)


def test_an_unarmed_or_disabled_schedule_never_fires(store: ConformantStore) -> None:
    _insert(store, "unarmed")  # next_run NULL
    assert _fire(store, "unarmed", 1_000, 2_000, new_job(schedule="unarmed")) is None
    _insert(store, "off", name="off", enabled=0)
    store.set_schedule_next_run("off", 1_000, 11)
    assert _fire(store, "off", 1_000, 2_000, new_job(schedule="off")) is None
    assert _calendar(store, "off") == (1_000, None, 0)
    assert store.count(JobFilter()) == 0
    assert _fire(store, "missing", 1_000, 2_000, None) is None


def test_a_fire_without_a_job_still_moves_the_calendar(store: ConformantStore) -> None:
    """A job that could not be built consumes the fire: the CAS alone is written."""
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    assert _fire(store, "s", 1_000, None, None) == []
    assert _calendar(store, "s") == (None, 1_000, 1)
    assert store.count(JobFilter()) == 0


def test_a_fire_and_its_job_commit_together(store: ConformantStore) -> None:
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    orphan = new_job(schedule="s", parent="no-such-parent")
    with pytest.raises(JobNotFound):
        _fire(store, "s", 1_000, 2_000, orphan)
    # The job was refused, so the compare-and-set was rolled back with it.
    assert _calendar(store, "s") == (1_000, None, 0)
    assert store.count(JobFilter()) == 0
    job = new_job(schedule="s")
    assert _fire(store, "s", 1_000, 2_000, job) is not None
    assert _jobs_of(store, "s") == [job.id]


# -- catch-up ---------------------------------------------------------------------------


def test_a_catch_up_is_a_compare_and_set_on_the_exact_next_run(store: ConformantStore) -> None:
    _insert(store, "s")
    store.set_schedule_next_run("s", 2_000, 11)
    assert store.catch_up_schedule("s", 1_000, 3_000, 13) is False  # not `<=`: exact
    assert store.catch_up_schedule("s", 2_500, 3_000, 13) is False
    assert _calendar(store, "s") == (2_000, None, 0)
    assert store.catch_up_schedule("s", 2_000, 3_000, 13) is True
    assert _calendar(store, "s") == (3_000, None, 0)  # skipped: no run recorded
    assert _get(store, "s").updated_at == 13
    assert store.catch_up_schedule("s", 2_000, 3_000, 14) is False  # another process won
    assert store.catch_up_schedule("s", 3_000, None, 15) is True  # no following fire
    assert _calendar(store, "s") == (None, None, 0)
    assert store.catch_up_schedule("s", 3_000, 4_000, 16) is False
    assert store.catch_up_schedule("missing", 3_000, 4_000, 16) is False


def test_a_catch_up_fire_uses_the_catch_up_compare_and_set(store: ConformantStore) -> None:
    _insert(store, "s")
    store.set_schedule_next_run("s", 2_000, 11)

    def catch_up(expected: int, job: NewJob) -> list[JobRow] | None:
        return store.fire_schedule(
            "s",
            job,
            expected_next=expected,
            last_run=9_000,
            next_run=9_500,
            catch_up_next=5_000,
            now_ms=20,
        )

    early = new_job(schedule="s")
    assert catch_up(3_000, early) is None  # a natural fire at 3000 would win; this loses
    assert store.get(early.id) is None
    first, second = new_job(schedule="s"), new_job(schedule="s")
    rows = catch_up(2_000, first)
    assert rows is not None
    assert [r[L.C_ID] for r in rows] == [first.id]
    assert _get(store, "s").next_run == 5_000
    assert catch_up(2_000, second) is None  # the same catch-up twice: one job
    assert _jobs_of(store, "s") == [first.id]
    assert _get(store, "s").next_run == 5_000


# -- manual fire ---------------------------------------------------------------------------


def test_a_manual_fire_writes_back_the_current_next_run(store: ConformantStore) -> None:
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    seen = _get(store, "s")  # what the caller read before the manual trigger
    # Another process fires T=1000 in between, moving next_run on.
    assert _fire(store, "s", 1_000, 2_000, new_job(schedule="s")) is not None
    extra = new_job(schedule="s")
    rows = store.manual_fire("s", extra, consume=False, now_ms=1_500)
    assert rows is not None
    assert [r[L.C_ID] for r in rows] == [extra.id]
    assert rows[0] == store.get(extra.id)
    # last_run is the manual run; next_run is the row's current one, not the stale read;
    # a manual run is not one of the calendar's fires.
    assert seen.next_run == 1_000
    assert _calendar(store, "s") == (2_000, 1_500, 1)
    assert _get(store, "s").updated_at == 1_500
    # So the next natural fire still wins its compare-and-set.
    assert _fire(store, "s", 2_000, 3_000, new_job(schedule="s")) is not None
    assert _calendar(store, "s") == (3_000, 2_000, 2)
    assert len(_jobs_of(store, "s")) == 3


def test_a_manual_fire_may_consume_the_next_run(store: ConformantStore) -> None:
    _insert(store, "s")
    store.set_schedule_next_run("s", 1_000, 11)
    job = new_job(schedule="s")
    assert store.manual_fire("s", job, consume=True, now_ms=1_200) is not None
    assert _calendar(store, "s") == (None, 1_200, 0)
    assert _jobs_of(store, "s") == [job.id]
    assert _fire(store, "s", 1_000, 2_000, new_job(schedule="s")) is None


def test_a_manual_fire_of_a_missing_schedule_writes_nothing(store: ConformantStore) -> None:
    job = new_job()  # no schedule_id: a wrongly written job would show
    assert store.manual_fire("missing", job, consume=False, now_ms=1) is None
    assert store.get(job.id) is None
    assert store.count(JobFilter()) == 0


def _no_changes(existing: ScheduleRow) -> dict[str, Any]:
    raise AssertionError(f"changes() asked about {existing.id}, but the name was free")


def test_ensure_inserts_a_schedule_whose_name_is_free(store: ConformantStore) -> None:
    row = _row("e1", name="nightly")
    ensured = store.ensure_schedule(row, _no_changes)
    assert ensured.inserted
    assert ensured.changed == ()
    assert ensured.row == row
    assert store.get_schedule_by_name("t.a", "nightly") == row
    # Another type, or the type's singleton, is another name.
    assert store.ensure_schedule(_row("e2", type="t.b", name="nightly"), _no_changes).inserted
    assert store.ensure_schedule(_row("e3"), _no_changes).inserted


def test_ensure_of_a_taken_name_sets_what_changes_asks_on_that_row(
    store: ConformantStore,
) -> None:
    _insert(store, "held", name="n", payload='{"v":1}')
    store.set_schedule_next_run("held", 5_000, 11)
    seen: list[ScheduleRow] = []

    def changes(existing: ScheduleRow) -> dict[str, Any]:
        seen.append(existing)
        return {"payload": '{"v":2}', "enabled": 0, "next_run": None, "updated_at": 20}

    ensured = store.ensure_schedule(_row("other", name="n", payload='{"v":2}'), changes)
    assert [r.id for r in seen] == ["held"]
    assert seen[0].next_run == 5_000  # the row as stored, inside the transaction
    assert not ensured.inserted
    assert ensured.changed == ("payload", "enabled", "next_run", "updated_at")
    after = _get(store, "held")
    assert ensured.row == after
    assert (after.payload, after.enabled, after.next_run, after.updated_at) == (
        '{"v":2}', 0, None, 20,
    )  # fmt: skip
    assert store.get_schedule("other") is None
    assert [r.id for r in store.list_schedules()] == ["held"]


def test_ensure_with_nothing_to_change_writes_nothing(store: ConformantStore) -> None:
    held = _insert(store, "held", name="n")
    store.set_schedule_next_run("held", 5_000, 11)
    before = _get(store, "held")
    ensured = store.ensure_schedule(_row("other", name="n", created_at=99), lambda _: {})
    assert ensured == (before, False, ())
    assert _get(store, "held") == before != held  # next_run and updated_at as set above


def test_ensure_refuses_what_is_not_a_schedule_column(store: ConformantStore) -> None:
    _insert(store, "held", name="n")
    with pytest.raises(ValueError, match="not schedule columns"):
        store.ensure_schedule(_row("other", name="n"), lambda _: {"status": "x"})
    assert _get(store, "held") == _row("held", name="n")


def test_ensures_of_one_name_at_once_all_get_one_row(backend: Backend) -> None:
    callers = [backend.store, *(backend.open_other() for _ in range(5))]
    start = threading.Barrier(len(callers))
    answers: list[str] = []
    errors: list[BaseException] = []

    def go(index: int, caller: ConformantStore) -> None:
        try:
            start.wait(timeout=10)
            ensured = caller.ensure_schedule(_row(f"s{index}", name="race"), lambda _: {})
            answers.append(ensured.row.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=pair) for pair in enumerate(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(answers) == len(callers)
    assert len(set(answers)) == 1
    assert [r.id for r in backend.store.list_schedules()] == answers[:1]
