"""Reading jobs: `get`, `list` (newest first, filters, paging, the 1000 cap), `count`, and
`h.finished` across managers (a producer-only manager sees a job another one finished).
"""

from __future__ import annotations

import pytest

import jobledger as jl
from tests.conftest import run
from tests.engine import ITEM, Item, make_manager

OTHER = jl.JobType("test.other", Item)


def test_list_is_newest_first_with_filters_and_count(db: str) -> None:
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    @jobs.handler(OTHER, recovery="retry")
    async def other(ctx: jl.JobContext[Item]) -> None:
        return None

    a = [jobs.enqueue(ITEM, Item(n=i), queue="qa") for i in range(3)]
    b = [jobs.enqueue(OTHER, Item(n=i)) for i in range(2)]
    later = jobs.enqueue(ITEM, Item(n=9), delay=3600, parent_id=a[0].id)
    created = [*a, *b, later]

    def ids(snaps: list[jl.JobSnapshot]) -> list[str]:
        return [s.id for s in snaps]

    newest_first = [h.id for h in reversed(created)]
    assert ids(jobs.list()) == newest_first
    assert ids(jobs.list(limit=2)) == newest_first[:2]
    assert ids(jobs.list(limit=2, offset=2)) == newest_first[2:4]
    assert ids(jobs.list(offset=10)) == []
    assert ids(jobs.list(queue="qa")) == [h.id for h in reversed(a)]
    assert ids(jobs.list(type=OTHER)) == [h.id for h in reversed(b)]
    assert ids(jobs.list(type="test.other")) == [h.id for h in reversed(b)]
    assert ids(jobs.list(status="delayed")) == [later.id]
    assert ids(jobs.list(status=jl.JobStatus.DELAYED)) == [later.id]
    assert ids(jobs.list(parent_id=a[0].id)) == [later.id]
    assert ids(jobs.list(schedule_id="none")) == []
    assert ids(jobs.list(type=ITEM, status=["pending", "delayed"], queue="qa")) == [
        h.id for h in reversed(a)
    ]
    assert jobs.count() == 6
    assert jobs.count(type=ITEM) == 4
    assert jobs.count(status=["pending", "delayed"]) == 6
    assert jobs.count(status="running") == 0
    assert jobs.count(queue="qa", status="pending") == 3
    assert jobs.count(parent_id=a[0].id) == 1

    async def main() -> None:
        async with jobs:
            for h in [*a, *b]:
                await h.finished
            assert await jobs.cancel(later.id) == "cancelled"

    run(main())
    assert jobs.count(status="completed") == 5
    assert ids(jobs.list(status=["cancelled"])) == [later.id]
    assert ids(jobs.list(status=("completed", "cancelled"))) == newest_first
    got = jobs.get(a[1].id)
    assert got is not None
    assert (got.id, got.type, got.queue, got.payload) == (a[1].id, "test.item", "qa", {"n": 1})
    assert jobs.get("no-such-id") is None


def test_list_limit_is_capped_at_1000_and_bad_arguments_rejected(db: str) -> None:
    jobs = make_manager(db)
    jobs.enqueue_many(ITEM, [Item(n=i) for i in range(1005)])
    assert jobs.count() == 1005
    assert len(jobs.list()) == 100  # the default limit
    assert len(jobs.list(limit=5000)) == 1000
    assert len(jobs.list(limit=1000, offset=1000)) == 5
    for kwargs in ({"limit": 0}, {"limit": -1}, {"offset": -1}):
        with pytest.raises(jl.JobValidationError):
            jobs.list(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(jl.JobValidationError):
        jobs.list(status="nope")
    with pytest.raises(jl.JobValidationError):
        jobs.count(status=["pending", "nope"])
    run(jobs.stop())


def test_finished_resolves_in_a_producer_only_manager(db: str) -> None:
    """A second manager on the same file, never started, enqueues; the worker finishes;
    the producer's handle resolves by watching the row."""
    worker = make_manager(db)
    producer = jl.JobManager(db, startup_delay=0, poll_interval=0.01)

    @worker.handler(ITEM, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def work(ctx: jl.JobContext[Item]) -> int:
        if ctx.payload.n < 0:
            raise ValueError("negative")
        return ctx.payload.n * 2

    async def main() -> list[jl.JobSnapshot]:
        async with worker:
            # The producer has no handler, so its rows carry max_attempts from the call
            # (default 3), not from the worker's retry policy.
            handles = [producer.enqueue(ITEM, Item(n=n), max_attempts=1) for n in (1, -1, 3)]
            snaps = [await h.finished for h in handles]
            # Already terminal: resolves at once, also for a handle made from a read.
            snaps.append(await handles[0].finished)
        await producer.stop()
        return snaps

    snaps = run(main())
    assert [(s.status, s.output) for s in snaps] == [
        ("completed", 2),
        ("failed", None),
        ("completed", 6),
        ("completed", 2),
    ]
    assert all(s.worker_id == worker.worker_id for s in snaps)
    assert snaps[1].error is not None
    assert snaps[1].error.code == "JOB_HANDLER_THREW"
