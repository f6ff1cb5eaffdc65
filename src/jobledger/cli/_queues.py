"""`jobledger queues`: list queues with their counts and settings; pause, resume and limit
one (DESIGN.md §8.7). The changes are rows in `queue_settings`, honoured by every worker
from its next claim; no `--app` is needed, as none runs a handler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import click
from rich.table import Table

from jobledger._observe.read_model import STATUSES
from jobledger._runtime.manager import JobManager
from jobledger._types import QueueLimits
from jobledger.cli._common import Settings, fail, out, reader, record_audit
from jobledger.cli._jobs import status_style
from jobledger.cli._text import cell, dumps, when
from jobledger.errors import JobError

__all__ = ["queues"]


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def queues(ctx: click.Context, as_json: bool) -> None:
    """Queues with job counts by state and what is set for them.

    \b
    jobledger queues                      list (--json for JSON)
    jobledger queues pause Q              stop claims on Q in every worker
    jobledger queues resume Q
    jobledger queues limit Q --concurrency 5 --rate 10/s
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
    with reader(settings) as rm:
        stats = rm.queue_stats()
    if as_json:
        click.echo(dumps([s.to_json() for s in stats], indent=2))
        return
    console = out()
    if not stats:
        console.print("no queues yet")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("QUEUE", no_wrap=True)
    table.add_column("TYPE", no_wrap=True)
    for s in STATUSES:
        table.add_column(s.upper(), justify="right")
    table.add_column("OLDEST PENDING", no_wrap=True)
    table.add_column("LIMITS", no_wrap=True)
    for qs in stats:
        cells = [cell(qs.counts[s], status_style(s) if qs.counts[s] else "dim") for s in STATUSES]
        limits = []
        if qs.paused:
            limits.append("paused")
        if qs.concurrency is not None:
            limits.append(f"concurrency {qs.concurrency}")
        if qs.rate_limit is not None:
            limits.append(f"rate {qs.rate_limit}")
        table.add_row(
            cell(qs.name),
            cell(qs.type or "-"),
            *cells,
            cell(when(qs.oldest_pending_at)),
            cell(", ".join(limits) or "-"),
        )
    console.print(table)


def _change(
    settings: Settings,
    act: Callable[[JobManager], QueueLimits],
    action: str,
    queue: str,
    detail: dict[str, Any] | None = None,
) -> QueueLimits:
    manager = JobManager(settings.db)
    try:
        limits = act(manager)
        record_audit(settings, action, queue, detail, manager)
        return limits
    except JobError as exc:
        fail(f"{exc.code}: {exc.message}")
    finally:
        asyncio.run(manager.stop())


def _print(limits: QueueLimits, as_json: bool) -> None:
    if as_json:
        click.echo(dumps(limits.to_json(), indent=2))
        return
    parts = ["paused" if limits.paused else "running"]
    parts.append(
        f"concurrency {limits.concurrency}" if limits.concurrency is not None else "concurrency -"
    )
    parts.append(f"rate {limits.rate_limit}" if limits.rate_limit is not None else "rate -")
    click.echo(f"{limits.queue}: {', '.join(parts)}")


@queues.command("pause")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def pause(settings: Settings, queue: str, as_json: bool) -> None:
    """Stop claims on QUEUE in every worker (enqueues still land; running jobs finish)."""
    _print(_change(settings, lambda m: m.pause_queue(queue), "queue.pause", queue), as_json)


@queues.command("resume")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def resume(settings: Settings, queue: str, as_json: bool) -> None:
    """Let workers claim from QUEUE again."""
    _print(_change(settings, lambda m: m.resume_queue(queue), "queue.resume", queue), as_json)


@queues.command("limit")
@click.argument("queue")
@click.option("--concurrency", type=int, default=None, help="Cap on running jobs (>= 1).")
@click.option("--rate", default=None, help="At most this many starts per period: 10/s, 100/m.")
@click.option("--clear", is_flag=True, help="Clear both (the handler's apply again).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def limit(
    settings: Settings,
    queue: str,
    concurrency: int | None,
    rate: str | None,
    clear: bool,
    as_json: bool,
) -> None:
    """Set QUEUE's cap and rate limit for every worker; an option left out is cleared."""
    if clear and (concurrency is not None or rate is not None):
        fail("JOB_INVALID_OPTION: --clear takes no --concurrency or --rate")
    if not clear and concurrency is None and rate is None:
        fail("JOB_INVALID_OPTION: give --concurrency, --rate, or --clear")
    _print(
        _change(
            settings,
            lambda m: m.set_queue_limits(queue, concurrency=concurrency, rate_limit=rate),
            "queue.limits",
            queue,
            {"concurrency": concurrency, "rate_limit": rate},
        ),
        as_json,
    )
