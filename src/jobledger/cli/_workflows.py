"""`jobledger workflows ...`: list workflows and show one, step by step.

Both read through the read model (the database opened read-only), as the HTTP API and
the dashboard do, so the three agree on every count and status. Names, steps and types
are stored strings: every one goes through `cell` (no markup, controls made visible).
"""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from jobledger._observe.read_model import STATUSES, WorkflowStep
from jobledger.cli._common import Settings, fail, out, reader
from jobledger.cli._jobs import status_style
from jobledger.cli._params import OFFSET_MAX, bounded_int
from jobledger.cli._text import cell, dumps, when

__all__ = ["workflows"]


@click.group()
def workflows() -> None:
    """List workflows and show one with its steps."""


def _counts(counts: dict[str, int]) -> Text:
    """`3 completed, 1 failed`, each status in its colour."""
    text = Text()
    for status in STATUSES:
        n = counts.get(status, 0)
        if not n:
            continue
        if text:
            text.append(", ")
        text.append(f"{n} {status}", style=status_style(status))
    return text if text else Text("-")


@workflows.command("list")
@click.option("--name", default=None, help="Only workflows of this name.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--offset", type=bounded_int(0, OFFSET_MAX), default=0)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_workflows(
    settings: Settings, name: str | None, limit: int, offset: int, as_json: bool
) -> None:
    """Workflows, newest first, with their jobs counted per status."""
    with reader(settings) as rm:
        page = rm.workflow_page(limit=limit, offset=offset, name=name)
    if as_json:
        for w in page.items:
            click.echo(dumps(w.to_json()))
        return
    console = out()
    if not page.items:
        console.print("no workflows")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "NAME", "STATUS", "FINISHED", "JOBS", "CREATED"):
        table.add_column(column, no_wrap=True)
    for w in page.items:
        table.add_row(
            cell(w.id),
            cell(w.name),
            cell(w.status, status_style(w.status)),
            cell(f"{w.finished}/{w.total}"),
            _counts(dict(w.counts)),
            cell(when(w.created_at)),
        )
    console.print(table)
    console.print(f"[dim]{offset + 1}-{offset + len(page.items)} of {page.total}[/]")


def _upstream(step: WorkflowStep, by_key: dict[str, WorkflowStep]) -> Text:
    if not step.upstream:
        return Text("-")
    names = []
    for key in step.upstream:
        up = by_key[key]
        names.append(f"{up.name} (workflow {up.workflow_id})" if up.outside else up.name)
    text = cell(", ".join(names))
    if step.on_upstream_failure == "run":
        text.append(" (runs on failure)", style="dim")
    return text


@workflows.command("show")
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="The workflow, jobs, edges and steps.")
@click.pass_obj
def show(settings: Settings, workflow_id: str, as_json: bool) -> None:
    """One workflow: its status, and each step with its jobs' statuses and the steps it
    waits for (a step of one job shows the job's id)."""
    with reader(settings) as rm:
        view = rm.workflow(workflow_id)
    if view is None:
        fail(f"JOB_WORKFLOW_NOT_FOUND: no workflow with id {workflow_id!r}")
    if as_json:
        click.echo(dumps(view.to_json(), indent=2))
        return
    snap = view.snapshot
    console = out()
    head = cell(f"{snap.name} ")
    head.append_text(cell(snap.id, "dim"))
    head.append(" ")
    head.append_text(cell(snap.status, status_style(snap.status)))
    console.print(head)
    summary = Text(f"created {when(snap.created_at)}, {len(snap.jobs)} jobs: ")
    summary.append_text(_counts(view.counts))
    console.print(summary)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("STEP", "TYPE", "STATUS", "JOBS", "AFTER", "JOB"):
        table.add_column(column, no_wrap=True)
    by_key = {s.key: s for s in view.steps}
    for step in view.steps:
        name = cell(step.name)
        if step.outside:
            name.append(" (other workflow)", style="dim")
        table.add_row(
            name,
            cell(", ".join(step.types)),
            cell(step.status, status_style(step.status)),
            _counts(step.counts),
            _upstream(step, by_key),
            cell(step.job_ids[0] if len(step.job_ids) == 1 else f"{len(step.job_ids)} jobs"),
        )
    console.print(table)
