"""The app the console's browser tests run in a `jobledger worker` process of its own:
`jobledger --db DB worker tests.browser.consoleapp:jobs` (cwd the repository root).

A charge fails while its order is listed in `$CONSOLE_DIR/declined.txt`, so a test can
"fix the cause" between a failure and its retry the way a person would, without talking
to the worker. Every field a charge writes (output, error message, traceback, log lines)
carries the payload's `note`, which the markup tests fill with hostile HTML.
"""

from __future__ import annotations

import os
from pathlib import Path

import pydantic

import jobledger as jl


class Order(pydantic.BaseModel):
    order: str
    shop: str = "eu"  # the queue: payments.{shop}
    note: str = ""


class CardDeclined(RuntimeError):
    pass


CHARGE = jl.JobType("shop.charge", Order)


def declined() -> set[str]:
    path = Path(os.environ.get("CONSOLE_DIR", ".")) / "declined.txt"
    try:
        return set(path.read_text(encoding="utf-8").split())
    except FileNotFoundError:
        return set()


def register(jobs: jl.JobManager) -> jl.JobManager:
    @jobs.handler(
        CHARGE,
        recovery="retry",
        retry=jl.RetryPolicy(max_attempts=2, backoff="fixed", base_delay=0.01),
        queue=lambda p: f"payments.{p.shop}",
    )
    def charge(ctx: jl.JobContext[Order]) -> dict[str, str]:
        ctx.logger.info("charging order %s: %s", ctx.payload.order, ctx.payload.note)
        if ctx.payload.order in declined():
            raise CardDeclined(f"card declined for order {ctx.payload.order}: {ctx.payload.note}")
        return {
            "order": ctx.payload.order,
            "receipt": f"R-{ctx.payload.order}",
            "note": ctx.payload.note,
        }

    return jobs


# The CLI exports JOBLEDGER_DB before it imports this module; a test that only imports
# the job types (to enqueue) has none, and gets no manager.
if "JOBLEDGER_DB" in os.environ:
    jobs = register(jl.JobManager(os.environ["JOBLEDGER_DB"], startup_delay=0, poll_interval=0.05))
