"""A leader cut off from the server steps down; another process takes the schedules over,
and no fire is enqueued twice.

Two worker processes (`pg_proc.py`) share one schema and one interval schedule (every
0.1 s, wall clock). The first leads, and reaches the server through a `Proxy`; the second
connects directly. Cutting the proxy partitions the leader alone: its connections die
and it cannot reconnect, yet its process lives (on this host, so only the lease's expiry
can free the lease). Then:

* the follower takes the lease when it expires (a new term) and fires from then on;
* the old leader's renews fail and it steps down by itself (its log says so). Its event
  loop may be stuck in a storage call meanwhile (the reader pool waits 5 s for a
  connection), so it may step down only after its lease ran out: leadership is advisory,
  and the fire's compare-and-set and idempotency key are what make an overlap harmless.
  Cut off, it commits nothing, so every fire it wrote is from before the cut;
* after the proxy is restored the old leader reconnects, stays a follower, and still
  fires nothing; the new leader keeps firing;
* every fire key `schedule:<id>:<ms>` is on the interval's grid and names one job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import jobledger as jl
from tests.conftest import db_rows
from tests.postgres import ONLY_POSTGRES, Proxy, now_ms, server_of, via
from tests.schedules import TICK, Tick
from tests.schedules import run as bounded_run

pytestmark = ONLY_POSTGRES

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
PERIOD = 0.1  # the schedule's interval (seconds, wall clock)
TTL = 1.5  # the leader lease (seconds)
WAIT = 30.0


class Worker:
    """One `pg_proc` child; its status file says `<worker id> <leader 0|1>`."""

    def __init__(self, url: str, tmp: Path, name: str) -> None:
        self.status = tmp / f"{name}.status"
        self.log_path = tmp / f"{name}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.postgres.pg_proc", url, str(self.status),
             "--leader-ttl", str(TTL), "--heartbeat", "0.2"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def read(self) -> tuple[str, bool] | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"child exited with {self.proc.returncode}: {self.output()}")
        try:
            parts = self.status.read_text().split()
        except FileNotFoundError:
            return None
        return (parts[0], parts[1] == "1") if len(parts) == 2 else None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(WAIT)
        self.log.close()


def _wait(check: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _leader_id(worker: Worker) -> str | None:
    status = worker.read()
    return status[0] if status is not None and status[1] else None


def _fires(db: str) -> list[tuple[str, str]]:
    """(idempotency key, enqueuing worker) of every job a fire wrote."""
    sql = "SELECT idempotency_key, enqueued_by FROM jobs WHERE schedule_id IS NOT NULL"
    return [(str(k), str(w)) for k, w in db_rows(db, sql)]


def _by(db: str, worker_id: str) -> list[int]:
    """The fire times (epoch ms) of the fires `worker_id` wrote."""
    return sorted(int(k.rpartition(":")[2]) for k, w in _fires(db) if w == worker_id)


def _lease(db: str) -> tuple[str, int]:
    [(holder, term)] = db_rows(db, "SELECT worker_id, term FROM leader WHERE id = 1")
    return str(holder), int(term)


def test_a_partitioned_leader_steps_down_and_another_process_fires_without_doubles(
    db: str, tmp_path: Path
) -> None:
    setup = jl.JobManager(db, startup_delay=0)

    @setup.handler(TICK, recovery="retry")
    def tick(ctx: jl.JobContext[Tick]) -> None:
        return None

    sid = setup.register_job_schedule(TICK, Tick(n=1), trigger=jl.Interval(seconds=PERIOD))
    snap = setup.get_job_schedule_by_id(sid)
    assert snap is not None
    anchor_ms = round(snap.created_at.timestamp() * 1000)
    bounded_run(setup.stop())

    proxy = Proxy(server_of(db))
    workers: list[Worker] = []
    try:
        old = Worker(via(db, proxy.port), tmp_path, "old")
        workers.append(old)
        old_id = _wait(lambda: _leader_id(old), "a first leader")
        new = Worker(db, tmp_path, "new")
        workers.append(new)
        new_id = _wait(lambda: (s := new.read()) and s[0], "the second worker")
        assert new.read() == (new_id, False)
        _wait(lambda: len(_by(db, old_id)) >= 5, "fires under the first leader")
        assert _lease(db)[0] == old_id
        old_term = _lease(db)[1]

        cut_ms = now_ms()
        proxy.cut()
        relayed_at_cut = proxy.relayed
        _wait(lambda: (s := new.read()) is not None and s[1], "the second worker to lead")
        assert _lease(db) == (new_id, old_term + 1)
        _wait(lambda: len(_by(db, new_id)) >= 5, "fires under the new leader")
        _wait(lambda: "stepped down as leader" in old.output(), "the old leader to step down")

        proxy.restore()
        healed_ms = now_ms()
        _wait(lambda: (s := old.read()) is not None and not s[1], "the old leader's status")
        # It reaches the server again (new connections through the proxy) and stays a
        # follower while the new leader keeps firing.
        _wait(lambda: proxy.relayed > relayed_at_cut, "the old leader to reconnect")
        fired_before_heal = len(_by(db, new_id))
        _wait(lambda: len(_by(db, new_id)) >= fired_before_heal + 10, "fires after the heal")
        assert old.read() == (old_id, False)
        assert new.read() == (new_id, True)
        assert _lease(db) == (new_id, old_term + 1)
        # Who fired what, read while both live: a stopped worker's waiting rows are
        # disowned by whoever recovers it (their `enqueued_by` becomes NULL).
        fires = _fires(db)
        # The old one first: once the leader stops, a follower rightly takes over.
        for w in (old, new):
            w.proc.send_signal(signal.SIGTERM)
            assert w.proc.wait(WAIT) == 0, w.output()[-3000:]
        keys = [k for k, _ in _fires(db)]
    finally:
        for w in workers:
            w.close()
        proxy.close()

    counts = Counter(keys)
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1]
    period_ms = round(PERIOD * 1000)
    for key in counts:
        prefix, _, fire_ms = key.rpartition(":")
        assert prefix == f"schedule:{sid}"
        assert (int(fire_ms) - anchor_ms) % period_ms == 0, key
    old_fires = sorted(int(k.rpartition(":")[2]) for k, w in fires if w == old_id)
    new_fires = sorted(int(k.rpartition(":")[2]) for k, w in fires if w == new_id)
    assert {w for _, w in fires} == {old_id, new_id}
    # Cut off, the old leader committed nothing; healed, it had stepped down.
    assert old_fires[-1] <= cut_ms, (old_fires[-1], cut_ms)
    assert new_fires[0] > cut_ms
    assert sum(1 for f in new_fires if f > healed_ms) >= 10
