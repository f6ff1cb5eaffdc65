"""The asyncio tasks a started manager runs are named for what they run, so a dump of a
loop's tasks (`asyncio.all_tasks()`, a debugger, `python -X dev`'s warnings) tells a
job's handler from the manager's own loops: "jobledger job <id>" for a handler,
"jobledger on_settled <id>" for a job type's `on_settled`, "jobledger <service>" for the
watcher, the promoter and the other background loops (src/jobledger/_runtime/engine.py,
`TASK_PREFIX`)."""

from __future__ import annotations

import asyncio

import jobledger as jl
from tests.conftest import run, wait_until
from tests.engine import ITEM, Item, make_manager


def _name() -> str:
    task = asyncio.current_task()
    assert task is not None
    return task.get_name()


def test_a_handler_and_its_on_settled_run_in_tasks_named_by_the_job(db: str) -> None:
    jobs = make_manager(db)
    handler_tasks: dict[str, str] = {}
    settled_tasks: dict[str, str] = {}

    class Named(jl.JobHandler[Item, None]):
        recovery = "retry"

        async def execute(self, ctx: jl.JobContext[Item]) -> None:
            handler_tasks[ctx.job_id] = _name()

        def on_settled(self, event: jl.SettledEvent) -> None:
            settled_tasks[event.job_id] = _name()

    jobs.register_handler(ITEM, Named())

    async def main() -> tuple[list[str], set[str]]:
        async with jobs:
            handles = [jobs.enqueue(ITEM, Item(n=n)) for n in range(3)]
            await asyncio.gather(*(h.finished for h in handles))
            await wait_until(lambda: len(settled_tasks) == 3, what="three on_settled calls")
            return [h.id for h in handles], {t.get_name() for t in asyncio.all_tasks()}

    ids, running = run(main())
    assert handler_tasks == {i: f"jobledger job {i}" for i in ids}
    assert settled_tasks == {i: f"jobledger on_settled {i}" for i in ids}
    # While started, the manager's own loops are there by name too.
    assert {"jobledger watcher", "jobledger promoter"} <= running
