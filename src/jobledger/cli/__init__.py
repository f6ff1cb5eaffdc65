"""The `jobledger` command line."""

from __future__ import annotations

import click

__all__ = ["main"]


@click.group()
@click.option(
    "--db", "db", default=None, help="Database file (default $JOBLEDGER_DB or ./jobledger.db)."
)
@click.pass_context
def main(ctx: click.Context, db: str | None) -> None:
    """jobledger: durable jobs and schedules on one SQL table."""
    ctx.obj = db


@main.command()
def demo() -> None:
    """Run the demo (worker, sample jobs, a cron schedule and the dashboard)."""
    click.echo(
        "jobledger demo: the engine is being built; this will run a worker with sample jobs."
    )
