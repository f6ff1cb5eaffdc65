"""Tests written the way a user of jobledger would write them: only the public API and
`jobledger.testing` (a FakeClock, `drain`, `assert_enqueued`), plain `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pydantic
import pytest

import jobledger as jl
from jobledger.testing import FakeClock, assert_enqueued, drain


class Email(pydantic.BaseModel):
    to: str
    subject: str


SEND = jl.JobType("email.send", Email)


def make_jobs(path: Path, clock: FakeClock) -> tuple[jl.JobManager, list[int]]:
    """The app's manager, as a user would build it for tests: a FakeClock, no quiet window."""
    jobs = jl.JobManager(path, clock=clock, startup_delay=0)
    attempts: list[int] = []

    @jobs.handler(
        SEND,
        recovery="retry",
        retry=jl.RetryPolicy(max_attempts=5, backoff="exponential", base_delay=30.0),
    )
    async def send(ctx: jl.JobContext[Email]) -> dict[str, str]:
        attempts.append(ctx.attempt)
        if ctx.attempt < 2:
            raise ConnectionError("smtp is down")
        return {"delivered_to": ctx.payload.to}

    return jobs, attempts


def test_flaky_handler_completes_after_two_backoffs_on_a_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    jobs, attempts = make_jobs(tmp_path / "jobs.db", clock)
    began = clock.now()

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            jobs.enqueue(SEND, Email(to="a@example.com", subject="hi"))
            return await drain(jobs)

    started = time.monotonic()
    done = asyncio.run(main())
    elapsed = time.monotonic() - started

    assert [s.status for s in done] == ["completed"]
    assert done[0].attempt == 2
    assert done[0].output == {"delivered_to": "a@example.com"}
    assert attempts == [0, 1, 2]
    # Exponential backoff from 30 s: 30 s, then 60 s (jitter-free or not, at least 90 s).
    assert (clock.now() - began).total_seconds() >= 90
    assert elapsed < 1.0, f"drain took {elapsed:.2f}s of real time"


def test_assert_enqueued_matches_type_payload_and_count(tmp_path: Path) -> None:
    clock = FakeClock()
    jobs, _ = make_jobs(tmp_path / "jobs.db", clock)
    jobs.enqueue(SEND, Email(to="a@example.com", subject="one"))
    jobs.enqueue(SEND, Email(to="a@example.com", subject="one"))
    jobs.enqueue(SEND, Email(to="b@example.com", subject="two"), delay=60)

    assert len(assert_enqueued(jobs, SEND, count=3)) == 3
    assert len(assert_enqueued(jobs, "email.send", Email(to="a@example.com", subject="one"))) == 2
    assert_enqueued(jobs, SEND, {"to": "b@example.com", "subject": "two"}, count=1)
    assert_enqueued(jobs, SEND, status="delayed", count=1)

    with pytest.raises(AssertionError, match=r"expected at least one 'email\.send' job"):
        assert_enqueued(jobs, SEND, Email(to="nobody@example.com", subject="x"))
    with pytest.raises(AssertionError, match="exactly 1"):
        assert_enqueued(jobs, SEND, count=1)
    jobs.enqueue(jl.JobType("other.kind", dict), {"k": 1})
    with pytest.raises(AssertionError, match="other types stored"):
        assert_enqueued(jobs, "never.enqueued")
    asyncio.run(jobs.stop())
