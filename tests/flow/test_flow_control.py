"""Flow control counted in the database (DESIGN.md §8.7): rate limits, queue limits set
by an operator, and queue pauses, on a real SQLite file and a real PostgreSQL schema."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict

import pydantic
import pytest

import jobledger as jl
from jobledger.testing import drain
from tests.conftest import db_rows, run

RATED = jl.JobType("flow.rated", int)
PLAIN = jl.JobType("flow.plain", int)


def _status(jobs: jl.JobManager, job_id: str) -> str:
    snap = jobs.get(job_id)
    assert snap is not None
    return str(snap.status)


async def _started(h: jl.JobHandle[object]) -> float:
    """The row's start time (epoch seconds) once the job completed."""
    snap = await asyncio.wait_for(h.finished, 30)
    assert snap.status == "completed"
    assert snap.started_at is not None
    return snap.started_at.timestamp()


def _max_in_window(starts: list[float], per: float) -> int:
    """The most starts in any window (t - per, t] (sliding), counted in whole
    milliseconds, the table's unit (float seconds would misplace a start that sits
    exactly one period after another)."""
    ms = sorted(round(t * 1000) for t in starts)
    per_ms = round(per * 1000)
    best, lo = 0, 0
    for hi, t in enumerate(ms):
        while ms[lo] <= t - per_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_a_handler_rate_limit_holds_in_any_sliding_window_and_completes_every_job(
    db: str,
) -> None:
    async def main() -> tuple[list[float], list[float]]:
        starts: list[float] = []
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(RATED, recovery="retry", concurrency=10, rate_limit=jl.RateLimit(4, 0.25))
        async def rated(ctx: jl.JobContext[int]) -> None:
            starts.append(time.time())

        async with jobs:
            handles = jobs.enqueue_many(RATED, list(range(14)))
            claimed = [await _started(h) for h in handles]
        return starts, claimed

    starts, claimed = run(main())
    assert len(starts) == 14
    # Four per quarter second at most in every window: exactly on the rows' start times
    # (the claim's clock), and on the handlers' own less their start lag (well under
    # 50 ms here).
    assert _max_in_window(claimed, 0.25) <= 4
    assert _max_in_window(starts, 0.2) <= 4
    # And it is a limit, not a stall: 14 jobs in about three windows.
    assert max(starts) - min(starts) < 10


def test_set_queue_limits_persists_and_overrides_the_handlers_cap(db: str) -> None:
    async def main() -> tuple[int, jl.QueueLimits, jl.QueueLimits]:
        running = 0
        peak = 0
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(PLAIN, recovery="retry", concurrency=8)
        async def plain(ctx: jl.JobContext[int]) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

        set_ = jobs.set_queue_limits(PLAIN.name, concurrency=2)
        async with jobs:
            for h in jobs.enqueue_many(PLAIN, list(range(20))):
                await asyncio.wait_for(h.finished, 30)
        other = jl.JobManager(db)  # another manager reads the same setting back
        read = other.queue_limits(PLAIN.name)
        await other.stop()
        return peak, set_, read

    peak, set_, read = run(main())
    assert peak <= 2
    assert set_ == read == jl.QueueLimits(PLAIN.name, 2, None, False)


def test_a_paused_queue_holds_its_jobs_until_resumed_from_another_manager(db: str) -> None:
    async def main() -> tuple[list[str], list[str], bool]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(PLAIN, recovery="retry", concurrency=4)
        async def plain(ctx: jl.JobContext[int]) -> None:
            return None

        operator = jl.JobManager(db)
        operator.pause_queue(PLAIN.name)
        async with jobs:
            handles = jobs.enqueue_many(PLAIN, list(range(5)))
            await asyncio.sleep(0.3)
            while_paused = [_status(jobs, h.id) for h in handles]
            listed = {q.name: q for q in operator.list_queues()}
            paused_listed = listed[PLAIN.name].limits.paused
            operator.resume_queue(PLAIN.name)
            after = [str((await asyncio.wait_for(h.finished, 30)).status) for h in handles]
        await operator.stop()
        return while_paused, after, paused_listed

    while_paused, after, paused_listed = run(main())
    assert while_paused == ["pending"] * 5
    assert paused_listed
    assert after == ["completed"] * 5


