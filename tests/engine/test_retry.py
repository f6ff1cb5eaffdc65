"""`jobs.retry` / `jobs.retry_many`: a terminal job re-run as a new job, the old row
untouched; bad input is refused with its code and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import jobledger as jl
from jobledger.testing import drain
from tests.conftest import db_rows, run
from tests.engine import ITEM, Item, fast_retry, make_manager

UNHANDLED = jl.JobType("test.unhandled", Item)


def failing_manager(db: str) -> jl.JobManager:
    """ITEM fails with n < 0 (once: one attempt), completes otherwise."""
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry", retry=fast_retry(1))
    async def work(ctx: jl.JobContext[Item]) -> int:
        if ctx.payload.n < 0:
            raise RuntimeError(f"bad n {ctx.payload.n}")
        return ctx.payload.n

    return jobs


def rejected(fn: Callable[[], object]) -> jl.JobError:
    with pytest.raises(jl.JobError) as info:
        fn()
    return info.value


def table(db: str) -> list[tuple[Any, ...]]:
    return db_rows(db, "SELECT id, status, payload, retry_of FROM jobs ORDER BY id")


def test_a_failed_job_is_re_run_as_a_new_job_and_runs(db: str) -> None:
    jobs = failing_manager(db)

    async def main() -> None:
        async with jobs:
            parent = jobs.enqueue(UNHANDLED, Item(n=0))
            h = jobs.enqueue(
                ITEM,
                Item(n=-1),
                priority=3,
                idempotency_key="once",
                metadata={"tenant": "a"},
                max_attempts=1,
                timeout=9.5,
                parent_id=parent.id,
                queue="work",
            )
            old = await h.finished
            assert old.status == "failed"

            again = jobs.retry(h.id)
            s = again.snapshot
            assert s.id != h.id
            assert s.retry_of == h.id
            assert (s.type, s.queue, s.priority, s.payload, dict(s.metadata)) == (
                ITEM.name, "work", 3, {"n": -1}, {"tenant": "a"},
            )  # fmt: skip
            assert (s.max_attempts, s.timeout, s.parent_id) == (1, 9.5, parent.id)
            assert (s.status, s.attempt, s.idempotency_key) == ("pending", 0, None)
            assert jobs.get(s.id) == s
            assert (await again.finished).status == "failed"  # dispatched like an enqueue
            assert jobs.get(h.id) == old  # the old row is untouched

            fixed = jobs.retry(h.id, payload=Item(n=5))
            done = await fixed.finished
            assert (done.status, done.output, done.payload, done.retry_of) == (
                "completed", 5, {"n": 5}, h.id,
            )  # fmt: skip
            assert old.to_json()["retry_of"] is None
            assert done.to_json()["retry_of"] == h.id

    run(main())


@pytest.mark.parametrize("end", ["completed", "cancelled"])
def test_a_completed_or_cancelled_job_can_be_retried(db: str, end: str) -> None:
    jobs = failing_manager(db)

    async def main() -> None:
        async with jobs:
            if end == "completed":
                h = jobs.enqueue(ITEM, Item(n=1))
                assert (await h.finished).status == "completed"
            else:
                h = jobs.enqueue(ITEM, Item(n=1), delay=3600)
                assert await jobs.cancel(h.id) == "cancelled"
            again = jobs.retry(h.id)
            assert again.snapshot.retry_of == h.id
            assert (await again.finished).status == "completed"
            assert jobs.get(h.id).status == end  # type: ignore[union-attr]

    run(main())


def test_the_idempotency_key_is_not_copied_so_a_new_enqueue_with_it_is_a_new_job(
    db: str,
) -> None:
    jobs = failing_manager(db)

    async def main() -> None:
        async with jobs:
            h = jobs.enqueue(ITEM, Item(n=-1), idempotency_key="k")
            await h.finished
            again = jobs.retry(h.id)
            assert again.snapshot.idempotency_key is None
            fresh = jobs.enqueue(ITEM, Item(n=2), idempotency_key="k")
            assert fresh.id not in (h.id, again.id)
            await drain(jobs, timeout=20)

    run(main())


def test_only_terminal_jobs_can_be_retried_and_nothing_is_written(db: str) -> None:
    jobs = failing_manager(db)
    pending = jobs.enqueue(UNHANDLED, Item(n=1))
    delayed = jobs.enqueue(ITEM, Item(n=1), delay=3600)
    gate: dict[str, Any] = {}

    @jobs.handler(jl.JobType("test.hold", Item), recovery="retry")
    async def hold(ctx: jl.JobContext[Item]) -> None:
        gate["running"].set()
        await ctx.cancelled.wait()

    async def main() -> None:
        gate["running"] = asyncio.Event()
        async with jobs:
            running = jobs.enqueue("test.hold", Item(n=1))
            await asyncio.wait_for(gate["running"].wait(), 20)
            before = table(db)
            for h, status in ((pending, "pending"), (delayed, "delayed"), (running, "running")):
                for err in (
                    rejected(partial(jobs.retry, h.id)),
                    rejected(partial(jobs.retry, h.id, payload=Item(n=9))),
                ):
                    assert (err.code, err.params["status"]) == ("JOB_NOT_RETRYABLE", status)
            assert table(db) == before
            await jobs.cancel(running.id)

    run(main())


def test_an_unknown_id_is_job_not_found_and_a_non_string_id_invalid(db: str) -> None:
    jobs = failing_manager(db)
    for job_id in ("no-such-job", "0" * 36, "\ud800"):
        assert rejected(partial(jobs.retry, job_id)).code == "JOB_NOT_FOUND"
        assert rejected(partial(jobs.retry, job_id, payload={"n": 1})).code == "JOB_NOT_FOUND"
    bad: Any = 42
    assert rejected(lambda: jobs.retry(bad)).code == "JOB_INVALID_OPTION"
    assert table(db) == []
    run(jobs.stop())


def test_a_payload_is_validated_like_an_enqueue_and_a_bad_one_writes_nothing(db: str) -> None:
    jobs = failing_manager(db)

    async def main() -> None:
        async with jobs:
            failed = jobs.enqueue(ITEM, Item(n=-1))
            await failed.finished
            before = table(db)
            wrong: Any = {"n": "not a number"}
            assert rejected(lambda: jobs.retry(failed.id, payload=wrong)).code == (
                "JOB_PAYLOAD_INVALID"
            )
            assert table(db) == before
            # A dict is validated into the model, as enqueue does.
            assert jobs.retry(failed.id, payload={"n": 3}).snapshot.payload == {"n": 3}
            await drain(jobs, timeout=20)

    run(main())


def test_without_a_handler_for_the_type_a_payload_only_has_to_be_json(db: str) -> None:
    writer = failing_manager(db)
    cancelled = writer.enqueue(UNHANDLED, Item(n=1))
    run(writer.cancel(cancelled.id))
    run(writer.stop())

    bare = make_manager(db)  # knows no handler: the type of the row is only a name
    again = bare.retry(cancelled.id, payload={"anything": [1, 2]})
    assert again.snapshot.payload == {"anything": [1, 2]}
    assert again.snapshot.type == UNHANDLED.name
    before = table(db)
    assert rejected(lambda: bare.retry(cancelled.id, payload=object())).code == (
        "JOB_PAYLOAD_INVALID"
    )
    assert rejected(lambda: bare.retry(cancelled.id, payload=float("nan"))).code == (
        "JOB_PAYLOAD_INVALID"
    )
    huge = "x" * (bare.max_payload_bytes + 1)
    assert rejected(lambda: bare.retry(cancelled.id, payload=huge)).code == (
        "JOB_PAYLOAD_TOO_LARGE"
    )
    assert table(db) == before
    run(bare.stop())


def test_retry_many_re_runs_matching_terminal_jobs_in_one_call(db: str) -> None:
    jobs = failing_manager(db)

    async def main() -> None:
        async with jobs:
            a = [jobs.enqueue(ITEM, Item(n=-i), queue="a") for i in range(1, 4)]
            b = jobs.enqueue(ITEM, Item(n=-9), queue="b")
            ok = jobs.enqueue(ITEM, Item(n=1), queue="a")
            await drain(jobs, timeout=20)
            cancelled = jobs.enqueue(ITEM, Item(n=-7), queue="a", delay=3600)
            await jobs.cancel(cancelled.id)
            live = jobs.enqueue(ITEM, Item(n=-8), queue="a", delay=3600)

            first = jobs.retry_many(queue="a", limit=2)
            assert [h.snapshot.retry_of for h in first] == [a[0].id, a[1].id]
            rest = jobs.retry_many(queue="a")
            assert [h.snapshot.retry_of for h in rest] == [a[2].id]
            assert jobs.retry_many(queue="a") == []
            others = jobs.retry_many(status=["cancelled", "completed"], type=ITEM)
            assert [h.snapshot.retry_of for h in others] == [ok.id, cancelled.id]
            by_name = jobs.retry_many(type=ITEM.name)
            assert [h.snapshot.retry_of for h in by_name] == [b.id]
            await by_name[0].finished

            finals = [await h.finished for h in [*first, *rest]]
            assert [s.status for s in finals] == ["failed"] * 3
            # The re-runs failed in their turn: they are failed jobs nobody re-ran yet.
            again = jobs.retry_many(queue="a")
            assert [h.snapshot.retry_of for h in again] == [h.id for h in [*first, *rest]]
            assert jobs.get(live.id).status == "delayed"  # type: ignore[union-attr]
            for h in [*others, *again]:
                await h.finished

    run(main())


def test_retry_many_refuses_bad_options_and_writes_nothing(db: str) -> None:
    jobs = failing_manager(db)

    async def main() -> None:
        async with jobs:
            await jobs.enqueue(ITEM, Item(n=-1)).finished
            before = table(db)
            bad_options: list[dict[str, Any]] = [
                {"status": "pending"},
                {"status": ["failed", "running"]},
                {"status": []},
                {"status": "nope"},
                {"status": 3},
                {"limit": 0},
                {"limit": 1001},
                {"limit": True},
                {"limit": 1.5},
                {"queue": 7},
                {"type": b"x"},
            ]
            for options in bad_options:
                err = rejected(partial(jobs.retry_many, **options))
                assert err.code == "JOB_INVALID_OPTION", options
            assert table(db) == before

    run(main())


def test_retried_jobs_publish_events_like_an_enqueue(db: str) -> None:
    jobs = failing_manager(db)
    seen: list[tuple[str, str | None]] = []

    async def main() -> None:
        async with jobs:
            h = jobs.enqueue(ITEM, Item(n=-1))
            await h.finished
            jobs.subscribe(
                lambda e: seen.append((e.job_id, e.snapshot.retry_of if e.snapshot else None))
            )
            again = jobs.retry(h.id)
            await again.finished
            many = jobs.retry_many()
            await drain(jobs, timeout=20)
            assert (again.id, h.id) in seen
            assert (many[0].id, again.id) in seen

    run(main())


def test_the_how_to_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/howto/operate.md, "Re-running failed jobs": its Python block, as written."""
    text = (Path(__file__).parents[2] / "docs" / "howto" / "operate.md").read_text()
    section = text.split("## Re-running failed jobs", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "operate.md", "exec"), {"__name__": "howto"})
    assert (tmp_path / "app.db").exists()
