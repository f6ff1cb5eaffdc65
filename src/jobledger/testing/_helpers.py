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
from jobledger._types import JobSnapshot
from jobledger.clock import to_ms
from jobledger.errors import JobError

__all__ = ["FakeClock", "assert_enqueued", "drain"]

_LIVE = ("pending", "delayed", "running")
_STEP = 0.001  # real seconds between looks while the engine works


def _all(jobs: JobManager, **filters: Any) -> list[JobSnapshot]:
    """Every job that matches, through the public `list` (1000 a page)."""
    out: list[JobSnapshot] = []
    while True:
        page = jobs.list(limit=1000, offset=len(out), **filters)
        out.extend(page)
        if len(page) < 1000:
            return out


def _waiting(jobs: JobManager) -> list[JobSnapshot]:
    """Waiting jobs of the types this manager runs (the engine will take them when due)."""
    handled = set(jobs.job_types)
    return [
        s
        for s in _all(jobs, status=("pending", "delayed"))
        if s.type in handled and not s.cancel_requested
    ]


def _due_work(jobs: JobManager, now_ms: int) -> bool:
    return any(to_ms(s.scheduled_at) <= now_ms for s in _waiting(jobs))


def _next_due(jobs: JobManager, now_ms: int) -> int | None:
    later = [to_ms(s.scheduled_at) for s in _waiting(jobs)]
    return min((t for t in later if t > now_ms), default=None)


def _busy(jobs: JobManager) -> bool:
    # A running row is a handler at work or an outcome still being written; the hooks
    # that run after a write (on_settled) are the engine's to report.
    mine = any(s.worker_id == jobs.worker_id for s in _all(jobs, status="running"))
    return mine or jobs.busy


def _now_ms(jobs: JobManager) -> int:
    return int(jobs.clock.time() * 1000)


async def drain(jobs: JobManager, *, timeout: float = 30.0) -> list[JobSnapshot]:
    """Run jobs until none is runnable; return the final snapshots of the jobs involved.

    Starts the manager if it was never started (it is left running: stop it, or use
    `async with jobs`). "Involved" means every job that was waiting or running when
    `drain` began, plus every job created while it ran (children, schedule fires), oldest
    first. A job no handler of this manager runs stays as it is (usually `pending`).
    Raises `TimeoutError` when work is still going on after `timeout` real seconds, and
    `JobError` (`JOB_MANAGER_STOPPED`) for a stopped manager.
    """
    if jobs.state in ("stopping", "stopped"):
        raise JobError("drain() needs a manager that is not stopped", code="JOB_MANAGER_STOPPED")
    if jobs.state == "new":
        await jobs.start()
    clock = jobs.clock
    fake = clock if isinstance(clock, FakeClock) else None
    if fake is None:
        # On real time the window would cost `startup_delay` (60 s by default, e.g. a
        # module-level manager of a web app): a test has no dead workers to wait out.
        jobs.end_quiet_window()
    deadline = time.monotonic() + timeout
    start_ms = _now_ms(jobs)
    # A workflow's `waiting` jobs are involved too; they are never due by themselves (the
    # finalize of their last upstream job makes them pending in its own transaction).
    involved = {s.id for s in _all(jobs, status=(*_LIVE, "waiting"))}
    seen_before = {s.id for s in _all(jobs) if to_ms(s.created_at) >= start_ms}

    def overdue(what: str) -> TimeoutError:
        live = [s.id for s in _all(jobs, status=_LIVE)]
        return TimeoutError(f"drain: {what} after {timeout:g}s; live jobs: {live[:10]}")

    # The quiet window: rows of dead workers wait for the sweep after it, so the fake
    # clock is moved through it (real time: waited out).
    while not jobs.recovery_done.done() and not jobs.paused:
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
        now = _now_ms(jobs)
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

    fresh = [
        s
        for s in _all(jobs)
        if (to_ms(s.created_at) >= start_ms and s.id not in seen_before) or s.id in involved
    ]
    fresh.sort(key=lambda s: (s.created_at, s.id))
    return fresh


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
    if status is not None:
        snaps = _all(jobs, type=name, status=str(status))
    else:
        snaps = _all(jobs, type=name)
    snaps.sort(key=lambda s: (s.created_at, s.id))
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
        others = sorted({s.type for s in _all(jobs)} - {name})
        raise AssertionError(
            f"expected {how_many} {name!r} job(s){wanted}{where}, found {len(matching)}. "
            f"{len(snaps)} {name!r} job(s) stored, payloads: {found}"
            + (f"; other types stored: {others}" if others else "")
        )
    return matching