def test_a_rate_limit_set_by_an_operator_takes_effect_in_a_running_worker(db: str) -> None:
    async def main() -> list[float]:
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(PLAIN, recovery="retry", concurrency=10)
        async def plain(ctx: jl.JobContext[int]) -> None:
            return None

        operator = jl.JobManager(db)
        async with jobs:
            operator.set_queue_limits(PLAIN.name, rate_limit="3/200ms")
            claimed = [await _started(h) for h in jobs.enqueue_many(PLAIN, list(range(9)))]
        await operator.stop()
        return claimed

    claimed = run(main())
    assert len(claimed) == 9
    assert _max_in_window(claimed, 0.2) <= 3, sorted(claimed)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"concurrency": 0}, "JOB_INVALID_OPTION"),
        ({"concurrency": True}, "JOB_INVALID_OPTION"),
        ({"rate_limit": "ten a second"}, "JOB_INVALID_OPTION"),
        ({"rate_limit": "0/s"}, "JOB_INVALID_OPTION"),
        ({"rate_limit": 5}, "JOB_INVALID_OPTION"),
    ],
)
def test_bad_queue_limits_raise_and_write_nothing(
    db: str, kwargs: dict[str, object], code: str
) -> None:
    jobs = jl.JobManager(db)
    try:
        with pytest.raises(jl.JobError) as caught:
            jobs.set_queue_limits("q", **kwargs)  # type: ignore[arg-type]
        assert caught.value.code == code
        assert jobs.queue_limits("q") == jl.QueueLimits("q", None, None, False)
    finally:
        run(jobs.stop())


@pytest.mark.parametrize(
    ("limit", "per"),
    [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -1.0), (1, float("nan")), (1, float("inf")), (1.5, 1)],
)
def test_bad_rate_limits_raise(limit: object, per: object) -> None:
    with pytest.raises(jl.JobError) as caught:
        jl.RateLimit(limit, per)  # type: ignore[arg-type]
    assert caught.value.code == "JOB_INVALID_OPTION"


def test_rate_strings_parse() -> None:
    assert jl.RateLimit.parse("10/s") == jl.RateLimit(10, 1)
    assert jl.RateLimit.parse("5/10s") == jl.RateLimit(5, 10)
    assert jl.RateLimit.parse("100/m") == jl.RateLimit(100, 60)
    assert jl.RateLimit.parse("50/500ms") == jl.RateLimit(50, 0.5)
    assert str(jl.RateLimit(100, 60)) == "100/m"


def test_drain_helper_still_works_with_a_rate_limit(db: str) -> None:
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(RATED, recovery="retry", rate_limit=jl.RateLimit(100, 1))
    async def rated(ctx: jl.JobContext[int]) -> None:
        return None

    async def main() -> None:
        jobs.enqueue_many(RATED, [1, 2, 3])
        await drain(jobs)

    run(main())
    assert jobs.count(status="completed") == 3


class Tenant(pydantic.BaseModel):
    tenant: str
    n: int


KEYED = jl.JobType("flow.keyed", Tenant)


def test_a_keyed_rate_limit_gives_each_key_its_own_window(db: str) -> None:
    async def main() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        starts: dict[str, list[float]] = {}
        claimed: dict[str, list[float]] = {}
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(
            KEYED,
            recovery="retry",
            concurrency=20,
            rate_limit=jl.RateLimit(2, 0.3, key=lambda p: p.tenant),
        )
        async def keyed(ctx: jl.JobContext[Tenant]) -> None:
            starts.setdefault(ctx.payload.tenant, []).append(time.time())

        async with jobs:
            handles = jobs.enqueue_many(
                KEYED, [Tenant(tenant=t, n=i) for i in range(6) for t in ("a", "b", "c")]
            )
            for h in handles:
                snap = await asyncio.wait_for(h.finished, 30)
                assert snap.status == "completed"
                assert snap.started_at is not None
                tenant = snap.payload["tenant"]
                claimed.setdefault(tenant, []).append(snap.started_at.timestamp())
        # Exact on the rows' start times (the claim's clock). The handlers' own times
        # only trail them, by a start lag a loaded machine stretches: no window on those.
        for tenant, times in claimed.items():
            assert _max_in_window(times, 0.3) <= 2, (tenant, times)
        return claimed, starts

    claimed, starts = run(main())
    assert sorted(starts) == ["a", "b", "c"]
    for tenant, times in starts.items():
        assert len(times) == 6, tenant
        assert min(times) >= min(claimed[tenant]) - 0.001, tenant
    # The keys are independent: the first window saw every tenant's first two.
    everything = sorted(t for times in claimed.values() for t in times)
    assert _max_in_window(everything, 0.29) >= 4


