"""A manager created before fork() (gunicorn --preload, multiprocessing "fork") is safe in
the child: the child never touches the parent's SQLite connections."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pydantic

import jobledger as jl
from jobledger._storage.sqlite.store import SqliteStore


class Note(pydantic.BaseModel):
    text: str


NOTE = jl.JobType("fork.note", Note)


def _writer_id(jobs: jl.JobManager) -> int:
    store = jobs._store
    assert isinstance(store, SqliteStore)
    return id(store.conn)


def _child(jobs: jl.JobManager, parent_conn_id: int) -> None:
    jobs.enqueue(NOTE, Note(text="from the child"))
    # The parent's writer object must have been replaced, not reused.
    raise SystemExit(0 if _writer_id(jobs) != parent_conn_id else 3)


def test_enqueue_after_fork_uses_the_childs_own_connection(db_path: str) -> None:
    jobs = jl.JobManager(db_path)
    jobs.enqueue(NOTE, Note(text="before the fork"))
    parent_conn_id = _writer_id(jobs)
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child, args=(jobs, parent_conn_id))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    jobs.enqueue(NOTE, Note(text="after the fork"))
    assert _writer_id(jobs) == parent_conn_id  # the parent keeps its own
    texts = sorted(s.payload["text"] for s in jobs.list())
    assert texts == ["after the fork", "before the fork", "from the child"]
    check = sqlite3.connect(db_path)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()
