"""A database with workflows run to their end, for the HTTP, dashboard and browser tests:
a diamond whose `left` step fails (so `join` is cancelled), and a fan-out of 12 jobs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pydantic

import jobledger as jl
from jobledger.testing import drain

WAIT = 20.0


class Part(pydantic.BaseModel):
    n: int = 0
    note: str = ""


OK = jl.JobType("wf.ok", Part)
BAD = jl.JobType("wf.bad", Part)


@dataclass
class Workflows:
    path: str
    diamond: str  # its id
    fan: str
    steps: dict[str, list[str]]  # the diamond's step -> job ids


def build(path: str, *, diamond_name: str = "diamond") -> Workflows:
    """`top -> left (fails), top -> right x3, left + right -> join (cancelled)`, then the
    workflow `fan` (`split x12 -> merge`), all finished."""
    jobs = jl.JobManager(path, startup_delay=0)

    @jobs.handler(OK, recovery="retry")
    async def ok(ctx: jl.JobContext[Part]) -> int:
        return ctx.payload.n

    @jobs.handler(BAD, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def bad(ctx: jl.JobContext[Part]) -> None:
        raise jl.PermanentError("left fell over")

    async def main() -> Workflows:
        async with jobs:
            wf = jobs.workflow(diamond_name)
            top = wf.add(OK, Part(n=1), name="top")
            wf.add(BAD, Part(), name="left", after=[top])
            wf.add_many(OK, [Part(n=i) for i in range(3)], name="right", after=[top])
            wf.add(OK, Part(), name="join", after=["left", "right"])
            diamond = wf.enqueue()
            await diamond.finished
            fan = jobs.workflow("fan")
            split = fan.add_many(OK, [Part(n=i) for i in range(12)], name="split")
            fan.add(OK, Part(), name="merge", after=[split], on_upstream_failure="run")
            fanned = fan.enqueue()
            await fanned.finished
            await drain(jobs, timeout=WAIT)
            steps = {name: [h.id for h in hs] for name, hs in diamond.jobs.items()}
            return Workflows(path, diamond.id, fanned.id, steps)

    return asyncio.run(main())
