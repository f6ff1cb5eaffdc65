"""Typed results: a job type's declared result type round-trips through the stored JSON
(`handle.result()`, `decode_output`), a job that did not complete has no result
(JOB_NOT_COMPLETED), and a type without one keeps the JSON value as before."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pydantic
import pytest

import jobledger as jl
from tests.conftest import db_one, run
from tests.engine import ITEM, Item, fast_retry, make_manager


class Thumb(pydantic.BaseModel):
    # An alias and a serializer: the output is dumped by the type's adapter, not inferred.
    url: str = pydantic.Field(alias="URL")
    width: int

    @pydantic.field_serializer("width")
    def _px(self, width: int) -> str:
        return f"{width}px"

    @pydantic.field_validator("width", mode="before")
    @classmethod
    def _from_px(cls, value: Any) -> Any:
        return int(value.removesuffix("px")) if isinstance(value, str) else value


@dataclasses.dataclass
class Size:
    width: int
    height: int


THUMB = jl.JobType("test.thumb", Item, result=Thumb)
SIZE = jl.JobType("test.size", Item, result=Size)
COUNT = jl.JobType("test.count", Item, result=int)


def typed_manager(db: str) -> jl.JobManager:
    """THUMB, SIZE (a plain `def`) and COUNT; COUNT fails for n < 0, once."""
    jobs = make_manager(db)

    @jobs.handler(THUMB, recovery="retry")
    async def thumb(ctx: jl.JobContext[Item]) -> Thumb:
        return Thumb(URL=f"t/{ctx.payload.n}.webp", width=ctx.payload.n)

    @jobs.handler(SIZE, recovery="retry")
    def size(ctx: jl.JobContext[Item]) -> Size:
        return Size(width=ctx.payload.n, height=2 * ctx.payload.n)

    @jobs.handler(COUNT, recovery="retry", retry=fast_retry(1))
    async def count(ctx: jl.JobContext[Item]) -> int:
        if ctx.payload.n < 0:
            raise RuntimeError(f"bad n {ctx.payload.n}")
        return ctx.payload.n + 1

    return jobs


def test_a_typed_result_round_trips_through_the_stored_json(db: str) -> None:
    jobs = typed_manager(db)

    async def main() -> None:
        async with jobs:
            t, s, c = (
                jobs.enqueue(THUMB, Item(n=64)),
                jobs.enqueue(SIZE, Item(n=3)),
                jobs.enqueue(COUNT, Item(n=41)),
            )
            thumb, size, count = await t.result(), await s.result(), await c.result()
            assert thumb == Thumb(URL="t/64.webp", width=64)
            assert type(thumb) is Thumb
            assert size == Size(3, 6)
            assert type(size) is Size
            assert count == 42
            assert type(count) is int

            # The snapshot's output is the JSON form, written by the type's adapter.
            done = await t.finished
            assert done.output == {"URL": "t/64.webp", "width": "64px"}
            assert (await s.finished).output == {"width": 3, "height": 6}
            assert (await c.finished).output == 42
            # A snapshot read elsewhere decodes the same way.
            snap = jobs.get(t.id)
            assert snap is not None
            assert THUMB.decode_output(snap) == thumb
            # Each `result()` is independent, like `finished`.
            assert await t.result() == thumb

    run(main())
    stored = db_one(db, "SELECT output FROM jobs WHERE type = ?", (THUMB.name,))
    assert '"URL"' in str(stored)


def test_a_failed_or_cancelled_job_has_no_result(db: str) -> None:
    jobs = typed_manager(db)
    pending_only = make_manager(db)  # never started: its job stays pending until cancelled

    async def main() -> None:
        async with jobs:
            h = jobs.enqueue(COUNT, Item(n=-1))
            with pytest.raises(jl.JobError) as info:
                await h.result()
            err = info.value
            assert err.code == "JOB_NOT_COMPLETED"
            assert err.params["job_id"] == h.id
            assert err.params["status"] == "failed"
            assert err.params["error"]["code"] == "JOB_HANDLER_THREW"
            assert err.params["error"]["message"] == "bad n -1"
            assert (
                err.message == f"job {h.id} is failed, not completed: JOB_HANDLER_THREW: bad n -1"
            )
            snap = jobs.get(h.id)
            assert snap is not None
            with pytest.raises(jl.JobError, match="JOB_NOT_COMPLETED"):
                COUNT.decode_output(snap)

        later = pending_only.enqueue(COUNT, Item(n=1), delay=3600)
        waiting = later.snapshot
        with pytest.raises(jl.JobError) as info:
            COUNT.decode_output(waiting)  # not finished yet: no result either
        assert (info.value.code, info.value.params["status"]) == ("JOB_NOT_COMPLETED", "delayed")
        assert await pending_only.cancel(later.id) == "cancelled"
        with pytest.raises(jl.JobError) as info:
            await later.result()
        assert info.value.params["status"] == "cancelled"
        assert info.value.params["error"]["code"] == "JOB_CANCELLED"
        await pending_only.stop()

    run(main())


def test_without_a_result_type_the_result_is_the_json_value(db: str) -> None:
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> Thumb:
        return Thumb(URL="u", width=ctx.payload.n)  # dumped as before (to_jsonable_python)

    async def main() -> None:
        async with jobs:
            h = jobs.enqueue(ITEM, Item(n=5))
            value = await h.result()
            assert value == {"URL": "u", "width": "5px"}
            assert value == (await h.finished).output
            snap = jobs.get(h.id)
            assert snap is not None
            assert ITEM.decode_output(snap) == value

    run(main())


def test_handles_made_from_a_name_or_by_retry_decode_with_the_registered_type(db: str) -> None:
    jobs = typed_manager(db)

    async def main() -> None:
        async with jobs:
            h = jobs.enqueue("test.thumb", {"n": 8})
            assert await h.result() == Thumb(URL="t/8.webp", width=8)
            again = jobs.retry(h.id)
            assert await again.result() == Thumb(URL="t/8.webp", width=8)
            [many] = jobs.enqueue_many(SIZE, [Item(n=1)])
            assert await many.result() == Size(1, 2)
            with jobs.write_tx() as tx:
                in_tx = jobs.enqueue_tx(tx, COUNT, Item(n=0))
            assert await in_tx.result() == 1

    run(main())


def test_a_return_value_that_is_not_the_result_type_fails_the_job(db: str) -> None:
    jobs = make_manager(db)
    calls: list[int] = []

    @jobs.handler(COUNT, recovery="retry", retry=fast_retry(3))
    async def count(ctx: jl.JobContext[Item]) -> Any:
        calls.append(ctx.attempt)
        return "many" if ctx.payload.n == 0 else math.nan

    async def main() -> None:
        async with jobs:
            for n in (0, 1):
                snap = await jobs.enqueue(COUNT, Item(n=n)).finished
                assert snap.status == "failed", snap
                assert snap.error is not None
                assert snap.error.code == "JOB_OUTPUT_INVALID"
                assert not snap.error.retryable
            assert calls == [0, 0]  # not retried

    run(main())


def test_an_output_that_does_not_validate_is_job_result_invalid(db: str) -> None:
    jobs = make_manager(db)
    older = jl.JobType(COUNT.name, Item)  # a worker of a version without the result type

    @jobs.handler(older, recovery="retry")
    async def count(ctx: jl.JobContext[Item]) -> dict[str, int]:
        return {"n": ctx.payload.n}

    async def main() -> None:
        async with jobs:
            done = await jobs.enqueue(COUNT, Item(n=1)).finished
        assert done.output == {"n": 1}
        with pytest.raises(jl.JobError) as info:
            COUNT.decode_output(done)
        assert info.value.code == "JOB_RESULT_INVALID"
        assert info.value.params["job_id"] == done.id
        with pytest.raises(jl.JobValidationError) as bad:
            THUMB.decode_output(done)  # another type's snapshot
        assert bad.value.code == "JOB_INVALID_OPTION"

    run(main())


def test_a_result_type_is_part_of_the_repr_and_optional() -> None:
    assert repr(THUMB) == "JobType('test.thumb', Item, result=Thumb)"
    assert repr(ITEM) == "JobType('test.item', Item)"
    assert (THUMB.result_type, ITEM.result_type) == (Thumb, None)
    assert ITEM.result_adapter is None
    assert THUMB.result_adapter is not None
