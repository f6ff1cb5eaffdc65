"""`ctx.logger` and the lines kept with each attempt (DESIGN §8.2, `_runtime/joblog.py`).

The bounds are checked on `LogBuffer` itself; the rest runs real handlers, async and
plain (on the pool, with threads of their own), on a SQLite file. A handler hands its
`Attempt` out so that the test reads what the engine will store with the outcome.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import jobledger as jl
from jobledger._runtime.attempt import Attempt
from jobledger._runtime.joblog import MAX_LOG_BYTES, MAX_LOG_LINES, TRUNCATED, LogBuffer
from jobledger.testing import FakeClock, drain
from tests.conftest import run
from tests.engine import ITEM, Item, make_manager

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def job_logger_level() -> Iterator[logging.Logger]:
    """Logger `jobledger.job`, its level put back after the test."""
    logger = logging.getLogger("jobledger.job")
    level = logger.level
    yield logger
    logger.setLevel(level)


def _messages(lines: list[jl.LogLine]) -> list[str]:
    return [line.message for line in lines]


# -- the bounds ------------------------------------------------------------------------


def test_a_buffer_keeps_the_last_200_lines() -> None:
    clock = FakeClock(START)
    buffer = LogBuffer(clock)
    for i in range(MAX_LOG_LINES + 50):
        buffer.add(logging.INFO, f"line {i}")
        clock.advance(1.0)
    lines = buffer.lines()
    assert MAX_LOG_LINES == 200
    assert _messages(lines) == [f"line {i}" for i in range(50, 250)]
    assert buffer.dropped == 50
    assert lines[0] == jl.LogLine(
        at=datetime(2026, 3, 1, 12, 0, 50, tzinfo=UTC), level="INFO", message="line 50"
    )


def test_a_buffer_keeps_the_last_64_kib_and_cuts_a_longer_message() -> None:
    buffer = LogBuffer(FakeClock(START))
    for i in range(100):
        buffer.add(logging.WARNING, f"{i:04d}" + "x" * 996)  # 1000 bytes each
    assert MAX_LOG_BYTES == 64 * 1024
    kept = _messages(buffer.lines())
    assert len(kept) == MAX_LOG_BYTES // 1000  # 65 lines: the byte bound came first
    assert (kept[0][:4], kept[-1][:4]) == ("0035", "0099")
    assert buffer.dropped == 35

    buffer.add(logging.ERROR, "é" * MAX_LOG_BYTES)  # twice the bound in UTF-8
    (only,) = buffer.lines()
    assert only.level == "ERROR"
    assert only.message.endswith(TRUNCATED)
    assert len(only.message.encode()) <= MAX_LOG_BYTES
    assert set(only.message.removesuffix(TRUNCATED)) == {"é"}  # cut between characters


def test_kept_messages_are_text_both_databases_store() -> None:
    buffer = LogBuffer(FakeClock(START))
    buffer.add(logging.INFO, "nul \x00 and a lone surrogate \udc80")
    (line,) = buffer.lines()
    assert line.message == "nul \\x00 and a lone surrogate \\udc80"
    line.message.encode("utf-8")  # strict: no surrogate left


# -- ctx.logger in real handlers --------------------------------------------------------


def test_ctx_logger_records_carry_the_job_fields_and_every_line_is_kept(
    db_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(START)
    jobs = make_manager(db_path, clock=clock)
    attempts: list[Attempt] = []

    @jobs.handler(ITEM, recovery="retry", queue="reports")
    async def work(ctx: jl.JobContext[Item]) -> None:
        attempts.append(ctx._attempt)
        ctx.logger.info("fetching %d rows", ctx.payload.n, extra={"source": "crm"})
        clock.advance(2.0)
        ctx.logger.warning("slow: %(seconds)s s", {"seconds": 2})
        try:
            raise ValueError("bad row 7")
        except ValueError:
            ctx.logger.exception("row skipped")

    async def main() -> str:
        async with jobs:
            handle = jobs.enqueue(ITEM, Item(n=40))
            await drain(jobs)
            return handle.id

    caplog.set_level(logging.INFO, logger="jobledger.job")
    job_id = run(main())
    records = [r for r in caplog.records if r.name == "jobledger.job"]
    assert [r.getMessage() for r in records] == ["fetching 40 rows", "slow: 2 s", "row skipped"]
    for record in records:
        fields = {k: getattr(record, k) for k in ("job_id", "type", "queue", "attempt")}
        assert fields == {"job_id": job_id, "type": "test.item", "queue": "reports", "attempt": 0}
        assert record.pathname == __file__  # the handler's line, not the adapter's
        assert record.funcName == "work"
    assert getattr(records[0], "source", None) == "crm"  # the call's own extra is kept too
    assert records[2].exc_info is not None

    (attempt,) = attempts
    lines = attempt.log_lines()
    assert [(line.at, line.level) for line in lines] == [
        (START, "INFO"),
        (datetime(2026, 3, 1, 12, 0, 2, tzinfo=UTC), "WARNING"),
        (datetime(2026, 3, 1, 12, 0, 2, tzinfo=UTC), "ERROR"),
    ]
    assert _messages(lines)[:2] == ["fetching 40 rows", "slow: 2 s"]
    traceback = _messages(lines)[2]
    assert traceback.startswith("row skipped\nTraceback (most recent call last):")
    assert traceback.endswith("ValueError: bad row 7")
    assert attempt.log_lines_dropped() == 0


def test_a_plain_handler_and_the_threads_it_starts_log_into_one_buffer(db_path: str) -> None:
    jobs = make_manager(db_path)
    attempts: list[Attempt] = []

    @jobs.handler(ITEM, recovery="retry")
    def work(ctx: jl.JobContext[Item]) -> None:
        attempts.append(ctx._attempt)
        ctx.logger.info("begin")

        def part(n: int) -> None:
            for i in range(30):
                ctx.logger.info("part %d line %d", n, i)

        threads = [threading.Thread(target=part, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ctx.logger.info("end")

    async def main() -> None:
        async with jobs:
            jobs.enqueue(ITEM, Item())
            (snap,) = await drain(jobs)
            assert snap.status == "completed"

    run(main())
    (attempt,) = attempts
    kept = _messages(attempt.log_lines())
    assert (kept[0], kept[-1], len(kept)) == ("begin", "end", 122)
    assert sorted(kept[1:-1]) == sorted(f"part {n} line {i}" for n in range(4) for i in range(30))
    for n in range(4):  # each thread's lines in its own order
        mine = [m for m in kept if m.startswith(f"part {n} ")]
        assert mine == [f"part {n} line {i}" for i in range(30)]


def test_lines_at_info_and_above_are_kept_whatever_the_logging_configuration(
    db_path: str, job_logger_level: logging.Logger
) -> None:
    jobs = make_manager(db_path)
    attempts: list[Attempt] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        attempts.append(ctx._attempt)
        ctx.logger.debug("debug %d", ctx.payload.n)
        ctx.logger.info("info %d", ctx.payload.n)
        ctx.logger.error("error %d", ctx.payload.n)

    async def main() -> None:
        async with jobs:
            job_logger_level.setLevel(logging.CRITICAL)  # nothing is emitted
            jobs.enqueue(ITEM, Item(n=1))
            await drain(jobs)
            job_logger_level.setLevel(logging.DEBUG)  # DEBUG is kept once it is enabled
            jobs.enqueue(ITEM, Item(n=2))
            await drain(jobs)

    run(main())
    first, second = attempts
    assert _messages(first.log_lines()) == ["info 1", "error 1"]
    assert _messages(second.log_lines()) == ["debug 2", "info 2", "error 2"]
    assert [line.level for line in second.log_lines()] == ["DEBUG", "INFO", "ERROR"]


def test_a_handler_that_never_logs_makes_neither_logger_nor_buffer(db_path: str) -> None:
    jobs = make_manager(db_path)
    seen: list[tuple[jl.JobContext[Any], Attempt]] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> int:
        seen.append((ctx, ctx._attempt))
        return ctx.payload.n

    async def main() -> None:
        async with jobs:
            jobs.enqueue(ITEM, Item(n=3))
            await drain(jobs)

    run(main())
    ((ctx, attempt),) = seen
    assert ctx._logger is None
    assert attempt._logs is None
    assert attempt.log_lines() == []
