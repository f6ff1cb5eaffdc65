"""The `jobledger` command line.

    jobledger [--db PATH] [--debug] COMMAND ...

The database is `--db PATH`, else `$JOBLEDGER_DB`, else `./jobledger.db`. Commands that
only look (jobs list/show/wait, queues, schedules list/show, workflows, doctor, serve) open it
read-only and never create it; commands that change rows go through a `JobManager`
(never started, unless it is `worker` or `demo`). See docs/reference/cli.md.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from jobledger._storage.open import is_postgres_url, redact
from jobledger.cli._common import (
    DEFAULT_DB,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    CliError,
    Settings,
    error_line,
)
from jobledger.cli._text import configure_logging, visible
from jobledger.errors import (
    HandlerRegistrationError,
    JobError,
    JobValidationError,
    ScheduleError,
)

__all__ = ["main"]

_INTERRUPTED = 130


def _traceback() -> None:
    # A traceback quotes exception messages, and a connection error may quote the URL.
    click.echo(visible(redact(traceback.format_exc()), keep_newlines=True), err=True, nl=False)


class _Main(click.Group):
    """Turns every failure into one line on stderr and an exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in argv or os.environ.get("JOBLEDGER_DEBUG") == "1"
        try:
            rv = super().main(
                argv, prog_name or "jobledger", complete_var, standalone_mode=False, **extra
            )
        except click.exceptions.NoArgsIsHelpError as exc:
            # A group without its subcommand: its usage and commands, as `--help` shows
            # them, on stderr, with the usage-error code (not one squashed error line).
            click.echo(exc.ctx.get_help(), err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            error_line(f"{exc.format_message()}{hint}")
            sys.exit(EXIT_BAD_INPUT)
        except CliError as exc:
            if debug:
                _traceback()
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            error_line(exc.format_message())
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("jobledger: interrupted", err=True)
            sys.exit(_INTERRUPTED)
        except JobError as exc:
            if debug:
                _traceback()
            error_line(f"{exc.code}: {exc.message}")
            bad_input = isinstance(
                exc, JobValidationError | ScheduleError | HandlerRegistrationError
            )
            sys.exit(EXIT_BAD_INPUT if bad_input else EXIT_FAILED)
        except Exception as exc:
            if debug:
                _traceback()
            else:
                first = str(exc).splitlines()[0] if str(exc) else ""
                error_line(f"{type(exc).__name__}: {first} (--debug shows the traceback)")
            sys.exit(EXIT_FAILED)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "db",
    default=None,
    metavar="PATH",
    help="Database file (default $JOBLEDGER_DB, else ./jobledger.db).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="jobledger")
@click.pass_context
def main(ctx: click.Context, db: str | None, debug: bool) -> None:
    """jobledger: durable jobs and schedules on one SQL table."""
    env = os.environ.get("JOBLEDGER_DB")
    path = db or env or DEFAULT_DB
    folder = os.path.dirname(path)
    if folder and not is_postgres_url(path) and not os.path.isdir(folder):
        # Opening would create the directory too (the writer lease makes its parents),
        # so a typo in the path would grow a tree and an empty database; refuse instead.
        source = "--db" if db else "$JOBLEDGER_DB"
        raise click.BadParameter(
            f"the directory {folder} does not exist (create it first)",
            ctx,
            param_hint=f"'{source}'",
        )
    ctx.obj = Settings(db=path, db_explicit=bool(db or env), debug=debug)
    if debug:
        configure_logging(logging.DEBUG, "%(levelname)s:%(name)s:%(message)s")


def _register() -> None:
    from jobledger.cli import (
        _audit,
        _jobs,
        _ops,
        _queues,
        _schedules,
        _search_index,
        _serve,
        _worker,
        _workflows,
    )

    main.add_command(_worker.worker)
    main.add_command(_jobs.jobs)
    main.add_command(_schedules.schedules)
    main.add_command(_queues.queues)
    main.add_command(_workflows.workflows)
    main.add_command(_audit.audit)
    main.add_command(_search_index.search_index)
    main.add_command(_ops.doctor)
    main.add_command(_ops.gc)
    main.add_command(_serve.serve)
    main.add_command(_serve.demo)


_register()
