"""The storage half of issue 24 on every backend: the overlap decision inside a natural
fire's transaction, the release of a held-back fire by the write that ends its schedule's
last unfinished job (SQLite migration 14, PostgreSQL 10), and the backfill's key test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, JobRow, NewJob
from jobledger._storage.records import ScheduleRow
from jobledger._storage.schedule_ops import OverlapDecision
from tests.conformance import ConformantStore, claim, col, new_job, outcome


def _schedule(store: ConformantStore, sid: str = "s", *, name: str = "") -> None:
    trigger = '{"kind":"interval"}'
    row = ScheduleRow(sid, "t.a", name, trigger, "{}", "{}", 1, None, None, 0, "{}", 10, 10)
    store.insert_schedule(row._replace(overlap="buffer_one"))


class Decider:
    """Records what the fire saw and answers `verdict`."""

    def __init__(self, verdict: OverlapDecision) -> None:
        self.verdict = verdict
        self.seen: list[list[tuple[str, bool]]] = []

    def __call__(self, live: Sequence[tuple[str, bool]]) -> OverlapDecision:
        self.seen.append(sorted(live))
        return self.verdict


def _fire(
    store: ConformantStore, at: int, job: NewJob, decide: Decider, sid: str = "s"
) -> list[JobRow] | None:
    return store.fire_schedule(
        sid,
        job,
        expected_next=at,
        last_run=at,
        next_run=at + 1_000,
        catch_up_next=None,
        now_ms=at,
        decide=decide,
    )


def _status(store: ConformantStore, job: NewJob) -> Any:
    return col(store.get(job.id), L.C_STATUS)


def _skipped(store: ConformantStore, sid: str = "s") -> int:
    row = store.get_schedule(sid)
    assert row is not None
    return row.skipped_count


def test_the_overlap_decision_sees_the_schedule_s_unfinished_jobs_after_the_cas(
    store: ConformantStore,
) -> None:
    _schedule(store)
    _schedule(store, "other", name="other")
    store.set_schedule_next_run("s", 1_000, 11)
    first = new_job(schedule="s")
    enqueue = Decider("enqueue")
    assert _fire(store, 1_000, first, enqueue) is not None
    assert enqueue.seen == [[]]
    assert _status(store, first) == "pending"
    # A job of another schedule, and an ended one of this, are not seen.
    store.enqueue([new_job(schedule="other")])

    skip = Decider("skip")
    skipped = new_job(schedule="s")
    assert _fire(store, 2_000, skipped, skip) == []
    assert skip.seen == [[("pending", False)]]
    assert store.get(skipped.id) is None
    assert _skipped(store) == 1
    row = store.get_schedule("s")
    assert row is not None
    assert (row.next_run, row.last_run, row.fire_count) == (3_000, 2_000, 2)  # still a fire

    hold = Decider("hold")
    held = new_job(schedule="s")
    rows = _fire(store, 3_000, held, hold)
    assert rows is not None
    assert col(rows[0], L.C_STATUS) == "waiting"
    assert _status(store, held) == "waiting"
    after = Decider("skip")
    assert _fire(store, 4_000, new_job(schedule="s"), after) == []
    assert after.seen == [[("pending", False), ("waiting", True)]]
    # A lost compare-and-set decides nothing.
    late = Decider("enqueue")
    assert _fire(store, 4_000, new_job(schedule="s"), late) is None
    assert late.seen == []
    assert _skipped(store) == 2


def test_a_held_back_fire_runs_once_the_schedule_s_last_unfinished_job_ends(
    store: ConformantStore,
) -> None:
    _schedule(store)
    store.set_schedule_next_run("s", 1_000, 11)
    ahead, beside = new_job(schedule="s"), new_job(schedule="s", queue="other")
    assert _fire(store, 1_000, ahead, Decider("enqueue")) is not None
    store.enqueue([beside])  # a manual run, say: unfinished too
    held = new_job(schedule="s", scheduled_at=9_000_000)
    assert _fire(store, 2_000, held, Decider("hold")) is not None
    unrelated = new_job()
    store.enqueue([unrelated])
    claimed = {j.id for j in claim(store).jobs}
    assert claimed == {ahead.id, unrelated.id}  # never the waiting one
    assert store.finalize([outcome(unrelated.id)], 20_000)[0] is not None
    assert _status(store, held) == "waiting"
    assert store.finalize([outcome(ahead.id, "failed", error="{}")], 21_000)[0] is not None
    assert _status(store, held) == "waiting"  # `beside` has not ended
    assert [j.id for j in claim(store, "other").jobs] == [beside.id]
    assert store.finalize([outcome(beside.id)], 22_000)[0] is not None
    row = store.get(held.id)
    assert col(row, L.C_STATUS) == "pending"
    # Due at once, not at its (jittered, later) time: it waited behind a run already.
    assert col(row, L.C_SCHEDULED_AT) == 22_000
    assert [j.id for j in claim(store, now=22_000).jobs] == [held.id]


def test_a_cancel_releases_and_a_held_back_fire_can_be_cancelled(
    store: ConformantStore,
) -> None:
    _schedule(store)
    store.set_schedule_next_run("s", 1_000, 11)
    ahead, held = new_job(schedule="s"), new_job(schedule="s")
    assert _fire(store, 1_000, ahead, Decider("enqueue")) is not None
    assert _fire(store, 2_000, held, Decider("hold")) is not None
    store.request_cancel(ahead.id, None, '{"code":"JOB_CANCELLED"}', 30_000)
    assert _status(store, ahead) == "cancelled"
    assert _status(store, held) == "pending"
    store.request_cancel(held.id, None, '{"code":"JOB_CANCELLED"}', 31_000)
    assert _status(store, held) == "cancelled"


def test_deleting_a_schedule_releases_its_held_back_fire(store: ConformantStore) -> None:
    _schedule(store)
    store.set_schedule_next_run("s", 1_000, 11)
    ahead, held = new_job(schedule="s"), new_job(schedule="s")
    assert _fire(store, 1_000, ahead, Decider("enqueue")) is not None
    assert _fire(store, 2_000, held, Decider("hold")) is not None
    assert store.stranded_waiting(10) == []  # waits behind `ahead`: not stranded
    assert store.delete_schedule("s", 5_000) is True
    row = store.get(held.id)
    assert col(row, L.C_STATUS) == "pending"
    assert col(row, L.C_SCHEDULE) is None


def test_doctor_reports_a_held_back_fire_only_when_nothing_is_left_to_end(
    store: ConformantStore,
) -> None:
    _schedule(store)
    store.set_schedule_next_run("s", 1_000, 11)
    held = new_job(schedule="s", status="pending")
    held.status = "waiting"  # as a hand-edited table could leave it: nothing ahead of it
    store.enqueue([held])
    assert store.stranded_waiting(10) == [held.id]


def test_a_backfill_writes_only_keys_no_stored_job_holds(store: ConformantStore) -> None:
    _schedule(store)
    store.set_schedule_next_run("s", 1_000, 11)
    live = new_job(schedule="s", key="schedule:s:1")
    ended = new_job(schedule="s", key="schedule:s:2")
    store.enqueue([live, ended])
    assert ended.id in {j.id for j in claim(store).jobs}
    assert store.finalize([outcome(ended.id)], 20_000)[0] is not None
    held = new_job(schedule="s", key="schedule:s:3")
    assert _fire(store, 1_000, held, Decider("hold")) is not None
    planned: list[ScheduleRow] = []

    def plan(row: ScheduleRow) -> list[NewJob]:
        planned.append(row)
        return [new_job(schedule="s", key=f"schedule:s:{n}") for n in (1, 2, 3, 4, 5)]

    result = store.backfill_schedule("s", plan)
    assert result is not None
    jobs, rows = result
    assert [j.idempotency_key for j in jobs] == ["schedule:s:4", "schedule:s:5"]
    assert [r[L.C_KEY] for r in rows] == ["schedule:s:4", "schedule:s:5"]
    assert planned[0].next_run == 2_000  # the row as the transaction sees it
    again = store.backfill_schedule("s", plan)
    assert again is not None
    assert again == ([], [])
    assert store.backfill_schedule("missing", plan) is None


def test_a_backfill_whose_plan_raises_writes_nothing(store: ConformantStore) -> None:
    _schedule(store)

    def plan(row: ScheduleRow) -> list[NewJob]:
        raise ValueError("bad range")

    before = store.count(JobFilter())
    with pytest.raises(ValueError, match="bad range"):
        store.backfill_schedule("s", plan)
    assert store.count(JobFilter()) == before
