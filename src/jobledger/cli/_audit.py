"""`jobledger audit`: the actions people took, newest first (DESIGN.md §8.9).

Read through the read model (the database opened read-only), as `GET /api/audit` and
the dashboard's audit page are, so the three list the same entries. Every field is a
stored string someone typed: each goes through `cell` (no markup, controls made
visible).
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from jobledger.cli._common import Settings, out, reader
from jobledger.cli._params import OFFSET_MAX, bounded_int
from jobledger.cli._text import cell, dumps, when

__all__ = ["audit"]


@click.command()
@click.option("--actor", default=None, help="Only this actor's entries (a token's name).")
@click.option("--action", default=None, help="Only this action (e.g. job.retry, queue.pause).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--offset", type=bounded_int(0, OFFSET_MAX), default=0)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def audit(
    settings: Settings,
    actor: str | None,
    action: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """The audit log: every action taken through `serve --allow-actions` (who, what, on
    what, and what it did), newest first."""
    with reader(settings) as rm:
        entries = rm.audit(limit=limit, offset=offset, actor=actor, action=action)
    if as_json:
        for e in entries:
            click.echo(dumps(e.to_json()))
        return
    console = out()
    if not entries:
        console.print("no audit entries")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("AT", "ACTOR", "ACTION", "TARGET"):
        table.add_column(column, no_wrap=True)
    table.add_column("DETAIL")
    for e in entries:
        detail = json.dumps(dict(e.detail), ensure_ascii=False, sort_keys=True)
        table.add_row(cell(when(e.at)), cell(e.actor), cell(e.action), cell(e.target), cell(detail))
    console.print(table)
