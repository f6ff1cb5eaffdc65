"""Worker rows, dead-worker detection and `recover_worker` by strategy."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter
from tests.conformance import Backend, claim, col, new_job

HOST = socket.gethostname()


def _register(backend: Backend, worker_id: str, **kw: Any) -> None:
    row = (
        worker_id,
        kw.get("host", "elsewhere"),
        kw.get("pid", 1),
        json.dumps(kw.get("handlers", ["t.a=retry"])),
        kw.get("started", 0),
        kw.get("beat", 0),
    )
    backend.store.write(lambda c: c.execute(backend.queries.REGISTER_WORKER, row), "register")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_worker_rows_round_trip_and_heartbeat(backend: Backend) -> None:
    store, queries = backend.store, backend.queries
    _register(backend, "w1", host="h", pid=42, handlers=["t.a=retry", "t.b=abandon"], beat=5)
    [w] = backend.workers.list_workers(store)
    assert (w.id, w.hostname, w.pid, w.handlers, w.started_at, w.heartbeat_at, w.stopped_at) == (
        "w1",
        "h",
        42,
        ("t.a=retry", "t.b=abandon"),
        0,
        5,
        None,
    )
    store.write(lambda c: c.execute(queries.HEARTBEAT, (9, "w1")), "beat")
    assert backend.workers.list_workers(store)[0].heartbeat_at == 9
    store.write(lambda c: c.execute(queries.STOP_WORKER, (10, 10, "w1")), "stop")
    assert backend.workers.list_workers(store)[0].stopped_at == 10
    # A stopped worker's heartbeat is ignored; re-registering revives the row.
    store.write(lambda c: c.execute(queries.HEARTBEAT, (11, "w1")), "beat")
    assert backend.workers.list_workers(store)[0].heartbeat_at == 10
    _register(backend, "w1", host="h", pid=43, beat=12)
    [w] = backend.workers.list_workers(store)
    assert (w.pid, w.heartbeat_at, w.stopped_at) == (43, 12, None)


def test_dead_workers_by_stop_heartbeat_and_local_pid(backend: Backend) -> None:
    _register(backend, "me", host=HOST, pid=os.getpid(), beat=0)  # stale, but it is us
    _register(backend, "fresh", beat=9_500)
    _register(backend, "stale", beat=1_000)
    _register(backend, "stopped", beat=9_900)
    backend.store.write(
        lambda c: c.execute(backend.queries.STOP_WORKER, (9_900, 9_900, "stopped")), "stop"
    )
    _register(backend, "gone", host=HOST, pid=_dead_pid(), beat=9_999)
    _register(backend, "alive-here", host=HOST, pid=os.getpid(), beat=9_999)
    dead, alive = backend.workers.dead_workers(
        backend.store, now_ms=10_000, timeout_ms=5_000, hostname=HOST, exclude="me"
    )
    assert sorted(w.id for w in dead) == ["gone", "stale", "stopped"]
    assert sorted(w.id for w in alive) == ["alive-here", "fresh", "me"]


def _recover(backend: Backend, worker: str, strategies: dict[str, str]) -> Any:
    return backend.workers.recover_worker(
        backend.store,
        worker,
        strategy_of=strategies.get,
        cancel_error=lambda why: json.dumps({"message": why}),
        now_ms=50_000,
    )


def test_retry_resets_running_rows_and_keeps_waiting_ones(backend: Backend) -> None:
    store = backend.store
    _register(backend, "dead")
    run = new_job(enqueued_by="dead")
    wait = new_job(enqueued_by="dead")
    mine = new_job(enqueued_by="producer")
    store.enqueue([run, wait, mine])
    assert [c.id for c in claim(store, worker="dead", limit=1).jobs] == [run.id]
    stats = _recover(backend, "dead", {"t.a": "retry"})
    assert (stats.reset, stats.kept, stats.cancelled) == (1, 1, [])
    row = store.get(run.id)
    assert col(row, L.C_STATUS) == "pending"
    assert col(row, L.C_WORKER) is None
    assert col(row, L.C_STARTED_AT) is None
    assert col(row, L.C_ENQUEUED_BY) is None
    assert col(row, L.C_ATTEMPT) == 0
    assert col(store.get(wait.id), L.C_ENQUEUED_BY) is None
    assert col(store.get(mine.id), L.C_ENQUEUED_BY) == "producer"
    assert backend.workers.list_workers(store) == []
    # The same worker is never recovered twice.
    again = _recover(backend, "dead", {"t.a": "retry"})
    assert (again.reset, again.kept, again.cancelled) == (0, 0, [])


@pytest.mark.parametrize("strategy", ["abandon", None])
def test_abandon_and_orphans_are_cancelled(backend: Backend, strategy: str | None) -> None:
    store = backend.store
    _register(backend, "dead")
    run, wait = new_job(enqueued_by="dead"), new_job(enqueued_by="dead", status="delayed")
    store.enqueue([run, wait])
    claim(store, worker="dead", limit=1)
    stats = _recover(backend, "dead", {} if strategy is None else {"t.a": strategy})
    assert (stats.reset, stats.kept) == (0, 0)
    assert sorted(r[L.C_ID] for r in stats.cancelled) == sorted([run.id, wait.id])
    why = "Orphan job" if strategy is None else "Abandoned by recovery"
    for row in stats.cancelled:
        assert row == store.get(row[L.C_ID])
        assert row[L.C_STATUS] == "cancelled"
        assert row[L.C_FINISHED_AT] == 50_000
        assert row[L.C_OUTPUT] is None
        assert json.loads(row[L.C_ERROR])["message"].startswith(why)


def test_singleton_keeps_only_the_newest_row(backend: Backend) -> None:
    store = backend.store
    _register(backend, "dead")
    old = new_job(enqueued_by="dead", created_at=100)
    mid = new_job(enqueued_by="dead", created_at=200)
    new = new_job(enqueued_by="dead", created_at=300)
    store.enqueue([old, mid, new])
    stats = _recover(backend, "dead", {"t.a": "singleton"})
    assert stats.kept == 1
    assert sorted(r[L.C_ID] for r in stats.cancelled) == sorted([old.id, mid.id])
    assert col(store.get(new.id), L.C_STATUS) == "pending"


def test_cancel_requested_rows_are_cancelled_whatever_the_strategy(backend: Backend) -> None:
    store = backend.store
    _register(backend, "dead")
    job = new_job(enqueued_by="dead")
    store.enqueue([job])
    claim(store, worker="dead")
    store.request_cancel(job.id, "user", "{}", 1)
    stats = _recover(backend, "dead", {"t.a": "retry"})
    assert [r[L.C_ID] for r in stats.cancelled] == [job.id]
    assert stats.reset == 0


def test_recovery_releases_the_workers_locks_and_leaves_others(backend: Backend) -> None:
    store = backend.store
    _register(backend, "dead")
    a, b = new_job(enqueued_by="dead"), new_job()
    store.enqueue([a, b])
    claim(store, worker="dead", limit=1)
    claim(store, worker="alive", limit=1)
    assert store.try_lock("la", a.id, "dead", 1)
    assert store.try_lock("lb", b.id, "alive", 1)
    _recover(backend, "dead", {"t.a": "retry"})
    assert backend.rows("SELECT name FROM locks") == [("lb",)]
    assert col(store.get(b.id), L.C_STATUS) == "running"


def test_rows_running_under_a_live_worker_are_never_touched(backend: Backend) -> None:
    store = backend.store
    _register(backend, "dead")
    job = new_job(enqueued_by="dead")
    store.enqueue([job])
    claim(store, worker="alive")  # enqueued by the dead one, but claimed by a live one
    stats = _recover(backend, "dead", {})
    assert (stats.reset, stats.kept, stats.cancelled) == (0, 0, [])
    assert col(store.get(job.id), L.C_STATUS) == "running"
    assert store.count(JobFilter(status=("running",))) == 1
