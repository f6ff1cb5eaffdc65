"""Hypothesis feeds every public entry point of `JobManager` random options: text with
control characters and surrogates, huge, NaN and infinite numbers, huge ints, odd types.

The property (DESIGN §8.12): each call either succeeds or raises a `JobError`, never
anything else, and a call that raised wrote nothing (`count()` and the schedules are
unchanged). Whatever did go in must still read back (`list`, `get`).

One manager on a real SQLite file per test; derandomized and few examples, so the run is
repeatable and takes seconds.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobledger as jl
from jobledger.clock import to_ms
from tests.engine import make_manager

LOOSE = jl.JobType("prop.loose", dict[str, Any])
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text that reaches every check: controls, DEL/C1, lone surrogates, NUL, plain words.
texts = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=8),
    st.sampled_from(["", " ", "q", "a\x00b", "\ud800", "x\udfff", "\x7f", "\x85", "é", "\n"]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -0.0, 1e12, 0.001]),
)
ints = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([2**31, 2**62, 2**62 + 1, 2**63, -(2**63) - 1, 2**70, 10**400]),
)
datetimes = st.one_of(
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=14)), None])),
    st.sampled_from(
        [datetime.max, datetime.min, datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    ),
)
odd = st.sampled_from([None, True, object(), b"bytes", [1], {"k": 1}, 1 + 2j])
scalars = st.one_of(texts, floats, ints, odd, datetimes, st.none())
json_like = st.recursive(
    st.one_of(texts, floats, ints, st.none(), st.booleans()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(texts, ints, st.none(), st.booleans()), inner, max_size=3),
    ),
    max_leaves=6,
)
options = st.fixed_dictionaries(
    {},
    optional={
        "queue": st.one_of(texts, odd),
        "priority": st.one_of(ints, floats, odd),
        "idempotency_key": st.one_of(texts, odd),
        "run_at": st.one_of(datetimes, odd),
        "delay": st.one_of(floats, ints, st.timedeltas(), st.just(timedelta.max), odd),
        "timeout": st.one_of(floats, ints, odd),
        "max_attempts": st.one_of(ints, floats, odd),
        "metadata": st.one_of(json_like, odd),
    },
)
spec_fields = ("idempotency_key", "priority", "run_at", "delay", "metadata")


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[jl.JobManager]:
    jobs = make_manager(str(tmp_path / "jobs.db"))

    @jobs.handler(LOOSE, recovery="retry")
    async def work(ctx: jl.JobContext[dict[str, Any]]) -> None:
        return None

    jobs.enqueue(LOOSE, {"seed": 1})
    yield jobs
    asyncio.run(jobs.stop())


def state(jobs: jl.JobManager) -> tuple[int, int]:
    return jobs.count(), len(jobs.list_job_schedules())


def holds(jobs: jl.JobManager, call: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """`call(*args, **kwargs)` succeeds, or raises a JobError and changes nothing; every
    row still reads."""
    before = state(jobs)
    try:
        result = call(*args, **kwargs)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except jl.JobError:
        assert state(jobs) == before
    for snap in jobs.list(limit=1000):
        assert jobs.get(snap.id) is not None


@SETTINGS
@given(payload=json_like, opts=options)
def test_enqueue_forms(manager: jl.JobManager, payload: Any, opts: dict[str, Any]) -> None:
    jobs = manager
    # Each option alone too: together, one bad option hides what the others would do.
    for single in [{}, *({k: v} for k, v in opts.items()), opts]:
        holds(jobs, jobs.enqueue, LOOSE, payload, **single)
        holds(jobs, jobs.enqueue_many, LOOSE, [payload, {"p": 1}], **single)
        spec_opts = {k: v for k, v in single.items() if k in spec_fields}
        entry: jl.JobSpec[Any] = jl.JobSpec(payload, **spec_opts)
        holds(jobs, jobs.enqueue_many, LOOSE, [entry])

        def in_tx(single: dict[str, Any] = single) -> None:
            with jobs.write_tx() as tx:
                jobs.enqueue_tx(tx, LOOSE, payload, **single)

        holds(jobs, in_tx)


@SETTINGS
@given(
    value=st.one_of(scalars, json_like),
    text=texts,
    offset=st.one_of(ints, odd),
    limit=st.one_of(ints, odd),
)
def test_reads_and_cancels(
    manager: jl.JobManager, value: Any, text: str, offset: Any, limit: Any
) -> None:
    jobs = manager
    holds(jobs, lambda: jobs.get(value))
    holds(jobs, lambda: jobs.cancel(value, text))
    holds(jobs, lambda: jobs.cancel(text, value))
    for name in ("queue", "type", "schedule_id", "parent_id", "status"):
        holds(jobs, jobs.list, **{name: value}, limit=limit, offset=offset)
        holds(jobs, jobs.count, **{name: value})
    holds(jobs, lambda: jobs.cancel_many(queue=text, reason=value))
    holds(jobs, lambda: jobs.cancel_many(type=value))
    holds(jobs, lambda: jobs.pause(value).dispose())


triggers = st.one_of(
    st.builds(jl.Once, at=st.one_of(datetimes, odd)),
    st.builds(jl.Interval, seconds=st.one_of(floats, ints, odd)),
    st.builds(jl.Cron, expr=st.one_of(texts, st.just("*/5 * * * *")), timezone=texts),
    st.builds(jl.Cron, expr=st.just("0 * * * *"), limit=st.one_of(ints, odd)),
    odd,
)
catch_ups = st.one_of(
    st.none(),
    st.just(jl.SkipMissed()),
    st.builds(jl.AfterStartup, minutes=st.one_of(floats, ints, odd)),
    odd,
)


@SETTINGS
@given(
    payload=json_like,
    trigger=triggers,
    name=st.one_of(st.none(), texts, odd),
    catch_up=catch_ups,
    metadata=st.one_of(st.none(), json_like, odd),
    enabled=st.one_of(st.booleans(), odd),
)
def test_schedules(
    manager: jl.JobManager,
    payload: Any,
    trigger: Any,
    name: Any,
    catch_up: Any,
    metadata: Any,
    enabled: Any,
) -> None:
    jobs = manager
    drawn = {
        "trigger": trigger,
        "name": name,
        "catch_up": catch_up,
        "metadata": metadata,
        "enabled": enabled,
    }
    base: dict[str, Any] = {"trigger": jl.Interval(60), "name": "base"}
    # Each argument alone (the others valid), then all of them together.
    for options in [*({**base, k: v} for k, v in drawn.items()), drawn]:
        holds(jobs, jobs.register_job_schedule, LOOSE, {"p": 1}, **options)
    holds(jobs, jobs.register_job_schedule, LOOSE, payload, trigger=jl.Interval(60), name="p")
    for snap in jobs.list_job_schedules():
        if isinstance(snap.trigger, jl.Once) and isinstance(trigger, jl.Once):
            # What was accepted reads back as it was given, to the stored millisecond.
            assert to_ms(snap.trigger.at) == to_ms(trigger.at)
        for key, value in [*drawn.items(), ("payload", payload)]:
            holds(jobs, jobs.update_job_schedule, snap.id, **{key: value})
        assert jobs.get_job_schedule_by_id(snap.id) is not None
        jobs.unregister_job_schedule_by_id(snap.id)
    holds(jobs, jobs.update_job_schedule, name, enabled=False)
    holds(jobs, jobs.get_job_schedule, LOOSE, name)
    holds(jobs, jobs.unregister_job_schedule_by_id, name)


@settings(SETTINGS, max_examples=40)
@given(
    name=st.sampled_from(
        [
            "global_max_concurrency",
            "startup_delay",
            "poll_interval",
            "worker_timeout",
            "heartbeat_interval",
            "gc_retention",
            "gc_interval",
            "leader_ttl",
            "busy_timeout",
            "claim_batch",
            "process_max_concurrency",
            "thread_pool_size",
            "max_payload_bytes",
            "worker_id",
            "synchronous",
        ]
    ),
    value=scalars,
)
def test_manager_options(tmp_path: Path, name: str, value: Any) -> None:
    try:
        jobs = jl.JobManager(str(tmp_path / "options.db"), **{name: value})
    except jl.JobError:
        return
    jobs.enqueue(LOOSE, {})
    assert jobs.count() >= 1
    asyncio.run(jobs.stop())
