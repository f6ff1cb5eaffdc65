"""An app module that declares its schedule at import, as DESIGN §8.4 intends:
`ensure_job_schedule` at module level, so every process that imports it (each worker, a
web app, the CLI with `--app`) declares the same schedule. `JOBLEDGER_DB` names the
database. Imported by `ensure_proc.py`."""

from __future__ import annotations

import os

import jobledger as jl
from tests.schedules import TICK, Tick

jobs = jl.JobManager(os.environ["JOBLEDGER_DB"], startup_delay=0)


@jobs.handler(TICK, recovery="retry")
async def tick(ctx: jl.JobContext[Tick]) -> None:
    return None


SID = jobs.ensure_job_schedule(
    TICK, Tick(n=1), trigger=jl.Cron("*/5 * * * *"), name="every-five", metadata={"v": 1}
)
