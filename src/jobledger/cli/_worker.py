"""`jobledger worker MODULE:ATTR`: run the JobManager defined in the user's code.

Logs go to stderr, as text or (`--log-format json`) one JSON object per line
(`_logformat.py`). In JSON the worker's own lines (the banner, "stopping", "worker
stopped") are INFO records of logger `jobledger.cli` too, so that every line parses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

import click

from jobledger._runtime.manager import JobManager
from jobledger._storage.open import redact
from jobledger.cli._common import Settings, load_manager
from jobledger.cli._logformat import JobTextFormatter, JsonLogFormatter
from jobledger.cli._params import Seconds, bounded_int
from jobledger.cli._text import configure_logging, visible

__all__ = ["run_until_signal", "worker"]

log = logging.getLogger("jobledger.cli")


def _echo(text: str) -> None:
    click.echo(visible(text), err=True)


async def run_until_signal(
    manager: JobManager, *, banner: str | None = None, say: Callable[[str], None] = _echo
) -> None:
    """Start `manager`, wait for SIGINT/SIGTERM, stop it (the grace, then interrupt).

    A second SIGINT/SIGTERM while stopping exits at once: the rows still running are
    left for recovery. `say` shows the worker's own lines (stderr by default)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal() -> None:
        if stop.is_set():
            say("jobledger: stopping now; running jobs are left for recovery")
            _exit_now(1)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal)
    try:
        await manager.start()
        if banner:
            say(banner)
        await stop.wait()
        say(
            f"jobledger: stopping: running jobs get {manager.shutdown_grace:g}s to finish, "
            "then are interrupted (again to stop now)"
        )
    finally:
        try:
            await manager.stop()  # a second signal meanwhile exits at once
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)


def _exit_now(code: int) -> None:
    """Leave without joining threads: a plain `def` handler that ignores its token
    would otherwise hold the interpreter's exit (the pool's threads are joined then)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _lingering_threads() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]


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
    "--grace",
    type=click.FloatRange(min=0, max=86400),
    default=25.0,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM/SIGINT before they are "
    "interrupted (retry/singleton jobs go back to pending).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="Log records at this level and above (--debug: debug). Job starts and ends are "
    "info on logger jobledger.worker; failed and retried ends are warnings.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    help="json: one JSON object per line on stderr (timestamp, level, logger, message "
    "and the record's fields: job_id, type, queue, attempt, outcome, duration_ms).",
)
@click.pass_obj
def worker(
    settings: Settings,
    app: str,
    startup_delay: float | None,
    process_max_concurrency: int | None,
    grace: float,
    log_level: str,
    log_format: str,
) -> None:
    """Run the JobManager at MODULE:ATTR until SIGINT or SIGTERM.

    ATTR is a JobManager, or a zero-argument function returning one. With --db the
    path is exported as JOBLEDGER_DB before the import.
    """
    level = logging.DEBUG if settings.debug else getattr(logging, log_level.upper())
    as_json = log_format.lower() == "json"
    configure_logging(level, JsonLogFormatter() if as_json else JobTextFormatter())
    say = log.info if as_json else _echo
    manager = load_manager(app, settings)
    if startup_delay is not None:
        manager.startup_delay = startup_delay
    if process_max_concurrency is not None:
        manager.process_max_concurrency = process_max_concurrency
    manager.shutdown_grace = grace
    types = ", ".join(sorted(manager.job_types)) or "no job types"
    limit = manager.process_max_concurrency
    at_once = "" if limit is None else f" at most {limit} at once here;"
    banner = (
        f"jobledger worker {manager.worker_id} on {redact(manager.path)}: handles {types};"
        f"{at_once} dispatch starts after {manager.startup_delay:g}s. Ctrl-C to stop."
    )
    asyncio.run(run_until_signal(manager, banner=banner, say=say))
    say("jobledger: worker stopped")
    if _lingering_threads():  # a handler thread ignored its token: do not wait for it
        _exit_now(0)
