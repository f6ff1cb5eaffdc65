"""Several managers on one file: a fire is enqueued once, only the leader arms, and the
leader follows schedule changes other processes commit.

The first tests run two managers in one process on one `FakeClock` (deterministic);
the last one runs two real worker processes (`sched_proc.py`) on the wall clock and
kills the leader with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

import jobledger as jl
from jobledger._scheduling.overlap import Overlap
from jobledger.testing import FakeClock
from tests.conftest import db_rows
from tests.schedules import (
    START,
    TICK,
    Tick,
    advance,
    catchup_key,
    keys_of,
    make_manager,
    run,
    settle,
    sid_key,
    until,
)

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]


def _timer(sid: str) -> str:
    return f"schedule:{sid}"


def _leads(jobs: jl.JobManager) -> bool:
    # A call, not a property read, so mypy does not narrow it across awaits.
    return jobs.is_leader


# --- in one process, on a fake clock -------------------------------------------------------


def test_two_managers_arming_the_same_schedule_never_fire_it_twice(db: str) -> None:
    """Both arm (as in a leadership race): the idempotency key and the calendar
    compare-and-set together keep each fire to one row."""
    clock = FakeClock(START)

    async def scenario() -> None:
        a, b = make_manager(db, clock), make_manager(db, clock)
        every = a.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
        cron = a.register_job_schedule(
            TICK, Tick(n=2), trigger=jl.Cron("*/2 * * * *", limit=4), name="cron"
        )
        async with a, b:
            await a.recovery_done
            await b.recovery_done
            # Whoever leads, make both arm: the race a lease overlap could produce.
            for m in (a, b):
                m._schedules.on_leadership(True)
            await settle()
            for m in (a, b):
                assert m._schedules.sched.has(_timer(every))
            await advance(clock, 600)
            for m in (a, b):
                # Both really fired every point ...
                assert m._schedules.sched.fire_count(_timer(every)) == 10
            # ... and each point landed once.
            assert keys_of(a, every) == {
                sid_key(every, START + timedelta(seconds=60 * k)): 1 for k in range(1, 11)
            }
            assert len(keys_of(a, cron)) == 4
            assert set(keys_of(a, cron).values()) == {1}
            snap = a.get_job_schedule_by_id(cron)
            assert snap is not None
            assert snap.next_run is None

    run(scenario())


def test_a_stale_leader_firing_late_writes_nothing(db: str) -> None:
    """The compare-and-set, not the idempotency key, stops a late duplicate: once the
    first job finished, its key is free again, yet a second fire of T must not land."""
    clock = FakeClock(START)

    async def scenario() -> None:
        a, b = make_manager(db, clock), make_manager(db, clock)
        sid = a.register_job_schedule(TICK, Tick(n=1), trigger=jl.Cron("* * * * *"))
        async with a, b:
            await a.recovery_done
            await b.recovery_done
            await advance(clock, 60)
            [job] = a.list(schedule_id=sid)
            assert job.status == jl.JobStatus.COMPLETED
            fired_at = START + timedelta(minutes=1)
            assert job.idempotency_key == sid_key(sid, fired_at)
            # b (say, a leader that stalled past its lease) now fires the same minute.
            await b._schedules._fire(sid, fired_at)
            await advance(clock, 1)
            assert [j.id for j in b.list(schedule_id=sid)] == [job.id]
            snap = b.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.next_run == START + timedelta(minutes=2)

    run(scenario())


def test_a_slow_fire_write_does_not_stall_the_schedule(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fire whose write outlasts a period (a busy database) leaves the row's next_run
    behind the timer's calendar; later fires must still win their compare-and-set."""
    clock = FakeClock(START)

    async def scenario() -> None:
        jobs = make_manager(db, clock)
        sid = jobs.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
        async with jobs:
            await jobs.recovery_done
            real = jobs._store.write
            slow = [True]

            def write(work: Callable[[sqlite3.Connection], T], label: str) -> T:
                if label == "schedule_fire" and slow.pop() if slow else False:
                    clock.advance(90)  # the write blocks past the next grid point
                return real(work, label)

            monkeypatch.setattr(jobs._store, "write", write)
            await advance(clock, 60)
            assert clock.now() == START + timedelta(seconds=150)
            await advance(clock, 150)
            keys = keys_of(jobs, sid)
        # +120 elapsed during the slow write (skipped, not made up); the rest land.
        assert keys == {sid_key(sid, START + timedelta(seconds=s)): 1 for s in (60, 180, 240, 300)}

    run(scenario())