def _run_keyed(
    db: str, rule: jl.RateLimit, concurrency: int, tenants: str, per_tenant: int
) -> dict[str, list[float]]:
    """Run `per_tenant` jobs of each tenant (one letter each) under a keyed `rule`, all
    completed; the rows' start times (epoch seconds) by tenant."""

    async def main() -> dict[str, list[float]]:
        claimed: dict[str, list[float]] = {}
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02)

        @jobs.handler(KEYED, recovery="retry", concurrency=concurrency, rate_limit=rule)
        async def keyed(ctx: jl.JobContext[Tenant]) -> None:
            pass

        async with jobs:
            handles = jobs.enqueue_many(
                KEYED, [Tenant(tenant=t, n=i) for i in range(per_tenant) for t in tenants]
            )
            for h in handles:
                snap = await asyncio.wait_for(h.finished, 30)
                assert snap.status == "completed"
                assert snap.started_at is not None
                tenant = snap.payload["tenant"]
                claimed.setdefault(tenant, []).append(snap.started_at.timestamp())
        return claimed

    return run(main())


def test_a_keyed_limit_counts_starts_taken_while_the_queue_had_room_for_all(db: str) -> None:
    """A keyed claim takes the head without reading the keys' windows while the queue's
    own bucket has room for all it may take (`_storage/rate.py`: `record_total`), and
    folds those starts into the keys' windows once it has not (`fold`): a key's window
    counts every start, from either kind of claim. 60 jobs per tenant, 30 per key per
    half second, 20 slots: the first claim takes 20 unread, the next ones must count
    them, or a tenant would start 40 in its first half second."""
    rule = jl.RateLimit(30, 0.5, key=lambda p: p.tenant)
    claimed = _run_keyed(db, rule, concurrency=20, tenants="ab", per_tenant=60)
    assert sorted(claimed) == ["a", "b"]
    for tenant, times in claimed.items():
        assert len(times) == 60, tenant
        assert _max_in_window(times, 0.5) <= 30, tenant
    # Both tenants ran side by side (the limit is per key, not for the queue).
    assert _max_in_window([t for ts in claimed.values() for t in ts], 0.5) > 30


def test_a_keyed_claim_far_under_the_limit_logs_only_the_queues_row(db: str) -> None:
    """While the queue's bucket has room for every claim, no key's bucket is read or
    written: the claims' rows in `rate_log` are the queue's, each with its starts per
    key, and they add up to every start."""
    rule = jl.RateLimit(1000, 60, key=lambda p: p.tenant)
    claimed = _run_keyed(db, rule, concurrency=10, tenants="abc", per_tenant=20)
    assert sorted(len(v) for v in claimed.values()) == [20, 20, 20]
    rows = db_rows(db, "SELECT bucket, cum, keys FROM rate_log ORDER BY at, cum")
    assert rows
    assert {r[0] for r in rows} == {KEYED.name}
    per_key: dict[str, int] = defaultdict(int)
    for _, _, keys in rows:
        for key, n in json.loads(keys).items():
            per_key[key] += n
    assert dict(per_key) == {"a": 20, "b": 20, "c": 20}
    assert max(r[1] for r in rows) == 60


def test_a_key_function_that_raises_or_answers_no_key_writes_nothing(db: str) -> None:
    jobs = jl.JobManager(db)

    def key(p: Tenant) -> str:
        if p.n < 0:
            raise ValueError("no tenant")
        return p.tenant

    @jobs.handler(KEYED, recovery="retry", rate_limit=jl.RateLimit(1, 1, key=key))
    async def keyed(ctx: jl.JobContext[Tenant]) -> None:
        return None

    try:
        for bad in (Tenant(tenant="a", n=-1), Tenant(tenant="", n=1), Tenant(tenant="a\x00", n=1)):
            with pytest.raises(jl.JobError) as caught:
                jobs.enqueue(KEYED, bad)
            assert caught.value.code == "JOB_INVALID_OPTION"
            with pytest.raises(jl.JobError):
                jobs.enqueue_many(KEYED, [Tenant(tenant="ok", n=1), bad])
        assert jobs.count() == 0
    finally:
        run(jobs.stop())


