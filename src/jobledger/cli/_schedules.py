"""`jobledger schedules ...`: look at persistent schedules; run, pause, resume or
backfill one.

Listing reads the table through the read model. Changes need no app: the row is enough.
They go through the store's schedule operations (`JobSchedules.for_rows`, the schedules
of a host that runs nothing): `pause`/`resume` set `enabled` (and clear `next_run`) as
`jobs.pause_job_schedule_by_id` does, `run-now` is the manager's manual fire
(`manual_fire`: the job and `last_run` in one transaction), and `backfill` is
`jobs.backfill_job_schedule`, its jobs built from the row as `run-now`'s are.
The leader process follows the committed row and re-arms its timers.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table

from jobledger._scheduling.job_schedules import JobSchedules
from jobledger._scheduling.triggers import Cron, Interval
from jobledger._storage.open import open_store
from jobledger.cli._common import (
    EXIT_BAD_INPUT,
    Settings,
    error_line,
    fail,
    out,
    reader,
    record_audit,
)
from jobledger.cli._params import Seconds
from jobledger.cli._text import cell, dumps, when
from jobledger.clock import SystemClock
from jobledger.errors import JobError

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
    columns = ("ID", "TYPE", "NAME", "TRIGGER", "STATE", "OVERLAP", "NEXT RUN", "LAST RUN", "FIRES")
    for name in columns:
        table.add_column(name, no_wrap=True)
    for s in items:
        table.add_row(
            cell(s["id"]),
            cell(s["type"]),
            cell(s["name"] or "-"),
            cell(s["trigger_text"]),
            cell("enabled", "green") if s["enabled"] else cell("paused", "yellow"),
            cell(_overlap_text(s)),
            cell(when(s["next_run"])),
            cell(when(s["last_run"])),
            # Fires an overlap policy skipped are fires too (they count toward a limit).
            cell(f"{s['fire_count']} ({s['skipped_fires']} skipped)")
            if s["skipped_fires"]
            else cell(s["fire_count"]),
        )
    console.print(table)


def _overlap_text(item: dict[str, Any]) -> str:
    text = str(item["overlap"])
    return f"{text}, jitter {item['jitter']:g}s" if item["jitter"] else text


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


@contextmanager
def _schedules_of(settings: Settings) -> Iterator[JobSchedules]:
    """The schedule rows of `--db` behind a writer's store (`_get` made sure it exists)."""
    store = open_store(settings.db, busy_timeout=5.0)
    try:
        yield JobSchedules.for_rows(
            store, SystemClock(), worker_id=f"{socket.gethostname()}:{os.getpid()}:cli"
        )
    finally:
        store.close()


def _ignored_app(app: str | None, what: str) -> None:
    if app is not None:
        error_line(f"{what} no longer needs --app (the row is enough); ignored", prefix="warning")


_APP = click.option(
    "--app",
    default=None,
    metavar="MODULE:ATTR",
    hidden=True,  # accepted so that scripts written when it was required keep working
)


@schedules.command("run-now")
@click.argument("schedule_id")
@_APP
@click.pass_obj
def run_now(settings: Settings, schedule_id: str, app: str | None) -> None:
    """Enqueue one extra run now (the calendar is unchanged) and print its job id.

    The job is the schedule's payload, with the queue, priority, attempts and timeout of
    the schedule's newest job (its handler's choice), or the type's defaults when it has
    none yet.
    """
    _ignored_app(app, "run-now")
    _get(settings, schedule_id)
    with _schedules_of(settings) as rows:
        stored = rows.get_row(schedule_id)
        job_id = None if stored is None else rows.manual_from_row(stored)
    if job_id is None:
        fail(f"JOB_SCHEDULE_NOT_FOUND: no schedule with id {schedule_id!r}")
    record_audit(settings, "schedule.run_now", schedule_id, {"job": job_id})
    click.echo(job_id)


def _flip(settings: Settings, schedule_id: str, app: str | None, enabled: bool) -> None:
    _ignored_app(app, "resume" if enabled else "pause")
    _get(settings, schedule_id)
    with _schedules_of(settings) as rows:
        changed = rows.update(schedule_id, {"enabled": enabled})
    if changed is None:
        fail(f"JOB_SCHEDULE_NOT_FOUND: no schedule with id {schedule_id!r}")
    record_audit(settings, f"schedule.{'resume' if enabled else 'pause'}", schedule_id)
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


def _instant(value: str, what: str) -> datetime:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        fail(f"JOB_INVALID_OPTION: {what} {value!r} is not an ISO 8601 time")
    # A time without an offset is UTC, as every time the CLI prints.
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


@schedules.command("backfill")
@click.argument("schedule_id")
@click.option("--from", "start", required=True, metavar="TIME", help="First instant (ISO 8601).")
@click.option("--to", "end", required=True, metavar="TIME", help="End, excluded (ISO 8601).")
@click.pass_obj
def backfill(settings: Settings, schedule_id: str, start: str, end: str) -> None:
    """Enqueue every fire of the schedule in [--from, --to) not written yet; print how many.

    Times without an offset are UTC. Each job carries its fire's natural key, so a fire
    already written (naturally, by a catch-up or an earlier backfill) is not written
    again; the range must end by now and hold at most 1000 fires.
    """
    begin, until = _instant(start, "--from"), _instant(end, "--to")
    _get(settings, schedule_id)
    with _schedules_of(settings) as rows:
        try:
            written = rows.backfill(schedule_id, begin, until)
        except JobError as exc:
            fail(f"{exc.code}: {exc.message}")
    detail = {"from": begin.isoformat(), "to": until.isoformat(), "written": written}
    record_audit(settings, "schedule.backfill", schedule_id, detail)
    click.echo(f"{written} job(s) written")


@schedules.command("edit")
@click.argument("schedule_id")
@click.option("--cron", default=None, metavar="EXPR", help="A cron expression (5 or 6 fields).")
@click.option("--timezone", default=None, metavar="ZONE", help="With --cron: an IANA zone.")
@click.option("--every", type=Seconds(0.001, 10 * 365 * 86400.0), default=None, metavar="S")
@click.pass_obj
def edit(
    settings: Settings,
    schedule_id: str,
    cron: str | None,
    timezone: str | None,
    every: float | None,
) -> None:
    """Change a schedule's trigger: --cron EXPR [--timezone ZONE], or --every SECONDS.
    Its next run is recomputed from now; every worker follows."""
    if (cron is None) == (every is None):
        fail("give one of --cron or --every", EXIT_BAD_INPUT)
    if timezone is not None and cron is None:
        fail("--timezone goes with --cron", EXIT_BAD_INPUT)
    trigger: Cron | Interval = Cron(cron, timezone=timezone) if cron else Interval(every or 0)
    before = _get(settings, schedule_id)
    with _schedules_of(settings) as rows:
        try:
            changed = rows.update(schedule_id, {"trigger": trigger})
        except JobError as exc:
            fail(f"{exc.code}: {exc.message}")
    if changed is None:
        fail(f"JOB_SCHEDULE_NOT_FOUND: no schedule with id {schedule_id!r}")
    asked = {"cron": cron, "timezone": timezone} if cron else {"every": every}
    record_audit(
        settings, "schedule.trigger", schedule_id, {"from": before.get("trigger"), "to": asked}
    )
    click.echo(f"{schedule_id} trigger changed (the leader re-arms it)")
