"""`jobledger jobs ...`: list, show, wait for, cancel, enqueue and retry jobs."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from jobledger._core.registry import JobType
from jobledger._core.search import parse_search
from jobledger._observe.read_model import JobQuery, ReadModel, progress_label, shown_progress
from jobledger._runtime.manager import JobManager
from jobledger._storage.open import is_postgres_url
from jobledger._types import JobSnapshot
from jobledger.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_TIMED_OUT,
    Settings,
    fail,
    load_manager,
    out,
    parse_json_option,
    reader,
    record_audit,
)
from jobledger.cli._params import (
    INT_MAX,
    OFFSET_MAX,
    STATUSES_OPTION,
    Seconds,
    bounded_int,
    terminal_statuses,
)
from jobledger.cli._text import cell, dumps, visible, when
from jobledger.errors import JobValidationError, SchemaError

__all__ = ["jobs", "status_style"]

_STYLES = {
    "pending": "white",
    "delayed": "yellow",
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
    "waiting": "blue",
}


def status_style(status: str) -> str:
    return _STYLES.get(status, "white")


def _progress_text(s: JobSnapshot) -> str:
    return progress_label(s) or "-"


@click.group()
def jobs() -> None:
    """List, inspect, wait for, cancel, enqueue and retry jobs."""


@jobs.command("list")
@STATUSES_OPTION
@click.option("--queue", default=None)
@click.option("--type", "type_", default=None, help="Job type name.")
@click.option(
    "--search",
    "-q",
    default=None,
    help="One search term, as the dashboard's: an id or id prefix, payload.FIELD:VALUE, "
    "metadata.FIELD:VALUE, or an error code.",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--offset", type=bounded_int(0, OFFSET_MAX), default=0)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_jobs(
    settings: Settings,
    statuses: tuple[str, ...],
    queue: str | None,
    type_: str | None,
    search: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """Jobs, newest first. The total counts up to 10,000 (then `10,000+`)."""
    term = None if search is None else parse_search(search)
    query = JobQuery(status=statuses, queue=queue, type=type_, search=term)
    with reader(settings) as rm:
        page = rm.page(query, limit=limit, offset=offset)
    if as_json:
        for s in page.items:
            click.echo(dumps(s.to_json()))
        return
    console = out()
    if not page.items:
        console.print("no jobs match")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("ID", "TYPE", "STATUS", "QUEUE", "ATTEMPT", "PROGRESS", "CREATED", "FINISHED"):
        table.add_column(name, no_wrap=True)
    for s in page.items:
        table.add_row(
            cell(s.id),
            cell(s.type),
            cell(s.status, status_style(str(s.status))),
            cell(s.queue),
            cell(f"{s.attempt + 1}/{s.max_attempts}"),
            cell(_progress_text(s)),
            cell(when(s.created_at)),
            cell(when(s.finished_at)),
        )
    console.print(table)
    shown = f"{offset + 1}-{offset + len(page.items)}"
    console.print(f"[dim]{shown} of {page.total_text}[/]")


@jobs.command("show")
@click.argument("job_id")
@click.pass_obj
def show(settings: Settings, job_id: str) -> None:
    """One job as JSON, with its ended attempts (errors, tracebacks, log lines)."""
    with reader(settings) as rm:
        snap = rm.get_job(job_id)
        attempts = [] if snap is None else rm.attempts(job_id)
    if snap is None:
        fail(f"JOB_NOT_FOUND: no job with id {job_id!r}")
    click.echo(dumps({**snap.to_json(), "attempts": [a.to_json() for a in attempts]}, indent=2))


@jobs.command("why")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.pass_obj
def why(settings: Settings, job_id: str, as_json: bool) -> None:
    """Why the job is not running now: one reason per line (code, then a sentence).

    Read from the table: a queue's pause, cap and rate limit set with `queues set`, the
    running rows and the live workers. A handler's own concurrency is only known to its
    process (`jobs.explain` there adds it)."""
    with reader(settings) as rm:
        explained = rm.explain(job_id)
    if explained is None:
        fail(f"JOB_NOT_FOUND: no job with id {job_id!r}")
    if as_json:
        click.echo(dumps(explained.to_json()))
        return
    console = out()
    status = explained.status.value
    console.print(Text.assemble(cell(explained.job_id), " ", cell(status, status_style(status))))
    if not explained.reasons:
        console.print("  no reason holds now" if explained.status in _WAITING_STATES else "  -")
    for reason in explained.reasons:
        console.print(Text.assemble("  ", (reason.code, "bold"), " ", cell(reason.message)))


_WAITING_STATES = ("pending", "delayed", "waiting")


@jobs.command("logs")
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(1), default=None, help="Only attempt N (1-based).")
@click.pass_obj
def logs(settings: Settings, job_id: str, attempt: int | None) -> None:
    """The lines the job's handler logged through ctx.logger, attempt by attempt."""
    with reader(settings) as rm:
        snap = rm.get_job(job_id)
        attempts = [] if snap is None else rm.attempts(job_id)
    if snap is None:
        fail(f"JOB_NOT_FOUND: no job with id {job_id!r}")
    for a in attempts:
        if attempt is not None and a.attempt != attempt:
            continue
        for line in a.logs:
            # One line per record: a multi-line message (a traceback) is kept readable
            # by indenting its continuation lines.
            text = visible(line.message, keep_newlines=True).replace("\n", "\n    ")
            at = line.at.astimezone(UTC).isoformat(timespec="milliseconds")
            click.echo(f"{at.replace('+00:00', 'Z')} attempt {a.attempt} {line.level:<8} {text}")