def test_only_the_leader_arms_and_a_follower_takes_over(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        a, b = make_manager(db, clock), make_manager(db, clock)
        sid = a.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
        await a.start()
        await a.recovery_done
        async with b:
            await b.recovery_done
            assert (a.is_leader, b.is_leader) == (True, False)
            assert a._schedules.sched.has(_timer(sid))
            assert not b._schedules.sched.has(_timer(sid))
            await advance(clock, 130)
            await a.stop()
            await advance(clock, 110)
            assert b.is_leader
            assert b._schedules.sched.has(_timer(sid))
            keys = keys_of(b, sid)
        assert keys == {sid_key(sid, START + timedelta(seconds=s)): 1 for s in (60, 120, 180, 240)}

    run(scenario())


class MissedRecorder(jl.JobHandler[Tick, None]):
    recovery = "retry"

    def __init__(self) -> None:
        self.missed: list[jl.MissedEvent] = []

    def execute(self, ctx: jl.JobContext[Tick]) -> None:
        return None

    def on_missed(self, event: jl.MissedEvent) -> None:
        self.missed.append(event)


@pytest.mark.parametrize("watcher_races", [False, True], ids=["quiet", "watcher-races"])
def test_a_new_leader_catches_up_what_fell_due_while_nobody_led(
    db: str, monkeypatch: pytest.MonkeyPatch, watcher_races: bool
) -> None:
    clock = FakeClock(START)
    recorder = MissedRecorder()

    async def scenario() -> str:
        a = make_manager(db, clock)
        # Its lease check runs every 200 s: a gap long enough to miss a fire.
        b = make_manager(db, clock, handler=recorder, poll_interval=10.0)
        if watcher_races:
            # The watcher noticing another process's commit right after the takeover
            # began must not arm ahead of the catch-up (which would skip it).
            hooks = b._schedules
            take = hooks.on_leadership

            def then_follow(leader: bool) -> None:
                take(leader)
                hooks.follow()

            monkeypatch.setattr(hooks, "on_leadership", then_follow)
        sid = a.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AfterStartup(0)
        )
        await a.start()
        await a.recovery_done
        async with b:
            await b.recovery_done
            await advance(clock, 130)
            await a.stop()
            await advance(clock, 69)
            assert not _leads(b)
            await advance(clock, 1)
            assert _leads(b)
            await advance(clock, 50)
            keys = keys_of(b, sid)
        assert keys == {
            sid_key(sid, START + timedelta(seconds=60)): 1,
            sid_key(sid, START + timedelta(seconds=120)): 1,
            catchup_key(sid, START + timedelta(seconds=180)): 1,
            sid_key(sid, START + timedelta(seconds=240)): 1,
        }
        return sid

    sid = run(scenario())
    assert recorder.missed == [
        jl.MissedEvent(sid, TICK.name, missed_count=1, last_fire_at=START + timedelta(seconds=120))
    ]


def test_a_follower_starting_beside_a_paused_leader_catches_up_nothing(db: str) -> None:
    clock = FakeClock(START)
    recorder = MissedRecorder()

    async def scenario() -> str:
        a = make_manager(db, clock)
        sid = a.register_job_schedule(
            TICK, Tick(n=1), trigger=jl.Interval(seconds=60), catch_up=jl.AfterStartup(0)
        )
        async with a:
            await a.recovery_done
            hold = a.pause("restore")
            await advance(clock, 150)  # next_run (+60) is overdue while the leader is paused
            b = make_manager(db, clock, handler=recorder)
            async with b:
                await b.recovery_done
                await settle()
                assert not b.is_leader
                assert b.list(schedule_id=sid) == []
                hold.dispose()
                await advance(clock, 30)
                keys = keys_of(a, sid)
        assert keys == {sid_key(sid, START + timedelta(seconds=180)): 1}
        return sid

    run(scenario())
    assert recorder.missed == []