def test_a_debounced_job_takes_the_key_of_its_last_payload(db: str) -> None:
    jobs = jl.JobManager(db)

    @jobs.handler(KEYED, recovery="retry", rate_limit=jl.RateLimit(1, 1, key=lambda p: p.tenant))
    async def keyed(ctx: jl.JobContext[Tenant]) -> None:
        return None

    try:
        first = jobs.enqueue(KEYED, Tenant(tenant="a", n=1), idempotency_key="k", debounce=60)
        again = jobs.enqueue(KEYED, Tenant(tenant="b", n=2), idempotency_key="k", debounce=60)
        assert again.id == first.id
        plain = jobs.enqueue(KEYED, Tenant(tenant="c", n=3))
        keys: dict[str, str] = dict(db_rows(db, "SELECT id, rate_key FROM jobs"))
        assert keys == {first.id: "b", plain.id: "c"}
    finally:
        run(jobs.stop())


SPREAD = jl.JobType("flow.spread", int)


def test_settings_hold_in_spread_claims_while_the_global_cap_binds(db: str) -> None:
    """Ten queues of cap 5 under a global cap of 10 (so claims go across queues): q0's
    cap is lowered to 1, q1 is paused, q2 is limited to 2 starts per 300 ms."""

    async def main() -> tuple[dict[str, int], dict[str, list[float]], list[str]]:
        running: dict[str, int] = defaultdict(int)
        peak: dict[str, int] = defaultdict(int)
        starts: dict[str, list[float]] = defaultdict(list)
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, global_max_concurrency=10)

        @jobs.handler(SPREAD, recovery="retry", concurrency=5, queue=lambda n: f"q{n % 10}")
        async def spread(ctx: jl.JobContext[int]) -> None:
            running[ctx.queue] += 1
            peak[ctx.queue] = max(peak[ctx.queue], running[ctx.queue])
            await asyncio.sleep(0.005)
            running[ctx.queue] -= 1

        jobs.set_queue_limits("q0", concurrency=1)
        jobs.pause_queue("q1")
        jobs.set_queue_limits("q2", rate_limit="2/300ms")
        handles = jobs.enqueue_many(SPREAD, list(range(100)))
        async with jobs:
            others = [h for h in handles if h.snapshot.queue != "q1"]
            for h in others:
                snap = await asyncio.wait_for(h.finished, 30)
                assert snap.started_at is not None
                starts[snap.queue].append(snap.started_at.timestamp())
            left = [_status(jobs, h.id) for h in handles if h.snapshot.queue == "q1"]
        return peak, starts, left

    peak, starts, left = run(main())
    assert peak["q0"] == 1
    assert all(peak[f"q{i}"] <= 5 for i in range(10))
    assert sum(len(v) for v in starts.values()) == 90
    assert _max_in_window(starts["q2"], 0.3) <= 2
    assert left == ["pending"] * 10


def test_a_handler_rate_limit_holds_per_queue_in_spread_claims(db: str) -> None:
    async def main() -> dict[str, list[float]]:
        starts: dict[str, list[float]] = defaultdict(list)
        jobs = jl.JobManager(db, startup_delay=0, poll_interval=0.02, global_max_concurrency=4)

        @jobs.handler(
            SPREAD,
            recovery="retry",
            concurrency=4,
            queue=lambda n: f"r{n % 6}",
            rate_limit=jl.RateLimit(3, 0.3),
        )
        async def spread(ctx: jl.JobContext[int]) -> None:
            await asyncio.sleep(0.01)

        handles = jobs.enqueue_many(SPREAD, list(range(36)))
        async with jobs:
            for h in handles:
                snap = await asyncio.wait_for(h.finished, 30)
                assert snap.started_at is not None
                starts[snap.queue].append(snap.started_at.timestamp())
        return starts

    starts = run(main())
    assert sorted(starts) == [f"r{i}" for i in range(6)]
    for queue, times in starts.items():
        assert len(times) == 6, queue
        assert _max_in_window(times, 0.3) <= 3, (queue, sorted(times))
