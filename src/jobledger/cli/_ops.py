"""`jobledger doctor` and `gc`: operating a database."""

from __future__ import annotations

import os
import time
from typing import Any, NoReturn

import click
from rich.text import Text

from jobledger._observe.read_model import Diagnosis, unlinked_problem
from jobledger._storage import maintenance
from jobledger._storage.open import is_postgres_url, open_store, redact
from jobledger.cli._common import EXIT_FAILED, Settings, out, reader
from jobledger.cli._params import Seconds
from jobledger.cli._text import cell, dumps, when
from jobledger.errors import JobError

__all__ = ["doctor", "gc"]

WEEK = 7 * 24 * 3600


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.2f} MiB"


def _print_diagnosis(d: Diagnosis) -> None:
    console = out()

    def line(ok: bool, text: str, *, bad: str = "FAIL") -> None:
        if ok:
            mark = Text("ok  ", style="green")
        else:
            mark = Text(bad, style="red" if bad == "FAIL" else "yellow")
        console.print(Text.assemble(mark, " ", cell(text)))

    def note(text: str) -> None:
        console.print(cell(text))

    sqlite = d.backend == "sqlite"
    console.print(cell(d.path, "bold"))
    if sqlite:
        line(d.integrity == ["ok"], f"integrity_check: {'; '.join(d.integrity[:3])}")
    else:
        # Reaching this line is the connectivity check: an unreachable server fails before.
        line(True, f"connected: PostgreSQL {d.facts.server_version or '?'}")
    line(
        d.schema_version == d.library_schema_version,
        f"schema version {d.schema_version} (library {d.library_schema_version})",
    )
    if sqlite:
        line(d.journal_mode.lower() == "wal", f"journal mode {d.journal_mode}")
        held = ", ".join(map(str, d.unlinked_holders[:10])) or "none"
        line(not d.unlinked_holders, f"processes writing to a deleted or replaced copy: {held}")
        note(f"     size {_mib(d.db_bytes)}, WAL {_mib(d.wal_bytes)}, {d.jobs} job rows")
    else:
        note(f"     {d.jobs} job rows")
    alive = [w for w in d.workers if w.state == "alive"]
    dead = [w for w in d.workers if w.state == "dead"]
    line(not dead, f"workers: {len(alive)} alive, {len(dead)} dead (not stopped)")
    for w in d.workers:
        if w.state != "stopped":
            note(f"       {w.state:<5} {w.id} pid {w.pid} heartbeat {when(w.heartbeat_at)}")
    if d.leader is None:
        note("     leader: none")
    else:
        if d.leader.expires_at <= 0:
            state = "released"
        elif d.leader.valid:
            state = f"valid until {when(d.leader.expires_at)}"
        else:
            state = f"expired at {when(d.leader.expires_at)}"
        note(f"     leader: {d.leader.worker_id} term {d.leader.term} ({state})")
    line(not d.stuck_running, f"running jobs of workers not alive: {len(d.stuck_running)}")
    for s in d.stuck_running[:10]:
        note(f"       {s.id} {s.type} worker {s.worker_id}")
    line(not d.orphans or not alive, f"orphan jobs: {len(d.orphans)}")
    line(
        not d.stranded,
        f"waiting workflow jobs whose upstream jobs have all finished: {len(d.stranded)}",
    )
    for job_id in d.stranded[:10]:
        note(f"       {job_id} (nothing will release it: cancel it)")
    kinds = ", ".join(f"{t} ({n})" for t, n in sorted(d.unhandled.items())) or "none"
    line(not d.unhandled, f"waiting jobs of types no live worker handles: {kinds}", bad="WARN")
    warned = f"[yellow]{len(d.warnings)} warning(s)[/]"
    if d.problems:
        console.print(
            f"[red]{len(d.problems)} problem(s)[/]" + (f", {warned}" if d.warnings else "")
        )
    elif d.warnings:
        console.print(f"no problems, {warned}")
    else:
        console.print("[green]healthy[/]")


