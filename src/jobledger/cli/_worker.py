"""`jobledger worker MODULE:ATTR`: run the JobManager defined in the user's code."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from jobledger._runtime.manager import JobManager
from jobledger._storage.open import redact
from jobledger.cli._common import Settings, load_manager
from jobledger.cli._params import Seconds, bounded_int
from jobledger.cli._text import configure_logging, visible

__all__ = ["run_until_signal", "worker"]

log = logging.getLogger("jobledger.cli")


async def run_until_signal(manager: JobManager, *, banner: str | None = None) -> None:
    """Start `manager`, wait for SIGINT/SIGTERM, stop it (a bounded drain)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await manager.start()
        if banner:
            click.echo(visible(banner), err=True)
        await stop.wait()
        click.echo("jobledger: stopping (running jobs are cancelled; at most 4.5 s)", err=True)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await manager.stop()


@click.command()
@click.argument("app", metavar="MODULE:ATTR")
@click.option(
    "--startup-delay",
    type=Seconds(),
    default=None,
    help="Seconds before recovery and dispatch start (default: the manager's own).",
)
@click.option(
    "--process-max-concurrency",
    type=bounded_int(1),
    default=None,
    help="At most N jobs running at once in this process (default: the manager's own).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
@click.pass_obj
def worker(
    settings: Settings,
    app: str,
    startup_delay: float | None,
    process_max_concurrency: int | None,
    log_level: str,
) -> None:
    """Run the JobManager at MODULE:ATTR until SIGINT or SIGTERM.

    ATTR is a JobManager, or a zero-argument function returning one. With --db the
    path is exported as JOBLEDGER_DB before the import.
    """
    level = logging.DEBUG if settings.debug else getattr(logging, log_level.upper())
    configure_logging(level, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    manager = load_manager(app, settings)
    if startup_delay is not None:
        manager.startup_delay = startup_delay
    if process_max_concurrency is not None:
        manager.process_max_concurrency = process_max_concurrency
    types = ", ".join(sorted(manager.job_types)) or "no job types"
    limit = manager.process_max_concurrency
    at_once = "" if limit is None else f" at most {limit} at once here;"
    banner = (
        f"jobledger worker {manager.worker_id} on {redact(manager.path)}: handles {types};"
        f"{at_once} dispatch starts after {manager.startup_delay:g}s. Ctrl-C to stop."
    )
    asyncio.run(run_until_signal(manager, banner=banner))
    click.echo("jobledger: worker stopped", err=True)
