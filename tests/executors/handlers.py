"""Module-level handlers for the process executor's tests: a spawned child imports them
by name (`tests.executors.handlers.<name>`), so none may be nested or a lambda.

Each writes what the test must learn from inside the child (its pid) to a file named in
the payload, since the child shares nothing else with the test."""

from __future__ import annotations

import os
import time
from typing import Any

import pydantic

import jobledger as jl


class Task(pydantic.BaseModel):
    ms: float = 0.0  # CPU time to burn (process time, so load elsewhere does not shrink it)
    pidfile: str = ""  # where the child writes its pid on start
    fail_first: bool = False  # only the first attempt misbehaves


class Report(pydantic.BaseModel):
    pid: int
    start: float
    end: float
    attempt: int


SPIN = jl.JobType("exec.spin", Task, result=Report)
RUNAWAY = jl.JobType("exec.runaway", Task)
VICTIM = jl.JobType("exec.victim", Task)
COOPERATIVE = jl.JobType("exec.cooperative", Task)
STUBBORN = jl.JobType("exec.stubborn", Task)
BROKEN = jl.JobType("exec.broken", dict)


def _started(task: Task) -> None:
    if task.pidfile:
        tmp = f"{task.pidfile}.tmp"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, task.pidfile)  # the reader never sees half a pid


def burn_cpu(ms: float) -> None:
    """Use `ms` milliseconds of this process's CPU time."""
    end = time.process_time() + ms / 1000
    while time.process_time() < end:
        pass


def burn_and_report(n: int, ms: float, results: Any, go: Any) -> None:
    """`n` bursts of `ms` ms of CPU in a bare process, once `go` is set; puts (start,
    end) on `results`."""
    go.wait(60)
    start = time.time()
    for _ in range(n):
        burn_cpu(ms)
    results.put((start, time.time()))


def spin(ctx: jl.JobContext[Task]) -> Report:
    start = time.time()
    _started(ctx.payload)
    burn_cpu(ctx.payload.ms)
    return Report(pid=os.getpid(), start=start, end=time.time(), attempt=ctx.attempt)


def runaway(ctx: jl.JobContext[Task]) -> str:
    """Computes forever on its first attempt, ignoring its token."""
    _started(ctx.payload)
    if ctx.payload.fail_first and ctx.attempt > 0:
        return "second attempt"
    while True:
        burn_cpu(10)


def victim(ctx: jl.JobContext[Task]) -> str:
    """Waits to be killed on its first attempt; returns on the next."""
    if ctx.attempt == 0:
        _started(ctx.payload)
        while True:
            time.sleep(0.01)
    return "survived"


def cooperative(ctx: jl.JobContext[Task]) -> str:
    """Reports progress, then waits for its token and stops as asked."""
    ctx.report_progress(30, "started")
    ctx.logger.info("child %d waiting", os.getpid())
    _started(ctx.payload)
    while not ctx.cancelled.wait_sync(0.01):
        pass
    ctx.raise_if_cancelled()
    return "not reached"


def stubborn(ctx: jl.JobContext[Task]) -> str:
    """Ignores its token."""
    _started(ctx.payload)
    while True:
        time.sleep(0.01)


def broken(ctx: jl.JobContext[dict[str, Any]]) -> Any:
    """Misbehaves as its payload says."""
    how = ctx.payload["how"]
    if how == "exit":
        os._exit(3)
    if how == "permanent":
        raise jl.PermanentError("declined", code="CARD_DECLINED", params={"tries": 2})
    if how == "raise":
        raise KeyError("missing")
    if how == "not-json":
        return {1, 2}  # a set is not JSON... but pydantic makes it a list
    if how == "object":
        return object()
    if how == "metadata":
        ctx.patch_metadata({"a": 1})
    if how == "transaction":
        with ctx.transaction():
            pass
    return how
