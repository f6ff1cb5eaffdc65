"""Worker rows (`register_worker`, `heartbeat`, `stop_worker`, `list_workers`) and
`recover_worker` applying a recovery plan, on every backend.

The plan is policy (`jobledger._core.recovery.plan_recovery`, unit-tested without a
database in `tests/unit/test_recovery_policy.py`); here it runs against real rows, so each
strategy is checked end to end: what the store hands the plan, and what it writes back.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

import pytest

from jobledger._core.recovery import dead_workers, plan_recovery
from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, JobRow
from jobledger._storage.records import RecoveryPlan, RecoveryStats
from jobledger._types import RecoveryStrategy
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome

HOST = socket.gethostname()
NOW = 50_000


def _register(
    store: ConformantStore,
    worker_id: str,
    *,
    host: str = "elsewhere",
    pid: int = 1,
    handlers: Sequence[str] = ("t.a=retry",),
    at: int = 0,
) -> None:
    store.register_worker(worker_id, host, pid, handlers, at)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _error(why: str) -> str:
    return json.dumps({"message": why})


def _recover(
    store: ConformantStore, worker: str, strategies: Mapping[str, RecoveryStrategy]
) -> RecoveryStats:
    return store.recover_worker(
        worker, lambda rows: plan_recovery(rows, strategies.get), _error, NOW
    )


def _ids(rows: Sequence[JobRow]) -> list[str]:
    return sorted(r[L.C_ID] for r in rows)


# -- worker rows -----------------------------------------------------------------------


def test_worker_rows_round_trip_heartbeat_and_stop(store: ConformantStore) -> None:
    assert store.list_workers() == []
    _register(store, "w1", host="h", pid=42, handlers=["t.a=retry", "t.b=abandon"], at=5)
    [w] = store.list_workers()
    assert (w.id, w.hostname, w.pid, w.handlers, w.started_at, w.heartbeat_at, w.stopped_at) == (
        "w1",
        "h",
        42,
        ("t.a=retry", "t.b=abandon"),
        5,
        5,
        None,
    )
    assert store.heartbeat("w1", 9) is True
    [w] = store.list_workers()
    assert (w.started_at, w.heartbeat_at) == (5, 9)
    store.stop_worker("w1", 10)
    [w] = store.list_workers()
    assert (w.heartbeat_at, w.stopped_at) == (10, 10)
    # A stopped worker's heartbeat is refused and changes nothing.
    assert store.heartbeat("w1", 11) is False
    assert store.list_workers()[0].heartbeat_at == 10
    # Registering again restarts the row: new process, new start, not stopped.
    _register(store, "w1", host="h", pid=43, handlers=[], at=12)
    [w] = store.list_workers()
    assert (w.pid, w.handlers, w.started_at, w.heartbeat_at, w.stopped_at) == (
        43,
        (),
        12,
        12,
        None,
    )


def test_a_heartbeat_without_a_row_says_so(store: ConformantStore) -> None:
    assert store.heartbeat("nobody", 1) is False
    store.stop_worker("nobody", 1)  # no row: nothing to stop, no error
    assert store.list_workers() == []


def test_workers_are_listed_independently(store: ConformantStore) -> None:
    _register(store, "a", at=1)
    _register(store, "b", at=2)
    assert store.heartbeat("b", 7)
    store.stop_worker("a", 8)
    rows = {w.id: (w.heartbeat_at, w.stopped_at) for w in store.list_workers()}
    assert rows == {"a": (8, 8), "b": (7, None)}


def test_dead_workers_by_stop_heartbeat_and_local_pid(store: ConformantStore) -> None:
    """The rows `list_workers` returns carry what the liveness policy needs."""
    _register(store, "me", host=HOST, pid=os.getpid(), at=0)  # stale, but it is us
    _register(store, "fresh", at=9_500)
    _register(store, "stale", at=1_000)
    _register(store, "stopped", at=9_900)
    store.stop_worker("stopped", 9_900)
    _register(store, "gone", host=HOST, pid=_dead_pid(), at=9_999)
    _register(store, "alive-here", host=HOST, pid=os.getpid(), at=9_999)
    dead, alive = dead_workers(
        store.list_workers(), now_ms=10_000, timeout_ms=5_000, hostname=HOST, exclude="me"
    )
    assert sorted(w.id for w in dead) == ["gone", "stale", "stopped"]
    assert sorted(w.id for w in alive) == ["alive-here", "fresh", "me"]


# -- recover_worker ----------------------------------------------------------------------


def test_the_plan_sees_exactly_the_workers_live_rows(store: ConformantStore) -> None:
    _register(store, "dead")
    claimed_by_it = new_job(enqueued_by="producer")
    enqueued_by_it = new_job(enqueued_by="dead")
    delayed_by_it = new_job(enqueued_by="dead", status="delayed", scheduled_at=99_999)
    finished_by_it = new_job(enqueued_by="dead")
    claimed_by_other = new_job(enqueued_by="dead")
    someone_elses = new_job(enqueued_by="producer")
    store.enqueue([claimed_by_it, finished_by_it, claimed_by_other])
    assert [c.id for c in claim(store, worker="dead", limit=2).jobs] == [
        claimed_by_it.id,
        finished_by_it.id,
    ]
    assert store.finalize([outcome(finished_by_it.id, worker="dead")], 20_000)[0] is not None
    assert [c.id for c in claim(store, worker="alive").jobs] == [claimed_by_other.id]
    store.enqueue([enqueued_by_it, delayed_by_it, someone_elses])
    seen: list[list[JobRow]] = []

    def nothing(rows: Sequence[JobRow]) -> RecoveryPlan:
        seen.append(list(rows))
        return RecoveryPlan()

    stats = store.recover_worker("dead", nothing, _error, NOW)
    assert (stats.reset, stats.kept, stats.cancelled) == (0, 0, [])
    [rows] = seen
    assert _ids(rows) == sorted([claimed_by_it.id, enqueued_by_it.id, delayed_by_it.id])
    # Full rows in the shared layout, as stored.
    for row in rows:
        assert tuple(row) == store.get(row[L.C_ID])
    # An empty plan writes nothing to the rows, but the worker is gone all the same.
    assert col(store.get(claimed_by_it.id), L.C_STATUS) == "running"
    assert col(store.get(enqueued_by_it.id), L.C_ENQUEUED_BY) == "dead"
    assert store.list_workers() == []


def test_retry_resets_running_rows_and_disowns_waiting_ones(store: ConformantStore) -> None:
    _register(store, "dead")
    _register(store, "alive")
    run = new_job(enqueued_by="dead")
    wait = new_job(enqueued_by="dead")
    mine = new_job(enqueued_by="producer")
    store.enqueue([run, wait, mine])
    assert [c.id for c in claim(store, worker="dead", limit=1).jobs] == [run.id]
    stats = _recover(store, "dead", {"t.a": "retry"})
    assert (stats.reset, stats.kept, stats.cancelled) == (1, 1, [])
    row = store.get(run.id)
    assert col(row, L.C_STATUS) == "pending"
    assert col(row, L.C_WORKER) is None
    assert col(row, L.C_STARTED_AT) is None
    assert col(row, L.C_ENQUEUED_BY) is None
    assert col(row, L.C_ATTEMPT) == 0
    assert col(row, L.C_UPDATED_AT) == NOW
    assert col(store.get(wait.id), L.C_STATUS) == "pending"
    assert col(store.get(wait.id), L.C_ENQUEUED_BY) is None
    assert col(store.get(mine.id), L.C_ENQUEUED_BY) == "producer"
    # Only the dead worker's row is deleted.
    assert [w.id for w in store.list_workers()] == ["alive"]
    # The reset row is ordinary work again.
    assert run.id in [c.id for c in claim(store, worker="alive", limit=3).jobs]
    # The same worker is never recovered twice: its rows are not its rows any more.
    again = _recover(store, "dead", {"t.a": "retry"})
    assert (again.reset, again.kept, again.cancelled) == (0, 0, [])


@pytest.mark.parametrize("strategy", ["abandon", None])
def test_abandon_and_orphans_are_cancelled(
    store: ConformantStore, strategy: RecoveryStrategy | None
) -> None:
    _register(store, "dead")
    run, wait = new_job(enqueued_by="dead"), new_job(enqueued_by="dead", status="delayed")
    store.enqueue([run, wait])
    claim(store, worker="dead", limit=1)
    stats = _recover(store, "dead", {} if strategy is None else {"t.a": strategy})
    assert (stats.reset, stats.kept) == (0, 0)
    assert _ids(stats.cancelled) == sorted([run.id, wait.id])
    why = "Orphan job" if strategy is None else "Abandoned by recovery"
    for row in stats.cancelled:
        assert tuple(row) == store.get(row[L.C_ID])
        assert row[L.C_STATUS] == "cancelled"
        assert row[L.C_FINISHED_AT] == NOW
        assert row[L.C_OUTPUT] is None
        assert json.loads(row[L.C_ERROR])["message"].startswith(why)
    assert store.list_workers() == []


def test_singleton_keeps_only_the_newest_row(store: ConformantStore) -> None:
    _register(store, "dead")
    old = new_job(enqueued_by="dead", created_at=100)
    mid = new_job(enqueued_by="dead", created_at=200)
    new = new_job(enqueued_by="dead", created_at=300)
    store.enqueue([old, mid, new])
    stats = _recover(store, "dead", {"t.a": "singleton"})
    assert (stats.kept, stats.reset) == (1, 0)
    assert _ids(stats.cancelled) == sorted([old.id, mid.id])
    for row in stats.cancelled:
        assert json.loads(row[L.C_ERROR])["message"].startswith("Superseded")
    kept = store.get(new.id)
    assert (col(kept, L.C_STATUS), col(kept, L.C_ENQUEUED_BY)) == ("pending", None)


def test_singleton_supersedes_an_older_running_row(store: ConformantStore) -> None:
    _register(store, "dead")
    old = new_job(enqueued_by="dead", created_at=100)
    new = new_job(enqueued_by="dead", created_at=300)
    store.enqueue([old, new])
    assert [c.id for c in claim(store, worker="dead", limit=1).jobs] == [old.id]
    # `new` is the newest and waiting: it is kept; the running `old` is superseded.
    stats = _recover(store, "dead", {"t.a": "singleton"})
    assert (stats.kept, stats.reset) == (1, 0)
    assert _ids(stats.cancelled) == [old.id]
    assert col(store.get(new.id), L.C_STATUS) == "pending"


def test_cancel_requested_rows_are_cancelled_whatever_the_strategy(
    store: ConformantStore,
) -> None:
    _register(store, "dead")
    job, other = new_job(enqueued_by="dead"), new_job(enqueued_by="dead")
    store.enqueue([job, other])
    assert [c.id for c in claim(store, worker="dead", limit=1).jobs] == [job.id]
    assert store.request_cancel(job.id, "user", "{}", 1)[0] == "running"
    stats = _recover(store, "dead", {"t.a": "retry"})
    assert _ids(stats.cancelled) == [job.id]
    assert json.loads(stats.cancelled[0][L.C_ERROR])["message"].startswith(
        "Cancelled by startup recovery"
    )
    assert (stats.reset, stats.kept) == (0, 1)
    assert col(store.get(job.id), L.C_STATUS) == "cancelled"
    assert col(store.get(other.id), L.C_STATUS) == "pending"


def test_recovery_releases_the_workers_locks_and_leaves_others(backend: Backend) -> None:
    store = backend.store
    _register(store, "dead")
    _register(store, "alive")
    a, b = new_job(enqueued_by="dead"), new_job()
    store.enqueue([a, b])
    claim(store, worker="dead", limit=1)
    claim(store, worker="alive", limit=1)
    assert store.try_lock("la", a.id, "dead", 1)
    assert store.try_lock("lb", b.id, "alive", 1)
    _recover(store, "dead", {"t.a": "retry"})
    assert backend.rows("SELECT name FROM locks") == [("lb",)]
    assert col(store.get(b.id), L.C_STATUS) == "running"
    # The freed lock can be taken by the next runner of the recovered job.
    assert [c.id for c in claim(store, worker="w3").jobs] == [a.id]
    assert store.try_lock("la", a.id, "w3", 2) is True
    assert store.try_lock("lb", a.id, "w3", 2) is False


def test_an_empty_plan_still_frees_the_locks_and_deletes_the_row(backend: Backend) -> None:
    store = backend.store
    _register(store, "dead")
    job = new_job()
    store.enqueue([job])
    claim(store, worker="dead")
    assert store.try_lock("l", job.id, "dead", 1)
    stats = store.recover_worker("dead", lambda _rows: RecoveryPlan(), _error, NOW)
    assert (stats.reset, stats.kept, stats.cancelled) == (0, 0, [])
    assert backend.rows("SELECT name FROM locks") == []
    assert store.list_workers() == []


def test_rows_running_under_a_live_worker_are_never_touched(store: ConformantStore) -> None:
    _register(store, "dead")
    job = new_job(enqueued_by="dead")
    store.enqueue([job])
    claim(store, worker="alive")  # enqueued by the dead one, but claimed by a live one
    stats = _recover(store, "dead", {})
    assert (stats.reset, stats.kept, stats.cancelled) == (0, 0, [])
    assert col(store.get(job.id), L.C_STATUS) == "running"
    assert store.count(JobFilter(status=("running",))) == 1


def test_a_plan_naming_rows_that_are_not_live_writes_nothing(store: ConformantStore) -> None:
    """The plan's decisions are applied as compare-and-sets on the row's state."""
    _register(store, "dead")
    done = new_job(enqueued_by="dead")
    store.enqueue([done])
    claim(store, worker="dead")
    finished = store.finalize([outcome(done.id, worker="dead")], 20_000)[0]
    assert finished is not None
    plan = RecoveryPlan(cancel=((done.id, "late"),), reset=(done.id,), disown=(done.id,))
    stats = store.recover_worker("dead", lambda _rows: plan, _error, NOW)
    assert stats.cancelled == []
    assert store.get(done.id) == tuple(finished)


def test_concurrent_recoveries_of_one_worker_apply_its_plan_once(backend: Backend) -> None:
    """Startup recovery is not leader-only: two processes may recover the same dead
    worker at once. One applies the plan; the other finds nothing left to recover."""
    store = backend.store
    _register(store, "dead")
    running = [new_job(enqueued_by="dead") for _ in range(3)]
    waiting = [new_job(enqueued_by="dead") for _ in range(3)]
    doomed = new_job(type="t.gone", enqueued_by="dead")
    store.enqueue([*running, *waiting, doomed])
    assert len(claim(store, worker="dead", limit=3).jobs) == 3
    recoverers = [store, backend.open_other()]
    start = threading.Barrier(len(recoverers))
    results: list[RecoveryStats] = []
    errors: list[BaseException] = []

    def go(recoverer: ConformantStore) -> None:
        try:
            start.wait(timeout=10)
            results.append(_recover(recoverer, "dead", {"t.a": "retry"}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(r,)) for r in recoverers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(results) == 2
    assert sorted(s.reset for s in results) == [0, 3]
    assert sorted(s.kept for s in results) == [0, 3]
    assert sorted(len(s.cancelled) for s in results) == [0, 1]
    assert [r[L.C_ID] for s in results for r in s.cancelled] == [doomed.id]
    assert store.count(JobFilter(status=("pending",))) == 6
    assert store.list_workers() == []