@jobs.command("wait")
@click.argument("job_id")
@click.option("--timeout", type=Seconds(), default=None, help="Give up after S s.")
@click.option("--interval", type=Seconds(0.01, 3600), default=0.1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the final job as JSON.")
@click.pass_obj
def wait(
    settings: Settings, job_id: str, timeout: float | None, interval: float, as_json: bool
) -> None:
    """Wait for a job to end, with a progress bar; exit 0 only if it completed.

    Exit 1 if it failed or was cancelled, 124 if --timeout passed first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with reader(settings) as rm:
        snap = rm.get_job(job_id)
        if snap is None:
            fail(f"JOB_NOT_FOUND: no job with id {job_id!r}")
        # markup=False: the description is the job's stored progress detail.
        progress = Progress(
            TextColumn("{task.fields[status]:<9}", markup=False),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TextColumn("{task.description}", markup=False),
            TimeElapsedColumn(),
            console=out(stderr=True),
            transient=False,
        )
        with progress:
            task = progress.add_task(visible(snap.type), total=100, status=str(snap.status))
            while True:
                done = shown_progress(snap) or 0.0
                detail = visible(snap.progress_detail or snap.type)
                progress.update(
                    task, completed=done, description=detail, status=visible(str(snap.status))
                )
                if snap.is_terminal:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(interval)
                fresh = rm.get_job(job_id)
                if fresh is None:
                    fail(f"job {job_id} was deleted while waiting")
                snap = fresh
    if as_json:
        click.echo(dumps(snap.to_json(), indent=2))
    else:
        line = f"{snap.id} {snap.status}"
        if snap.error is not None and snap.status != "completed":
            first = snap.error.message.splitlines()[0] if snap.error.message else ""
            line += f": {snap.error.code}: {first}"
        click.echo(visible(line))
    if not snap.is_terminal:
        fail(f"timed out after {timeout:g}s; the job is still {snap.status}", EXIT_TIMED_OUT)
    if snap.status != "completed":
        raise SystemExit(EXIT_FAILED)


@jobs.command("cancel")
@click.argument("job_id")
@click.option("--reason", default=None, help="Stored in the job's error (<= 500 characters).")
@click.pass_obj
def cancel(settings: Settings, job_id: str, reason: str | None) -> None:
    """Cancel a job (a running one is asked to stop; waits for its worker)."""
    with reader(settings) as rm:
        snap = rm.get_job(job_id)
    if snap is None:
        fail(f"JOB_NOT_FOUND: no job with id {job_id!r}")
    manager = JobManager(settings.db)

    async def go() -> str:
        try:
            return await manager.cancel(job_id, reason=reason)
        finally:
            await manager.stop()

    outcome = asyncio.run(go())
    record_audit(settings, "job.cancel", job_id, {"outcome": outcome, "reason": reason})
    click.echo(f"{job_id} {outcome}")
    if outcome == "not-cancellable":
        fail(f"job {job_id} is already {snap.status if snap.is_terminal else 'finished'}")
    if outcome == "timed-out":
        fail("the worker running the job has not stopped it yet; cancel stays requested")


def _known_type(settings: Settings, job_type: str) -> bool:
    """Whether the database has heard of `job_type` (see `ReadModel.knows_type`). A
    database that does not exist yet (no file, no schema) knows no type; opening it
    read-only creates nothing."""
    if not is_postgres_url(settings.db) and not os.path.exists(settings.db):
        return False
    try:
        with ReadModel(settings.db) as rm:
            return rm.knows_type(job_type)
    except SchemaError as exc:
        if exc.params.get("version") == 0:  # a PostgreSQL schema no worker created yet
            return False
        raise


def _enqueue_options(
    delay: float | None,
    priority: int,
    key: str | None,
    queue: str | None,
    max_attempts: int | None,
    metadata: str | None,
    unique_for: float | None,
    debounce: float | None,
) -> dict[str, Any]:
    options: dict[str, Any] = {"priority": priority}
    if delay is not None:
        options["delay"] = delay
    if key is not None:
        options["idempotency_key"] = key
    # Checked by `enqueue` itself (a positive number, with --key), as from Python.
    if unique_for is not None:
        options["unique_for"] = unique_for
    if debounce is not None:
        options["debounce"] = debounce
    if queue is not None:
        options["queue"] = queue
    if max_attempts is not None:
        options["max_attempts"] = max_attempts
    if metadata is not None:
        meta = parse_json_option("--metadata", metadata)
        if not isinstance(meta, dict):
            fail("--metadata must be a JSON object", EXIT_BAD_INPUT)
        options["metadata"] = meta
    return options


@jobs.command("enqueue")
@click.argument("job_type", metavar="TYPE")
@click.option("--payload", default="{}", show_default=True, help="The payload as JSON.")
@click.option("--delay", type=Seconds(), default=None, help="Seconds from now.")
@click.option(
    "--priority",
    type=bounded_int(-INT_MAX, INT_MAX),
    default=0,
    show_default=True,
    help="Lower runs first.",
)
@click.option("--key", default=None, help="Idempotency key.")
@click.option(
    "--unique-for",
    type=Seconds(),
    default=None,
    help="With --key: also return the job with this key that ended within these seconds.",
)
@click.option(
    "--debounce",
    type=Seconds(),
    default=None,
    help="With --key: run once, this many seconds after the last enqueue, with its payload.",
)
@click.option("--queue", default=None, help="Queue (default: the handler's or the type name).")
@click.option("--max-attempts", type=bounded_int(1), default=None)
@click.option("--metadata", default=None, help="A JSON object.")
@click.option(
    "--app",
    default=None,
    metavar="MODULE:ATTR",
    help="Validate against the handler registered in this JobManager.",
)
@click.option(
    "--allow-unknown-type",
    is_flag=True,
    help="Without --app: enqueue even a type no worker and no job of the database has.",
)
@click.pass_obj
def enqueue(
    settings: Settings,
    job_type: str,
    payload: str,
    delay: float | None,
    priority: int,
    key: str | None,
    unique_for: float | None,
    debounce: float | None,
    queue: str | None,
    max_attempts: int | None,
    metadata: str | None,
    app: str | None,
    allow_unknown_type: bool,
) -> None:
    """Enqueue one job and print its id.

    With --app the payload is validated against the registered type (and the handler's
    queue rule applies). Without it the JSON is stored as given; the worker validates it
    when the job runs, and a payload its type rejects fails the job (JOB_PAYLOAD_INVALID).
    Without --app the type must be one the database knows (a worker row lists it, or a
    job has it), else JOB_UNKNOWN_TYPE, unless --allow-unknown-type.
    """
    value = parse_json_option("--payload", payload)
    options = _enqueue_options(
        delay, priority, key, queue, max_attempts, metadata, unique_for, debounce
    )
    if app is None and not allow_unknown_type and not _known_type(settings, job_type):
        # A typo here would otherwise wait forever: nothing would ever claim the row.
        raise JobValidationError(
            f"no worker of {settings.db} handles {job_type!r} and no job has that type; "
            "pass --app MODULE:ATTR to check it against your handlers, or "
            "--allow-unknown-type to enqueue it anyway",
            code="JOB_UNKNOWN_TYPE",
            params={"type": job_type},
        )
    manager = load_manager(app, settings) if app is not None else JobManager(settings.db)
    try:
        if app is not None:
            handle = manager.enqueue(job_type, value, **options)
        else:
            handle = manager.enqueue(JobType(job_type, object), value, **options)
    finally:
        asyncio.run(manager.stop())
    click.echo(handle.id)


@jobs.command("retry")
@click.argument("job_id", required=False)
@click.option(
    "--payload",
    default=None,
    help="With ID: the new job's payload as JSON (default: the old one's).",
)
@click.option(
    "--status",
    "statuses",
    default=None,
    callback=terminal_statuses,
    help="Without ID: re-run the jobs that ended so (comma list of completed, failed, "
    "cancelled) and were not re-run yet.",
)
@click.option("--queue", default=None, help="Without ID: only jobs of this queue.")
@click.option("--type", "type_", default=None, help="Without ID: only jobs of this type.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=1000,
    show_default=True,
    help="Without ID: at most this many, oldest first.",
)
@click.option(
    "--app",
    default=None,
    metavar="MODULE:ATTR",
    help="Validate --payload against the handler registered in this JobManager.",
)
@click.pass_obj
def retry(
    settings: Settings,
    job_id: str | None,
    payload: str | None,
    statuses: tuple[str, ...],
    queue: str | None,
    type_: str | None,
    limit: int,
    app: str | None,
) -> None:
    """Re-run a finished job as a new one, or every finished job that matches; print the
    new ids, one per line.

    `retry ID` writes a new job with the old one's type, queue, priority, metadata,
    attempts, timeout and parent (and its payload, unless --payload is given); the old
    job stays as it ended. `retry --status failed [--queue Q] [--type T]` does that in
    one transaction for every matching job not re-run yet. Without --app a --payload
    only has to be JSON; the worker validates it when the job runs.
    """
    bulk = bool(statuses) or queue is not None or type_ is not None
    if job_id is not None and bulk:
        fail("give a job ID or --status/--queue/--type, not both", EXIT_BAD_INPUT)
    if job_id is None and not statuses:
        fail("give a job ID, or --status (e.g. --status failed) to retry many", EXIT_BAD_INPUT)
    if job_id is None and payload is not None:
        fail("--payload needs a job ID", EXIT_BAD_INPUT)
    value = None if payload is None else parse_json_option("--payload", payload)
    # The observers' open first: a wrong --db is an error, not a new empty database.
    reader(settings).close()
    manager = load_manager(app, settings) if app is not None else JobManager(settings.db)
    try:
        if job_id is None:
            handles = manager.retry_many(status=statuses, queue=queue, type=type_, limit=limit)
            target = " ".join(
                f"{k}={v}"
                for k, v in (("status", ",".join(statuses)), ("queue", queue), ("type", type_))
                if v
            )
            detail = {"retried": len(handles), "new_jobs": [h.id for h in handles[:20]]}
            record_audit(settings, "jobs.retry_many", target, detail, manager)
        else:
            handles = [
                manager.retry(job_id) if payload is None else manager.retry(job_id, payload=value)
            ]
            detail = {"new_job": handles[0].id, "payload": payload is not None}
            record_audit(settings, "job.retry", job_id, detail, manager)
    finally:
        asyncio.run(manager.stop())
    for handle in handles:
        click.echo(handle.id)
