"""Helpers for testing code that uses jobledger: a fake clock, `drain` and `assert_enqueued`.

    clock = FakeClock()
    jobs = make_jobs(tmp_path / "jobs.db", clock=clock, startup_delay=0)
    async with jobs:
        jobs.enqueue(SEND, Send(to="a@example.com"))
        done = await drain(jobs)          # runs everything, retries included
    assert [s.status for s in done] == ["completed"]

`drain` runs jobs until none is runnable. With a `FakeClock` it moves the clock forward to
the next due job (a delayed job, a retry waiting out its backoff) whenever nothing else
can run, so a handler that fails twice with exponential backoff completes in
milliseconds of real time. It never moves the clock while a handler runs (so timeouts
fire only if the test moves the clock itself), and it does not advance to schedule fires
on its own: jobs fired by a schedule while the clock moves are run like any other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from jobledger._core.registry import JobType
from jobledger._fake_clock import FakeClock
from jobledger._runtime.manager import JobManager
from jobledger._storage import layout as L
from jobledger._storage.rows import snapshot_from_row
from jobledger._types import JobSnapshot
from jobledger.errors import JobError

__all__ = ["FakeClock", "assert_enqueued", "drain"]

_LIVE = ("pending", "delayed", "running")
_STEP = 0.001  # real seconds between looks while the engine works


def _rows(jobs: JobManager, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    return jobs._store.read(lambda c: c.execute(sql, params).fetchall())


def _handled(jobs: JobManager) -> tuple[str, ...]:
    return tuple(jobs._handlers)


def _in(n: int) -> str:
    return ",".join("?" * n)


def _due_work(jobs: JobManager, now_ms: int) -> bool:
    """A waiting job of a type this manager runs is due now (the engine will take it)."""
    types = _handled(jobs)
    if not types:
        return False
    rows = _rows(
        jobs,
        "SELECT 1 FROM jobs WHERE status IN ('pending', 'delayed') AND cancel_requested = 0 "
        f"AND scheduled_at <= ? AND type IN ({_in(len(types))}) LIMIT 1",
        (now_ms, *types),
    )
    return bool(rows)


def _next_due(jobs: JobManager, now_ms: int) -> int | None:
    types = _handled(jobs)
    if not types:
        return None
    rows = _rows(
        jobs,
        "SELECT min(scheduled_at) FROM jobs WHERE status IN ('pending', 'delayed') "
        f"AND cancel_requested = 0 AND scheduled_at > ? AND type IN ({_in(len(types))})",
        (now_ms, *types),
    )
    value = rows[0][0] if rows else None
    return None if value is None else int(value)


def _busy(jobs: JobManager) -> bool:
    engine = jobs._engine
    return bool(engine.inflight or engine._buffer or engine._settling)


async def drain(jobs: JobManager, *, timeout: float = 30.0) -> list[JobSnapshot]:
    """Run jobs until none is runnable; return the final snapshots of the jobs involved.

    Starts the manager if it was never started (it is left running: stop it, or use
    `async with jobs`). "Involved" means every job that was waiting or running when
    `drain` began, plus every job created while it ran (children, schedule fires), oldest
    first. A job no handler of this manager runs stays as it is (usually `pending`).
    Raises `TimeoutError` when work is still going on after `timeout` real seconds, and
    `JobError` (`JOB_MANAGER_STOPPED`) for a stopped manager.
    """
    if jobs._stopped or jobs._stopping:
        raise JobError("drain() needs a manager that is not stopped", code="JOB_MANAGER_STOPPED")
    if not jobs._started:
        await jobs.start()
    clock = jobs.clock
    fake = clock if isinstance(clock, FakeClock) else None
    engine = jobs._engine
    deadline = time.monotonic() + timeout
    start_ms = engine.now_ms()
    involved = {r[0] for r in _rows(jobs, f"SELECT id FROM jobs WHERE status IN {_LIVE}")}
    seen_before = {
        r[0] for r in _rows(jobs, "SELECT id FROM jobs WHERE created_at >= ?", (start_ms,))
    }

    def overdue(what: str) -> TimeoutError:
        live = [r[0] for r in _rows(jobs, f"SELECT id FROM jobs WHERE status IN {_LIVE}")]
        return TimeoutError(f"drain: {what} after {timeout:g}s; live jobs: {live[:10]}")

    # The quiet window: nothing is dispatched until the startup recovery flow has run.
    while not jobs._lifecycle.dispatch_open and not jobs.paused:
        if time.monotonic() > deadline:
            raise overdue("the startup quiet window did not end")
        step = fake.next_deadline() if fake is not None else None
        if fake is not None and step is not None:
            await fake.advance_async(step)
        else:
            await asyncio.sleep(_STEP)

    while not jobs.paused:
        if time.monotonic() > deadline:
            raise overdue("jobs were still running")
        now = engine.now_ms()
        if _busy(jobs) or _due_work(jobs, now):
            await asyncio.sleep(_STEP)
            continue
        nxt = _next_due(jobs, now)
        if nxt is None:
            break
        if fake is not None:
            await fake.advance_async((nxt - now) / 1000)
        else:
            await asyncio.sleep(min(0.05, (nxt - now) / 1000))

    rows = _rows(
        jobs,
        f"SELECT {L.JOB_COLUMNS} FROM jobs WHERE created_at >= ? ORDER BY created_at, id",
        (start_ms,),
    )
    fresh = [r for r in rows if r[L.C_ID] not in seen_before or r[L.C_ID] in involved]
    ids = {r[L.C_ID] for r in fresh}
    missing = [i for i in involved if i not in ids]
    fresh.extend(row for row in map(jobs._store.get, missing) if row is not None)
    fresh.sort(key=lambda r: (r[L.C_CREATED_AT], r[L.C_ID]))
    return [snapshot_from_row(r) for r in fresh]


class _AnyPayload:
    def __repr__(self) -> str:
        return "ANY"


_ANY_PAYLOAD: Any = _AnyPayload()


def _as_json(job_type: JobType[Any] | None, payload: Any) -> Any:
    if job_type is not None:
        return job_type.adapter.dump_python(job_type.adapter.validate_python(payload), mode="json")
    if isinstance(payload, Mapping | list | str | int | float | bool) or payload is None:
        return payload
    return TypeAdapter(type(payload)).dump_python(payload, mode="json")


def assert_enqueued(
    jobs: JobManager,
    job_type: JobType[Any] | str,
    payload: Any = _ANY_PAYLOAD,
    *,
    count: int | None = None,
    status: str | None = None,
) -> list[JobSnapshot]:
    """Assert that jobs of `job_type` were enqueued (in any state unless `status` is given).

    `payload` (a typed value or its JSON form) must equal the stored payload; `count`
    is the exact number of matching jobs (default: at least one). Returns the matching
    snapshots, oldest first; raises `AssertionError` describing what was found otherwise.
    """
    name = job_type.name if isinstance(job_type, JobType) else job_type
    typed = job_type if isinstance(job_type, JobType) else jobs.job_types.get(name)
    sql = f"SELECT {L.JOB_COLUMNS} FROM jobs WHERE type = ?"
    params: tuple[Any, ...] = (name,)
    if status is not None:
        sql += " AND status = ?"
        params = (name, str(status))
    snaps = [snapshot_from_row(r) for r in _rows(jobs, sql + " ORDER BY created_at, id", params)]
    if payload is _ANY_PAYLOAD:
        matching = snaps
        wanted = ""
    else:
        expected = _as_json(typed, payload)
        matching = [s for s in snaps if s.payload == expected]
        wanted = f" with payload {expected!r}"
    ok = len(matching) == count if count is not None else bool(matching)
    if not ok:
        how_many = f"exactly {count}" if count is not None else "at least one"
        where = f" in state {status!r}" if status is not None else ""
        found = [s.payload for s in snaps[:10]]
        others = sorted(
            {r[0] for r in _rows(jobs, "SELECT DISTINCT type FROM jobs WHERE type != ?", (name,))}
        )
        raise AssertionError(
            f"expected {how_many} {name!r} job(s){wanted}{where}, found {len(matching)}. "
            f"{len(snaps)} {name!r} job(s) stored, payloads: {found}"
            + (f"; other types stored: {others}" if others else "")
        )
    return matching