def test_the_leader_follows_schedule_changes_of_other_processes(db: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        leader = make_manager(db, clock, poll_interval=0.01)
        web = make_manager(db, clock)  # a producer: never started
        async with leader:
            await leader.recovery_done
            timers = leader._schedules.sched

            sid = web.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=60))
            await until(lambda: timers.has(_timer(sid)))
            await advance(clock, 60)
            assert sum(keys_of(leader, sid).values()) == 1

            web.update_job_schedule(sid, trigger=jl.Interval(seconds=30))
            await until(lambda: timers.get_next_run(_timer(sid)) == START + timedelta(seconds=90))
            await advance(clock, 30)
            assert sum(keys_of(leader, sid).values()) == 2

            assert web.pause_job_schedule_by_id(sid)
            await until(lambda: not timers.has(_timer(sid)))
            await advance(clock, 60)
            assert web.resume_job_schedule_by_id(sid)
            await until(lambda: timers.has(_timer(sid)))
            await settle()
            snap = leader.get_job_schedule_by_id(sid)
            assert snap is not None
            assert snap.next_run == START + timedelta(seconds=180)
            await advance(clock, 30)
            assert sum(keys_of(leader, sid).values()) == 3

            assert web.unregister_job_schedule_by_id(sid)
            await until(lambda: not timers.has(_timer(sid)))
        await web.stop()

    run(scenario())


# --- two real worker processes ---------------------------------------------------------------

PERIOD = 0.1  # the schedule's interval on the wall clock
WAIT = 20.0


class Worker:
    """One `sched_proc` child; it reports `<worker id> <leader 0|1>` in a status file."""

    def __init__(self, db: str, tmp: Path, name: str, busy: float = 0.0) -> None:
        self.status = tmp / f"{name}.status"
        self.log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        args = [str(db), str(self.status), str(busy)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.schedules.sched_proc", *args],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def read(self) -> tuple[str, bool] | None:
        try:
            text = self.status.read_text()
        except FileNotFoundError:
            return None
        parts = text.split()
        return (parts[0], parts[1] == "1") if len(parts) >= 2 else None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(WAIT)
        self.log.close()


def _wait(check: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + WAIT
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _leading(worker: Worker) -> tuple[str, bool] | None:
    status = worker.read()
    return status if status is not None and status[1] else None


def _fires(db: str) -> list[tuple[str, str]]:
    sql = "SELECT idempotency_key, enqueued_by FROM jobs WHERE schedule_id IS NOT NULL"
    rows = db_rows(db, sql)
    return [(str(k), str(w)) for k, w in rows]


def test_two_worker_processes_fire_once_and_survive_the_leader_s_death(
    db: str, tmp_path: Path
) -> None:
    setup = jl.JobManager(db, startup_delay=0)

    @setup.handler(TICK, recovery="retry")
    def tick(ctx: jl.JobContext[Tick]) -> None:
        return None

    sid = setup.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=PERIOD))
    snap = setup.get_job_schedule_by_id(sid)
    assert snap is not None
    anchor_ms = round(snap.created_at.timestamp() * 1000)
    run(setup.stop())

    workers = [Worker(db, tmp_path, name) for name in ("w1", "w2")]
    try:
        states = _wait(lambda: all(w.read() for w in workers), "both workers to start")

        def leader() -> Worker | None:
            flags = [(w, w.read()) for w in workers]
            leaders = [w for w, s in flags if s is not None and s[1]]
            return leaders[0] if len(leaders) == 1 else None

        first = _wait(leader, "exactly one leader")
        first_id = first.read()
        assert first_id is not None
        _wait(lambda: len(_fires(db)) >= 8, "fires under the first leader")
        before = _fires(db)
        # Only the leader arms: every fire so far is its own.
        assert {w for _, w in before} == {first_id[0]}, states

        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(WAIT)
        second = next(w for w in workers if w is not first)
        second_id = _wait(lambda: _leading(second), "the follower to lead")
        _wait(
            lambda: sum(1 for _, w in _fires(db) if w == second_id[0]) >= 8,
            "fires under the new leader",
        )
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(WAIT) == 0
        fires = _fires(db)
    finally:
        for w in workers:
            w.close()

    counts = Counter(k for k, _ in fires)
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1]
    period_ms = round(PERIOD * 1000)
    for key in counts:
        prefix, _, fire_ms = key.rpartition(":")
        assert prefix == f"schedule:{sid}"
        assert (int(fire_ms) - anchor_ms) % period_ms == 0, key