def _fail_if_only_an_unlinked_copy_is_left(db: str, as_json: bool) -> None:
    """A deleted file that workers still write to is worse news than a wrong path."""
    if is_postgres_url(db) or os.path.exists(db):
        return
    holders = maintenance.unlinked_holders(db)
    if not holders:
        return  # reader() says there is no database there
    _fail_with(db, unlinked_problem(db, holders), as_json, unlinked_holders=holders)


def _fail_with(db: str, problem: str, as_json: bool, **extra: Any) -> NoReturn:
    """A diagnosis of one problem, printed like any other, and exit 1."""
    shown = redact(db)
    if as_json:
        data = {"path": shown, "ok": False, "problems": [problem], **extra}
        click.echo(dumps(data, indent=2))
    else:
        console = out()
        console.print(cell(shown, "bold"))
        console.print(Text.assemble(Text("FAIL", style="red"), " ", cell(problem)))
        console.print(Text("1 problem(s)", style="red"))
    raise SystemExit(EXIT_FAILED)


@click.command()
@click.option("--checkpoint", is_flag=True, help="Run a TRUNCATE checkpoint (empties the WAL).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def doctor(settings: Settings, checkpoint: bool, as_json: bool) -> None:
    """Check the database: integrity, schema, WAL, workers, leader, stuck and orphan jobs.

    Exits 1 when a problem is found; a warning (waiting jobs no live worker handles)
    does not change the exit code.
    """
    _fail_if_only_an_unlinked_copy_is_left(settings.db, as_json)
    try:
        with reader(settings) as rm:
            diagnosis = rm.diagnose()
    except JobError as exc:
        if not is_postgres_url(settings.db) or exc.code != "DB_BUSY":
            raise  # e.g. no schema there: the same error as a missing file
        # A server that is down is the finding, not a crash of the command.
        why = " ".join(str(exc).split())  # the server's message spans lines
        _fail_with(settings.db, f"database server reachable: {why}", as_json)
    checkpointed = maintenance.checkpoint(settings.db) if checkpoint else None
    if as_json:
        data = diagnosis.to_json()
        if checkpoint:
            data["checkpoint"] = (
                None
                if checkpointed is None
                else {
                    "busy": checkpointed.busy,
                    "log": checkpointed.log,
                    "checkpointed": checkpointed.checkpointed,
                    "wal_bytes_after": checkpointed.wal_bytes_after,
                }
            )
        click.echo(dumps(data, indent=2))
    else:
        _print_diagnosis(diagnosis)
        if checkpoint and checkpointed is None:
            out().print("checkpoint: not applicable (the server manages its own WAL)")
        elif checkpointed is not None:
            state = "blocked by a reader or writer" if checkpointed.busy else "done"
            out().print(
                f"checkpoint (TRUNCATE): {state}; {checkpointed.checkpointed}/"
                f"{checkpointed.log} WAL frames copied; "
                f"WAL now {_mib(checkpointed.wal_bytes_after)}"
            )
    if diagnosis.problems:
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.option(
    "--older-than",
    type=Seconds(),
    default=WEEK,
    show_default=True,
    help="Seconds since the job finished.",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.pass_obj
def gc(settings: Settings, older_than: float, dry_run: bool) -> None:
    """Delete finished (completed, failed, cancelled) jobs older than --older-than."""
    cutoff = int((time.time() - older_than) * 1000)
    with reader(settings) as rm:
        count = rm.count_finished_before(cutoff)
    if dry_run:
        click.echo(f"{count} finished job(s) would be deleted")
        return
    # A writer's store (reader() above made sure the database exists): the delete
    # trigger adds what the rows counted to the totals /metrics keeps, in the same
    # transaction (see _storage/observe.py).
    store = open_store(settings.db, busy_timeout=5.0)
    try:
        deleted = store.gc(cutoff)
    finally:
        store.close()
    click.echo(f"deleted {deleted} finished job(s)")
