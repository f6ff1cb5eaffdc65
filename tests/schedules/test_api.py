"""The schedule API: errors, return values (DESIGN §7), updates and the `*_tx` variants."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pydantic
import pytest

import jobledger as jl
from jobledger._storage.records import ScheduleRow
from jobledger.testing import FakeClock
from tests.conftest import db_rows, sql_for
from tests.schedules import (
    START,
    TICK,
    Tick,
    advance,
    keys_of,
    make_manager,
    run,
    settle,
    sid_key,
    until,
)

OTHER = jl.JobType("sched.other", Tick)


@pytest.fixture
def jobs(db: str) -> jl.JobManager:
    """A never-started manager: every mutator here is synchronous and works before start."""
    manager = make_manager(db, FakeClock(START))

    @manager.handler(OTHER, recovery="abandon")
    def other(ctx: jl.JobContext[Tick]) -> None:
        return None

    return manager


def _code(fn: Callable[[], object]) -> str:
    with pytest.raises(jl.JobError) as info:
        fn()
    return info.value.code


def _rows(jobs: jl.JobManager) -> list[ScheduleRow]:
    """Every stored schedule row, to prove a failed call wrote nothing."""
    return jobs._schedules.list_rows()


# --- errors ------------------------------------------------------------------------------


def test_register_needs_a_handler_in_this_manager(jobs: jl.JobManager) -> None:
    stranger = jl.JobType("sched.nobody", Tick)
    every = jl.Interval(seconds=60)
    assert _code(lambda: jobs.register_job_schedule(stranger, Tick(n=1), trigger=every)) == (
        "JOB_UNKNOWN_TYPE"
    )
    assert _code(lambda: jobs.register_job_schedule("sched.nobody", {"n": 1}, trigger=every)) == (
        "JOB_UNKNOWN_TYPE"
    )
    with jobs.write_tx() as tx:
        assert _code(
            lambda: jobs.register_job_schedule_tx(tx, stranger, Tick(n=1), trigger=every)
        ) == ("JOB_UNKNOWN_TYPE")
    assert _rows(jobs) == []
    # A name works as well as the JobType once a handler exists.
    sid = jobs.register_job_schedule(TICK.name, {"n": 1}, trigger=every)
    assert isinstance(sid, str)


@pytest.mark.parametrize(
    "name",
    ["", " lead", "trail ", "__reserved", "bell\x07", "new\nline", "x" * 201, 5],
    ids=["empty", "lead", "trail", "dunder", "bell", "newline", "201", "int"],
)
def test_invalid_names_are_refused_everywhere(jobs: jl.JobManager, name: Any) -> None:
    every = jl.Interval(seconds=60)
    assert _code(lambda: jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, name=name)) == (
        "JOB_SCHEDULE_NAME_INVALID"
    )
    with jobs.write_tx() as tx:
        assert _code(
            lambda: jobs.register_job_schedule_tx(tx, TICK, Tick(n=1), trigger=every, name=name)
        ) == ("JOB_SCHEDULE_NAME_INVALID")
    assert _rows(jobs) == []
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, name="ok")
    before = _rows(jobs)
    assert _code(lambda: jobs.update_job_schedule(sid, name=name)) == "JOB_SCHEDULE_NAME_INVALID"
    with jobs.write_tx() as tx:
        assert _code(lambda: jobs.update_job_schedule_tx(tx, sid, name=name)) == (
            "JOB_SCHEDULE_NAME_INVALID"
        )
    assert _rows(jobs) == before


@pytest.mark.parametrize("name", ["x" * 200, "_single", "with inner  spaces", "ünïcode ✓"])
def test_valid_names_round_trip(jobs: jl.JobManager, name: str) -> None:
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=5), name=name)
    snap = jobs.get_job_schedule(TICK, name)
    assert snap is not None
    assert (snap.id, snap.name) == (sid, name)


def test_name_conflicts_and_the_singleton(jobs: jl.JobManager) -> None:
    every = jl.Interval(seconds=60)
    single = jobs.register_job_schedule(TICK, Tick(n=0), trigger=every)
    assert _code(lambda: jobs.register_job_schedule(TICK, Tick(n=1), trigger=every)) == (
        "JOB_SCHEDULE_SINGLETON_EXISTS"
    )
    named = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, name="a")
    assert _code(lambda: jobs.register_job_schedule(TICK, Tick(n=2), trigger=every, name="a")) == (
        "JOB_SCHEDULE_NAME_CONFLICT"
    )
    # Names are per type: another type may use "a" and have its own singleton.
    jobs.register_job_schedule(OTHER, Tick(n=3), trigger=every, name="a")
    jobs.register_job_schedule(OTHER, Tick(n=4), trigger=every)
    before = _rows(jobs)
    assert _code(lambda: jobs.update_job_schedule(named, name=None)) == (
        "JOB_SCHEDULE_SINGLETON_EXISTS"
    )
    other_named = jobs.register_job_schedule(TICK, Tick(n=5), trigger=every, name="b")
    assert _code(lambda: jobs.update_job_schedule(other_named, name="a")) == (
        "JOB_SCHEDULE_NAME_CONFLICT"
    )
    with jobs.write_tx() as tx:
        assert _code(lambda: jobs.update_job_schedule_tx(tx, other_named, name="a")) == (
            "JOB_SCHEDULE_NAME_CONFLICT"
        )
        assert _code(lambda: jobs.register_job_schedule_tx(tx, TICK, Tick(n=6), trigger=every)) == (
            "JOB_SCHEDULE_SINGLETON_EXISTS"
        )
    assert [r for r in _rows(jobs) if r[0] != other_named] == before
    # Renaming to its own name, and the singleton to a free name, are fine.
    assert jobs.update_job_schedule(named, name="a") is not None
    renamed = jobs.update_job_schedule(single, name="c")
    assert renamed is not None
    assert renamed.name == "c"
    assert jobs.register_job_schedule(TICK, Tick(n=7), trigger=every) != single


@pytest.mark.parametrize(
    "trigger",
    [
        jl.Cron("not a cron"),
        jl.Cron("61 * * * *"),
        jl.Cron("* * * * *", timezone="Mars/Olympus_Mons"),
        jl.Cron("* * * * *", limit=0),
        jl.Cron("0 0 30 2 *"),  # February 30th: no future fire
        jl.Interval(seconds=0),
        jl.Interval(seconds=-5),
        jl.Interval(seconds=float("nan")),
        jl.Once(at=datetime(2026, 6, 1)),  # naive
        "*/5 * * * *",
    ],
    ids=["garbage", "range", "zone", "limit0", "feb30", "zero", "negative", "nan", "naive", "str"],
)
def test_invalid_triggers_are_refused_before_any_write(jobs: jl.JobManager, trigger: Any) -> None:
    assert _code(lambda: jobs.register_job_schedule(TICK, Tick(n=1), trigger=trigger)) == (
        "JOB_SCHEDULE_TRIGGER_INVALID"
    )
    with jobs.write_tx() as tx:
        assert _code(
            lambda: jobs.register_job_schedule_tx(tx, TICK, Tick(n=1), trigger=trigger)
        ) == ("JOB_SCHEDULE_TRIGGER_INVALID")
    assert _rows(jobs) == []
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
    before = _rows(jobs)
    assert _code(lambda: jobs.update_job_schedule(sid, trigger=trigger)) == (
        "JOB_SCHEDULE_TRIGGER_INVALID"
    )
    with jobs.write_tx() as tx:
        assert _code(lambda: jobs.update_job_schedule_tx(tx, sid, trigger=trigger)) == (
            "JOB_SCHEDULE_TRIGGER_INVALID"
        )
    assert _rows(jobs) == before


def test_invalid_payload_and_catch_up_write_nothing(jobs: jl.JobManager) -> None:
    every = jl.Interval(seconds=60)
    assert _code(lambda: jobs.register_job_schedule(TICK.name, {"n": "x"}, trigger=every)) == (
        "JOB_PAYLOAD_INVALID"
    )
    bad_policy: Any = jl.AfterStartup(minutes=-1)
    assert _code(
        lambda: jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, catch_up=bad_policy)
    ) == ("JOB_SCHEDULE_TRIGGER_INVALID")
    assert _rows(jobs) == []
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every)
    before = _rows(jobs)
    assert _code(lambda: jobs.update_job_schedule(sid, payload={"n": "x"})) == (
        "JOB_PAYLOAD_INVALID"
    )
    assert _code(lambda: jobs.update_job_schedule(sid, colour="red")) == "JOB_INVALID_OPTION"
    assert _rows(jobs) == before


@pytest.mark.parametrize(
    "options",
    [
        {"metadata": {"x": object()}},
        {"metadata": {"x": float("nan")}},
        {"metadata": ["not", "a", "mapping"]},
        {"enabled": "yes"},
    ],
    ids=["object", "nan", "list", "enabled"],
)
def test_invalid_options_are_job_errors(jobs: jl.JobManager, options: dict[str, Any]) -> None:
    every = jl.Interval(seconds=60)
    assert _code(lambda: jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, **options)) == (
        "JOB_INVALID_OPTION"
    )
    assert _rows(jobs) == []
    sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every)
    before = _rows(jobs)
    assert _code(lambda: jobs.update_job_schedule(sid, **options)) == "JOB_INVALID_OPTION"
    assert _rows(jobs) == before


def test_by_name_resolution(jobs: jl.JobManager) -> None:
    every = jl.Interval(seconds=60)
    # Nothing of the type: name-less lookups find nothing.
    assert _code(lambda: jobs.pause_job_schedule(TICK)) == "JOB_SCHEDULE_NOT_FOUND_BY_NAME"
    assert jobs.get_job_schedule(TICK) is None
    assert jobs.get_job_schedule(TICK, "nope") is None
    # Exactly one row, even a named one, is found without its name.
    only = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, name="first")
    snap = jobs.get_job_schedule(TICK)
    assert snap is not None
    assert snap.id == only
    assert jobs.pause_job_schedule(TICK.name) is True
    second = jobs.register_job_schedule(TICK, Tick(n=2), trigger=every, name="second")
    for call in (
        lambda: jobs.get_job_schedule(TICK),
        lambda: jobs.pause_job_schedule(TICK),
        lambda: jobs.resume_job_schedule(TICK),
        lambda: jobs.unregister_job_schedule(TICK),
        lambda: jobs.update_job_schedule_by_name(TICK, payload=Tick(n=3)),
        lambda: asyncio.run(jobs.trigger_job_schedule_now(TICK)),
    ):
        with pytest.raises(jl.ScheduleError) as info:
            call()
        assert info.value.code == "JOB_SCHEDULE_NAME_REQUIRED"
        assert sorted(info.value.params["known_names"]) == ["first", "second"]
    with pytest.raises(jl.ScheduleError) as missing:
        jobs.resume_job_schedule(TICK, "third")
    assert missing.value.code == "JOB_SCHEDULE_NOT_FOUND_BY_NAME"
    assert sorted(missing.value.params["known_names"]) == ["first", "second"]
    assert _code(lambda: jobs.unregister_job_schedule(TICK, "third")) == (
        "JOB_SCHEDULE_NOT_FOUND_BY_NAME"
    )
    assert _code(lambda: asyncio.run(jobs.trigger_job_schedule_now(TICK, "third"))) == (
        "JOB_SCHEDULE_NOT_FOUND_BY_NAME"
    )
    assert jobs.get_job_schedule(TICK, "third") is None
    # The by-name twins act on the row they name.
    assert jobs.resume_job_schedule(TICK, "first") is True
    got = jobs.get_job_schedule(TICK.name, "second")
    assert got is not None
    assert got.id == second
    assert asyncio.run(jobs.trigger_job_schedule_now(TICK, "second")) is True
    assert [j.schedule_id for j in jobs.list(type=TICK)] == [second]
    updated = jobs.update_job_schedule_by_name(TICK, "second", payload=Tick(n=9))
    assert updated is not None
    assert updated.payload == {"n": 9}
    assert jobs.unregister_job_schedule(TICK, "second") is True
    assert jobs.get_job_schedule_by_id(second) is None


def test_unknown_ids_return_false_or_none(jobs: jl.JobManager) -> None:
    ghost = "00000000-0000-0000-0000-000000000000"
    assert jobs.update_job_schedule(ghost, payload=Tick(n=1)) is None
    assert jobs.update_job_schedule(ghost, trigger=jl.Interval(seconds=5), enabled=True) is None
    with jobs.write_tx() as tx:
        assert jobs.update_job_schedule_tx(tx, ghost, enabled=False) is None
    assert jobs.pause_job_schedule_by_id(ghost) is False
    assert jobs.resume_job_schedule_by_id(ghost) is False
    assert jobs.unregister_job_schedule_by_id(ghost) is False
    assert jobs.get_job_schedule_by_id(ghost) is None
    assert jobs.sync_job_schedule_timer_by_id(ghost) is None  # type: ignore[func-returns-value]
    assert asyncio.run(jobs.trigger_job_schedule_now_by_id(ghost)) is False
    assert _rows(jobs) == []
    assert jobs.list() == []


def test_snapshots_carry_plain_json_and_type_names(jobs: jl.JobManager) -> None:
    class Rich(pydantic.BaseModel):
        when: datetime
        tags: list[str]

    rich = jl.JobType("sched.rich", Rich)

    @jobs.handler(rich, recovery="abandon")
    def handle(ctx: jl.JobContext[Rich]) -> None:
        return None

    at = datetime.fromisoformat("2026-02-03T04:05:06+00:00")
    sid = jobs.register_job_schedule(
        rich,
        Rich(when=at, tags=["a"]),
        trigger=jl.Cron("*/5 * * * *", timezone="Europe/Berlin", limit=4),
        catch_up=jl.AfterStartup(minutes=2.5),
        metadata={"owner": "ops"},
        enabled=False,
    )
    snap = jobs.get_job_schedule_by_id(sid)
    assert snap == jl.ScheduleSnapshot(
        id=sid,
        type="sched.rich",
        name=None,
        trigger=jl.Cron("*/5 * * * *", timezone="Europe/Berlin", limit=4),
        payload={"when": "2026-02-03T04:05:06Z", "tags": ["a"]},
        catch_up=jl.AfterStartup(minutes=2.5),
        enabled=False,
        next_run=None,
        last_run=None,
        metadata={"owner": "ops"},
        created_at=START,
        updated_at=START,
    )


def test_list_filters_and_order(jobs: jl.JobManager) -> None:
    clock = jobs.clock
    assert isinstance(clock, FakeClock)
    every = jl.Interval(seconds=60)
    a = jobs.register_job_schedule(TICK, Tick(n=1), trigger=every, name="a")
    clock.advance(1)
    b = jobs.register_job_schedule(OTHER, Tick(n=2), trigger=every, name="b", enabled=False)
    clock.advance(1)
    c = jobs.register_job_schedule(TICK, Tick(n=3), trigger=every, name="c")
    assert [s.id for s in jobs.list_job_schedules()] == [a, b, c]
    assert [s.id for s in jobs.list_job_schedules(type=TICK)] == [a, c]
    assert [s.id for s in jobs.list_job_schedules(type="sched.other")] == [b]
    assert [s.id for s in jobs.list_job_schedules(enabled=False)] == [b]
    assert [s.id for s in jobs.list_job_schedules(type=TICK, enabled=True)] == [a, c]
    assert jobs.list_job_schedules(type="sched.nobody") == []


# --- timers: sync, updates, rollbacks ----------------------------------------------------


class Started:
    """A started manager past recovery, with one interval schedule armed."""

    def __init__(self, jobs: jl.JobManager, clock: FakeClock, sid: str) -> None:
        self.jobs, self.clock, self.sid = jobs, clock, sid
        self.timer = f"schedule:{sid}"

    @property
    def sched(self) -> jl.SchedulerService:
        return self.jobs._schedules.sched

    def entry(self) -> object:
        return self.sched._entries[self.timer]

    def snap(self) -> jl.ScheduleSnapshot:
        snap = self.jobs.get_job_schedule_by_id(self.sid)
        assert snap is not None
        return snap


def started(db: str, body: Callable[[Started], Any], *, trigger: jl.Trigger | None = None) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        async with jobs:
            await jobs.recovery_done
            sid = jobs.register_job_schedule(
                TICK, Tick(n=1), trigger=trigger or jl.Interval(seconds=60)
            )
            await body(Started(jobs, clock, sid))

    run(scenario())


def test_register_arms_at_once_when_started(db: str) -> None:
    async def body(s: Started) -> None:
        assert s.sched.has(s.timer)
        assert s.snap().next_run == START + timedelta(seconds=60)
        assert s.sched.get_next_run(s.timer) == START + timedelta(seconds=60)

    started(db, body)


def test_a_payload_update_keeps_the_timer_and_its_phase(db: str) -> None:
    async def body(s: Started) -> None:
        await advance(s.clock, 45)
        entry = s.entry()
        snap = s.jobs.update_job_schedule(s.sid, payload=Tick(n=2), metadata={"v": 2})
        assert snap is not None
        assert (snap.payload, snap.metadata) == ({"n": 2}, {"v": 2})
        assert snap.next_run == START + timedelta(seconds=60)
        assert s.entry() is entry
        await advance(s.clock, 15)
        [job] = s.jobs.list(schedule_id=s.sid)
        assert job.idempotency_key == sid_key(s.sid, START + timedelta(seconds=60))
        assert job.payload == {"n": 2}

    started(db, body)


def test_a_trigger_update_re_arms_once(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(s: Started) -> None:
        await advance(s.clock, 45)
        calls: list[str] = []
        real = s.sched.register_schedule

        def counting(id: str, *args: Any, **kwargs: Any) -> None:
            calls.append(id)
            real(id, *args, **kwargs)

        monkeypatch.setattr(s.sched, "register_schedule", counting)
        entry = s.entry()
        snap = s.jobs.update_job_schedule(s.sid, trigger=jl.Interval(seconds=20))
        assert calls == [s.timer]
        assert s.entry() is not entry
        # The grid is still anchored at created_at: 0, 20, 40, 60 ... -> next is +60.
        assert snap is not None
        assert snap.next_run == START + timedelta(seconds=60)
        await advance(s.clock, 55)
        assert keys_of(s.jobs, s.sid) == {
            sid_key(s.sid, START + timedelta(seconds=t)): 1 for t in (60, 80, 100)
        }
        assert calls == [s.timer]  # fires do not re-register

    started(db, body)


def test_enabled_false_disarms_and_true_re_arms(db: str) -> None:
    async def body(s: Started) -> None:
        snap = s.jobs.update_job_schedule(s.sid, enabled=False)
        assert snap is not None
        assert (snap.enabled, snap.next_run) == (False, None)
        assert not s.sched.has(s.timer)
        await advance(s.clock, 130)
        assert s.jobs.list(schedule_id=s.sid) == []
        snap = s.jobs.update_job_schedule(s.sid, enabled=True)
        assert snap is not None
        assert snap.next_run == START + timedelta(seconds=180)
        assert s.sched.has(s.timer)
        # Disabled with a new trigger: stored, not armed.
        snap = s.jobs.update_job_schedule(s.sid, enabled=False, trigger=jl.Interval(seconds=7))
        assert snap is not None
        assert (snap.trigger, snap.next_run) == (jl.Interval(seconds=7), None)
        assert not s.sched.has(s.timer)

    started(db, body)


def test_a_rolled_back_register_tx_leaves_no_row_and_no_timer(db: str) -> None:
    async def body(s: Started) -> None:
        created: list[str] = []

        def doomed() -> None:
            with s.jobs.write_tx() as tx:
                created.append(
                    s.jobs.register_job_schedule_tx(
                        tx, TICK, Tick(n=5), trigger=jl.Interval(seconds=1), name="tx"
                    )
                )
                raise RuntimeError("business says no")

        with pytest.raises(RuntimeError, match="business says no"):
            doomed()
        [sid] = created
        assert s.jobs.get_job_schedule_by_id(sid) is None
        s.jobs.sync_job_schedule_timer_by_id(sid)  # a sync after a rollback is harmless
        assert not s.sched.has(f"schedule:{sid}")
        await advance(s.clock, 5)
        assert s.jobs.list(schedule_id=sid) == []
        assert s.sched.ids() == [s.timer]

    started(db, body)


def test_a_committed_register_tx_is_armed_by_the_sync(db: str) -> None:
    async def body(s: Started) -> None:
        with s.jobs.write_tx() as tx:
            tx.execute("CREATE TABLE subscription (schedule_id TEXT)")
            sid = s.jobs.register_job_schedule_tx(
                tx, TICK, Tick(n=5), trigger=jl.Interval(seconds=10), name="tx"
            )
            tx.execute(sql_for(db, "INSERT INTO subscription VALUES (?)"), (sid,))
        timer = f"schedule:{sid}"
        assert not s.sched.has(timer)  # the tx variant never touches timers
        snap = s.jobs.get_job_schedule_by_id(sid)
        assert snap is not None
        assert snap.next_run is None
        s.jobs.sync_job_schedule_timer_by_id(sid)
        assert s.sched.has(timer)
        snap = s.jobs.get_job_schedule_by_id(sid)
        assert snap is not None
        assert snap.next_run == START + timedelta(seconds=10)

        # A conflict inside the tx aborts the caller's whole transaction.
        def conflicting() -> None:
            with s.jobs.write_tx() as tx:
                tx.execute("INSERT INTO subscription VALUES ('doomed')")
                s.jobs.register_job_schedule_tx(
                    tx, TICK, Tick(n=6), trigger=jl.Interval(seconds=9), name="tx"
                )

        with pytest.raises(jl.ScheduleError):
            conflicting()
        with s.jobs.write_tx() as tx:
            rows = tx.execute("SELECT schedule_id FROM subscription").fetchall()
        assert rows == [(sid,)]

    started(db, body)


def test_a_rolled_back_update_tx_keeps_the_old_row_and_the_same_timer(db: str) -> None:
    async def body(s: Started) -> None:
        await advance(s.clock, 45)
        entry, before = s.entry(), s.snap()
        inside: list[jl.ScheduleSnapshot | None] = []

        def doomed() -> None:
            with s.jobs.write_tx() as tx:
                inside.append(
                    s.jobs.update_job_schedule_tx(
                        tx, s.sid, trigger=jl.Interval(seconds=7), payload=Tick(n=2), name="x"
                    )
                )
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError, match="rolled back"):
            doomed()
        [changed] = inside
        assert changed is not None
        assert changed.trigger == jl.Interval(seconds=7)  # it was written, inside the tx
        assert s.snap() == before
        assert s.entry() is entry
        assert s.sched.get_next_run(s.timer) == START + timedelta(seconds=60)
        await advance(s.clock, 15)
        [job] = s.jobs.list(schedule_id=s.sid)
        assert job.idempotency_key == sid_key(s.sid, START + timedelta(seconds=60))
        assert job.payload == {"n": 1}

    started(db, body)


def test_a_committed_update_tx_touches_no_timer_until_the_sync(db: str) -> None:
    async def body(s: Started) -> None:
        entry = s.entry()
        with s.jobs.write_tx() as tx:
            s.jobs.update_job_schedule_tx(tx, s.sid, trigger=jl.Interval(seconds=25))
        assert s.entry() is entry
        s.jobs.sync_job_schedule_timer_by_id(s.sid)
        assert s.entry() is not entry
        assert s.snap().next_run == START + timedelta(seconds=25)
        with s.jobs.write_tx() as tx:
            s.jobs.update_job_schedule_tx(tx, s.sid, enabled=False)
        assert s.sched.has(s.timer)
        s.jobs.sync_job_schedule_timer_by_id(s.sid)
        assert not s.sched.has(s.timer)

    started(db, body)


def test_sync_never_raises(db: str) -> None:
    async def body(s: Started) -> None:
        # A row whose stored trigger cannot be armed any more (no future fire).
        db_rows(
            db,
            "UPDATE job_schedules SET trigger = ? WHERE id = ?",
            ('{"kind": "cron", "expr": "0 0 30 2 *", "timezone": null, "limit": null}', s.sid),
        )
        s.jobs.sync_job_schedule_timer_by_id(s.sid)
        assert not s.sched.has(s.timer)
        s.jobs.sync_job_schedule_timer_by_id("no such id")
        db_rows(db, "DELETE FROM job_schedules")
        s.jobs.sync_job_schedule_timer_by_id(s.sid)

    started(db, body)


def test_mutations_from_another_thread_arm_on_the_loop(db: str) -> None:
    """A web app thread beside the worker's loop: the timers follow on the loop."""

    async def body(s: Started) -> None:
        def register() -> str:
            return s.jobs.register_job_schedule(
                TICK, Tick(n=2), trigger=jl.Interval(seconds=30), name="threaded"
            )

        sid = await asyncio.to_thread(register)
        await until(lambda: s.sched.has(f"schedule:{sid}"))
        await settle()
        snap = s.jobs.get_job_schedule_by_id(sid)
        assert snap is not None
        assert snap.next_run == START + timedelta(seconds=30)
        await advance(s.clock, 30)
        assert keys_of(s.jobs, sid) == {sid_key(sid, START + timedelta(seconds=30)): 1}
        assert await asyncio.to_thread(s.jobs.pause_job_schedule_by_id, s.sid) is True
        await until(lambda: not s.sched.has(s.timer))
        assert await asyncio.to_thread(s.jobs.unregister_job_schedule_by_id, sid) is True
        await until(lambda: not s.sched.has(f"schedule:{sid}"))
        await advance(s.clock, 120)
        assert s.jobs.count(type=TICK) == 1

    started(db, body)


