"""`jobledger search-index add|drop|list`: the JSON fields the console's search reads
through an index of their own (`JobManager.add_search_index`, DESIGN.md §8.9).

`add` and `drop` change the schema, so they are operator actions: each is written to the
audit log under `cli:USER`, as the queue commands are. Neither creates a database: the
path must hold one already (a typo must not leave an empty file behind).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import click

from jobledger._runtime.manager import JobManager
from jobledger.cli._common import Settings, fail, out, reader, record_audit
from jobledger.cli._text import cell, dumps
from jobledger.errors import JobError

__all__ = ["search_index"]


@click.group("search-index")
def search_index() -> None:
    """Indexes that make a search by a payload or metadata field fast.

    Without one, `payload.user:u123` reads every row's JSON (seconds at a million
    rows); with one, it reads the index (milliseconds).
    """


def _change(settings: Settings, field: str, act: Callable[[JobManager], bool], action: str) -> bool:
    with reader(settings):  # DB_NOT_FOUND / DB_SCHEMA before anything is created
        pass
    manager = JobManager(settings.db)
    try:
        changed = act(manager)
        record_audit(settings, action, field, {"changed": changed}, manager)
        return changed
    except JobError as exc:
        fail(f"{exc.code}: {exc.message}", 2 if exc.code == "JOB_INVALID_OPTION" else 1)
    finally:
        asyncio.run(manager.stop())


@search_index.command("add")
@click.argument("field")
@click.pass_obj
def add(settings: Settings, field: str) -> None:
    """Index FIELD: payload.FIELD or metadata.FIELD (dots go deeper: payload.user.id).

    Reads every row once: on SQLite, other writers wait for it (about a second per
    300,000 rows); on PostgreSQL it is built concurrently.
    """
    made = _change(settings, field, lambda m: m.add_search_index(field), "search_index.add")
    click.echo(f"{field}: {'indexed' if made else 'already indexed'}")


@search_index.command("drop")
@click.argument("field")
@click.pass_obj
def drop(settings: Settings, field: str) -> None:
    """Drop FIELD's index (searches by it still work, reading every row)."""
    gone = _change(settings, field, lambda m: m.drop_search_index(field), "search_index.drop")
    click.echo(f"{field}: {'dropped' if gone else 'had no index'}")


@search_index.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON string per line.")
@click.pass_obj
def list_indexes(settings: Settings, as_json: bool) -> None:
    """The indexed fields."""
    with reader(settings) as rm:
        fields = rm.search_indexes()
    if as_json:
        for f in fields:
            click.echo(dumps(f))
        return
    if not fields:
        out().print("no search indexes")
    for f in fields:
        out().print(cell(f))