def _unfinished(db: str, sid: str) -> tuple[int, int]:
    """(pending, delayed or running jobs; waiting jobs) of the schedule, one snapshot."""
    sql = "SELECT status FROM jobs WHERE schedule_id = ? AND finished_at IS NULL"
    statuses = [str(r[0]) for r in db_rows(db, sql, (sid,))]
    return sum(s != "waiting" for s in statuses), statuses.count("waiting")


def _skipped(db: str, sid: str) -> int:
    rows = db_rows(db, "SELECT skipped_count FROM job_schedules WHERE id = ?", (sid,))
    return int(rows[0][0])


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
def test_overlap_decisions_hold_across_two_processes_and_the_leader_s_death(
    db: str, tmp_path: Path, overlap: Overlap
) -> None:
    """Runs of 0.25 s on a 0.1 s schedule: most fires meet an unfinished job. Each
    decision is its fire's own transaction, so whichever process fires (the first leader,
    the follower after the SIGKILL, both during the takeover), a snapshot of the table
    never shows more unfinished jobs than the policy allows; the killed leader's running
    job stays unfinished until the new leader rescues it, and blocks fires meanwhile."""
    setup = jl.JobManager(db, startup_delay=0)

    @setup.handler(TICK, recovery="retry")
    def tick(ctx: jl.JobContext[Tick]) -> None:
        return None

    sid = setup.register_job_schedule(
        TICK, Tick(n=1), trigger=jl.Interval(seconds=PERIOD), overlap=overlap
    )
    run(setup.stop())
    allowed_waiting = 1 if overlap == "buffer_one" else 0
    seen: list[tuple[int, int]] = []

    def sample() -> None:
        seen.append(_unfinished(db, sid))
        live, waiting = seen[-1]
        assert live <= 1, seen[-20:]
        assert waiting <= allowed_waiting, seen[-20:]

    workers = [Worker(db, tmp_path, name, busy=0.25) for name in ("w1", "w2")]
    try:

        def leader() -> Worker | None:
            sample()
            leaders = [w for w in workers if (s := w.read()) is not None and s[1]]
            return leaders[0] if len(leaders) == 1 else None

        first = _wait(leader, "exactly one leader")
        first_id = first.read()
        assert first_id is not None

        def fired_by(worker_id: str, n: int) -> bool:
            sample()
            return sum(1 for _, w in _fires(db) if w == worker_id) >= n

        def held_one() -> bool:
            # buffer_one: wait until a snapshot showed a fire held back behind a run.
            return allowed_waiting == 0 or any(waiting for _, waiting in seen)

        _wait(
            lambda: fired_by(first_id[0], 3) and _skipped(db, sid) >= 3 and held_one(),
            "skips (and a held-back fire) under the first leader",
        )
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(WAIT)
        second = next(w for w in workers if w is not first)

        def leading() -> tuple[str, bool] | None:
            sample()
            return _leading(second)

        second_id = _wait(leading, "the follower to lead")
        skipped = _skipped(db, sid)
        _wait(
            lambda: fired_by(second_id[0], 3) and _skipped(db, sid) >= skipped + 3,
            "fires and skips under the new leader",
        )
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(WAIT) == 0
        fires = _fires(db)
    finally:
        for w in workers:
            w.close()
    counts = Counter(k for k, _ in fires)
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1]
    assert len(seen) > 20