def test_by_name_lookups_validate_the_name(jobs: jl.JobManager) -> None:
    jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
    # "" must not reach the singleton through its internal sentinel.
    for call in (
        lambda: jobs.get_job_schedule(TICK, ""),
        lambda: jobs.pause_job_schedule(TICK, ""),
        lambda: jobs.unregister_job_schedule(TICK, " padded "),
    ):
        assert _code(call) == "JOB_SCHEDULE_NAME_INVALID"
    [snap] = jobs.list_job_schedules()
    assert snap.enabled


def test_a_once_moved_onto_a_moment_a_manual_fire_covered_is_not_re_armed(
    db: str,
) -> None:
    async def body(s: Started) -> None:
        sid = s.jobs.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Once(at=START + timedelta(hours=1)), name="once"
        )
        timer = f"schedule:{sid}"
        await advance(s.clock, 60)
        assert await s.jobs.trigger_job_schedule_now_by_id(sid) is True  # last_run = +60 s
        assert s.sched.has(timer)  # a manual pre-fire does not spend a future one-shot
        snap = s.jobs.update_job_schedule(sid, trigger=jl.Once(at=START + timedelta(seconds=30)))
        assert snap is not None
        assert snap.next_run is None
        assert not s.sched.has(timer)
        # Moved past the manual fire, it is armed again.
        snap = s.jobs.update_job_schedule(sid, trigger=jl.Once(at=START + timedelta(minutes=5)))
        assert snap is not None
        assert snap.next_run == START + timedelta(minutes=5)
        await advance(s.clock, 300)
        assert keys_of(s.jobs, sid) == {
            None: 1,
            sid_key(sid, START + timedelta(minutes=5)): 1,
        }

    started(db, body)
