"""Recovery policy without a database (`jobledger._core.recovery`): who is dead, whether
a lease holder still leads, and `plan_recovery`'s decision for every row of a dead worker.

The stores apply these decisions (`tests/conformance/test_workers.py`,
`tests/conformance/test_leader.py`); here are the rules alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

import pytest

from jobledger._core.recovery import dead_workers, holder_alive, is_dead, pid_alive, plan_recovery
from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow, new_row
from jobledger._storage.records import LeaseRow, RecoveryPlan, WorkerRow
from jobledger._types import RecoveryStrategy

HOST = "this-host"
ME = os.getpid()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


DEAD_PID = _dead_pid()


def _worker(
    id: str,
    *,
    host: str = "elsewhere",
    pid: int = 1,
    beat: int = 0,
    stopped: int | None = None,
) -> WorkerRow:
    return WorkerRow(id, host, pid, ("t.a=retry",), 0, beat, stopped)


def _lease(
    *,
    expires: int = 20_000,
    registered: bool = True,
    host: str | None = "elsewhere",
    pid: int | None = 1,
    stopped: int | None = None,
) -> LeaseRow:
    return LeaseRow("holder", 1, expires, registered, host, pid, stopped)


def _job(
    id: str,
    *,
    type: str = "t.a",
    status: str = "pending",
    created: int = 1_000,
    cancel: bool = False,
) -> JobRow:
    row = list(
        new_row(
            id, type, status, "q", 0, "{}", 3, None, None, None, None, "{}", "dead", 1_000,
            created,
        )
    )  # fmt: skip
    row[L.C_CANCEL] = 1 if cancel else 0
    if status == "running":
        row[L.C_WORKER] = "dead"
    return tuple(row)


def _plan(*rows: JobRow, strategies: Mapping[str, RecoveryStrategy]) -> RecoveryPlan:
    return plan_recovery(list(rows), strategies.get)


# -- liveness ------------------------------------------------------------------------------


def test_pid_alive() -> None:
    assert pid_alive(ME) is True
    assert pid_alive(DEAD_PID) is False


@pytest.mark.parametrize(
    ("worker", "dead"),
    [
        (_worker("fresh", beat=9_000), False),
        (_worker("at-the-limit", beat=5_000), False),  # 5000 ms old: not past the timeout
        (_worker("stale", beat=4_999), True),
        (_worker("stopped", beat=10_000, stopped=10_000), True),
        (_worker("here-alive", host=HOST, pid=ME, beat=10_000), False),
        (_worker("here-gone", host=HOST, pid=DEAD_PID, beat=10_000), True),
        # Another host's pid means nothing here: only its heartbeat counts.
        (_worker("there", host="elsewhere", pid=DEAD_PID, beat=10_000), False),
    ],
    ids=lambda v: v.id if isinstance(v, WorkerRow) else str(v),
)
def test_is_dead(worker: WorkerRow, dead: bool) -> None:
    assert is_dead(worker, now_ms=10_000, timeout_ms=5_000, hostname=HOST) is dead


def test_dead_workers_splits_and_never_counts_ourselves() -> None:
    workers = [
        _worker("me", host=HOST, pid=ME, beat=0, stopped=1),  # looks dead, but it is us
        _worker("fresh", beat=9_500),
        _worker("stale", beat=1_000),
        _worker("stopped", beat=9_900, stopped=9_900),
        _worker("gone", host=HOST, pid=DEAD_PID, beat=9_999),
        _worker("alive-here", host=HOST, pid=ME, beat=9_999),
    ]
    dead, alive = dead_workers(
        workers, now_ms=10_000, timeout_ms=5_000, hostname=HOST, exclude="me"
    )
    assert [w.id for w in dead] == ["stale", "stopped", "gone"]  # in the given order
    assert [w.id for w in alive] == ["me", "fresh", "alive-here"]
    assert dead_workers([], now_ms=0, timeout_ms=1, hostname=HOST, exclude="me") == ([], [])


@pytest.mark.parametrize(
    ("lease", "alive"),
    [
        (_lease(), True),
        (_lease(expires=10_001), True),
        (_lease(expires=10_000), False),  # expires_at is the first instant it no longer holds
        (_lease(registered=False, host=None, pid=None), False),
        (_lease(stopped=5_000), False),
        (_lease(host=HOST, pid=ME), True),
        (_lease(host=HOST, pid=DEAD_PID), False),  # a kill -9 frees the lease at once
        (_lease(host="elsewhere", pid=DEAD_PID), True),
        (_lease(host=HOST, pid=None), True),
    ],
)
def test_holder_alive(lease: LeaseRow, alive: bool) -> None:
    assert holder_alive(lease, now_ms=10_000, hostname=HOST) is alive


# -- plan_recovery -------------------------------------------------------------------------

ORPHAN = "Orphan job: no live worker handles this type"
ABANDONED = "Abandoned by recovery: its worker died"
SUPERSEDED = "Superseded by a newer singleton job"
REQUESTED = "Cancelled by startup recovery"


def test_nothing_to_recover_is_an_empty_plan() -> None:
    assert _plan(strategies={"t.a": "retry"}) == RecoveryPlan()


def test_retry_resets_running_rows_and_disowns_waiting_ones() -> None:
    plan = _plan(
        _job("run", status="running"),
        _job("wait", status="pending"),
        _job("later", status="delayed"),
        strategies={"t.a": "retry"},
    )
    assert plan.cancel == ()
    assert plan.reset == ("run",)
    assert sorted(plan.disown) == ["later", "wait"]


def test_abandon_cancels_every_row_running_or_not() -> None:
    plan = _plan(_job("run", status="running"), _job("wait"), strategies={"t.a": "abandon"})
    assert sorted(plan.cancel) == [("run", ABANDONED), ("wait", ABANDONED)]
    assert (plan.reset, plan.disown) == ((), ())


def test_a_type_no_live_worker_handles_is_an_orphan() -> None:
    plan = _plan(
        _job("mine", status="running"),
        _job("orphan-run", type="t.gone", status="running"),
        _job("orphan-wait", type="t.gone"),
        strategies={"t.a": "retry"},
    )
    assert sorted(plan.cancel) == [("orphan-run", ORPHAN), ("orphan-wait", ORPHAN)]
    assert plan.reset == ("mine",)


@pytest.mark.parametrize("strategy", ["retry", "singleton", "abandon", None])
def test_a_cancel_request_wins_over_every_strategy(strategy: RecoveryStrategy | None) -> None:
    strategies: dict[str, RecoveryStrategy] = {} if strategy is None else {"t.a": strategy}
    plan = _plan(
        _job("asked", status="running", cancel=True),
        _job("asked-waiting", cancel=True),
        strategies=strategies,
    )
    assert sorted(plan.cancel) == [("asked", REQUESTED), ("asked-waiting", REQUESTED)]
    assert (plan.reset, plan.disown) == ((), ())


def test_singleton_keeps_the_newest_row_of_each_type() -> None:
    plan = _plan(
        _job("a-old", created=100, status="running"),
        _job("a-new", created=300),
        _job("a-mid", created=200),
        _job("b-old", type="t.b", created=150),
        _job("b-new", type="t.b", created=250, status="running"),
        strategies={"t.a": "singleton", "t.b": "singleton"},
    )
    assert sorted(plan.cancel) == [
        ("a-mid", SUPERSEDED),
        ("a-old", SUPERSEDED),
        ("b-old", SUPERSEDED),
    ]
    assert plan.reset == ("b-new",)
    assert plan.disown == ("a-new",)


def test_singleton_ties_on_creation_time_go_to_the_greater_id() -> None:
    plan = _plan(_job("x1", created=100), _job("x2", created=100), strategies={"t.a": "singleton"})
    assert plan.disown == ("x2",)
    assert plan.cancel == (("x1", SUPERSEDED),)


def test_a_cancel_requested_newest_singleton_leaves_the_next_one_kept() -> None:
    """A row cancelled for its request is not the one kept: the next newest is."""
    plan = _plan(
        _job("newest", created=300, cancel=True),
        _job("next", created=200),
        _job("oldest", created=100),
        strategies={"t.a": "singleton"},
    )
    assert sorted(plan.cancel) == [("newest", REQUESTED), ("oldest", SUPERSEDED)]
    assert plan.disown == ("next",)


def test_each_row_is_decided_exactly_once() -> None:
    strategies: dict[str, RecoveryStrategy] = {
        "t.a": "retry",
        "t.b": "abandon",
        "t.c": "singleton",
    }
    rows = [
        _job(f"{t}-{i}", type=t, status="running" if i % 2 else "pending", created=i,
             cancel=i == 3)
        for t in ("t.a", "t.b", "t.c", "t.gone")
        for i in range(6)
    ]  # fmt: skip
    plan = plan_recovery(rows, strategies.get)
    decided = [i for i, _ in plan.cancel] + list(plan.reset) + list(plan.disown)
    assert sorted(decided) == sorted(r[L.C_ID] for r in rows)
    assert plan_recovery(list(reversed(rows)), strategies.get) == plan  # order-independent
