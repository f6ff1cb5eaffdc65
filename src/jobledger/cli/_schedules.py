"""`jobledger schedules ...`: look at persistent schedules; run, pause or resume one.

Listing reads the table. Changes go through the JobManager of the app (`--app
MODULE:ATTR`), because a schedule belongs to the handler registered for its type there
(`run-now` builds the job with it; `pause`/`resume` check the schedule against it). The
leader process re-arms its timers from the row.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click
from rich.table import Table

from jobledger._runtime.manager import JobManager
from jobledger.cli._common import EXIT_BAD_INPUT, Settings, fail, load_manager, out, reader
from jobledger.cli._text import cell, dumps, when

__all__ = ["schedules"]


@click.group()
def schedules() -> None:
    """List and inspect persistent schedules; run, pause or resume one."""


@schedules.command("list")
@click.option("--type", "type_", default=None, help="Only this job type.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def list_schedules(settings: Settings, type_: str | None, as_json: bool) -> None:
    """Every schedule with its trigger, next and last run."""
    with reader(settings) as rm:
        items = [s for s in rm.schedules() if type_ is None or s["type"] == type_]
    if as_json:
        click.echo(dumps(items, indent=2))
        return
    console = out()
    if not items:
        console.print("no schedules")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("ID", "TYPE", "NAME", "TRIGGER", "STATE", "NEXT RUN", "LAST RUN", "FIRES"):
        table.add_column(name, no_wrap=True)
    for s in items:
        table.add_row(
            cell(s["id"]),
            cell(s["type"]),
            cell(s["name"] or "-"),
            cell(s["trigger_text"]),
            cell("enabled", "green") if s["enabled"] else cell("paused", "yellow"),
            cell(when(s["next_run"])),
            cell(when(s["last_run"])),
            cell(s["fire_count"]),
        )
    console.print(table)


def _get(settings: Settings, schedule_id: str) -> dict[str, Any]:
    with reader(settings) as rm:
        item = rm.schedule(schedule_id)
    if item is None:
        fail(f"JOB_SCHEDULE_NOT_FOUND: no schedule with id {schedule_id!r}")
    return item


@schedules.command("show")
@click.argument("schedule_id")
@click.pass_obj
def show(settings: Settings, schedule_id: str) -> None:
    """One schedule as JSON."""
    click.echo(dumps(_get(settings, schedule_id), indent=2))


def _manager(settings: Settings, app: str | None, item: dict[str, Any], what: str) -> JobManager:
    if app is None:
        fail(
            f"{what} needs --app MODULE:ATTR: the JobManager where the handler of "
            f"{item['type']!r} is registered",
            EXIT_BAD_INPUT,
        )
    return load_manager(app, settings)


_APP = click.option(
    "--app",
    default=None,
    metavar="MODULE:ATTR",
    help="The JobManager where the handler of the schedule's type is registered (required).",
)


@schedules.command("run-now")
@click.argument("schedule_id")
@_APP
@click.pass_obj
def run_now(settings: Settings, schedule_id: str, app: str | None) -> None:
    """Enqueue one extra run now (the calendar is unchanged); prints nothing else."""
    manager = _manager(settings, app, _get(settings, schedule_id), "run-now")

    async def go() -> bool:
        try:
            return await manager.trigger_job_schedule_now_by_id(schedule_id)
        finally:
            await manager.stop()

    written = asyncio.run(go())
    click.echo(f"{schedule_id} {'enqueued' if written else 'not enqueued'}")
    if not written:
        fail("no job was written")


def _flip(settings: Settings, schedule_id: str, app: str | None, enabled: bool) -> None:
    manager = _manager(settings, app, _get(settings, schedule_id), "resume" if enabled else "pause")
    try:
        if enabled:
            changed = manager.resume_job_schedule_by_id(schedule_id)
        else:
            changed = manager.pause_job_schedule_by_id(schedule_id)
    finally:
        asyncio.run(manager.stop())
    if not changed:
        fail(f"JOB_SCHEDULE_NOT_FOUND: no schedule with id {schedule_id!r}")
    click.echo(f"{schedule_id} {'resumed' if enabled else 'paused'}")


@schedules.command("pause")
@click.argument("schedule_id")
@_APP
@click.pass_obj
def pause(settings: Settings, schedule_id: str, app: str | None) -> None:
    """Stop a schedule firing (clears next_run)."""
    _flip(settings, schedule_id, app, enabled=False)


@schedules.command("resume")
@click.argument("schedule_id")
@_APP
@click.pass_obj
def resume(settings: Settings, schedule_id: str, app: str | None) -> None:
    """Let a paused schedule fire again."""
    _flip(settings, schedule_id, app, enabled=True)
