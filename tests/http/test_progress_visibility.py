"""Observers (dashboard, `jobs wait`, the event stream) read progress from the row: the last
value a handler reports must reach it within the throttle interval, even when the handler
reports nothing more for a long time (the trailing edge of the throttle)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import jobledger as jl
from jobledger._observe.read_model import ReadModel
from tests.http.conftest import WAIT, WORK, Item


def _progress(rm: ReadModel, job_id: str) -> tuple[float | None, str | None]:
    snap = rm.get_job(job_id)
    assert snap is not None
    return snap.progress, snap.progress_detail


@pytest.mark.parametrize("kind", ["async", "plain"])
def test_the_last_report_reaches_the_row_while_the_handler_keeps_working(
    tmp_path: Path, kind: str
) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db, startup_delay=0)
    reported = threading.Event()
    release = threading.Event()

    if kind == "async":

        @jobs.handler(WORK, recovery="retry")
        async def work(ctx: jl.JobContext[Item]) -> None:
            await ctx.report_progress(10, "started")
            await ctx.report_progress(20, "downloaded")  # within the throttle interval
            reported.set()
            while not release.is_set():  # long work, no further reports
                await asyncio.sleep(0.01)

    else:

        @jobs.handler(WORK, recovery="retry")
        def work_sync(ctx: jl.JobContext[Item]) -> None:
            ctx.report_progress(10, "started")
            ctx.report_progress(20, "downloaded")
            reported.set()
            release.wait(WAIT)

    async def main() -> tuple[float | None, str | None]:
        async with jobs:
            handle = jobs.enqueue(WORK, Item(n=1))
            rm = ReadModel(db)
            try:
                while not reported.is_set():
                    await asyncio.sleep(0.005)
                deadline = time.monotonic() + 5
                seen = _progress(rm, handle.id)
                while seen != (20, "downloaded") and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                    seen = _progress(rm, handle.id)
                return seen
            finally:
                release.set()
                await handle.finished
                rm.close()

    assert asyncio.run(main()) == (20, "downloaded")
