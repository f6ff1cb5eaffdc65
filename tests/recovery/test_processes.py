"""Several worker processes on one database: claims, caps, rescue and leadership across
them, on both backends (a SQLite file; a PostgreSQL schema, where the four-process run is
the "exactly once" proof of issue 8)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import jobledger as jl
from tests.conftest import db_reader, db_rows
from tests.recovery import (
    Child,
    arun,
    read_markers,
    spawn,
    status_counts,
    wait_for,
    wait_for_async,
)
from tests.recovery.worker_proc import BULK, CAPPED, CAPPED_CONCURRENCY, CPU, RETRY

N_BULK = 4_500
N_CAPPED = 500
BULK_CONCURRENCY = 16  # each process's cap for rec.bulk; together they share it
RESCUE_BOUND = 10.0  # seconds, generous for a loaded machine; worker_timeout is 600 s


def _running_owners(db: str) -> Counter[str]:
    rows = db_rows(db, "SELECT worker_id FROM jobs WHERE status = 'running'")
    return Counter(str(r[0]) for r in rows)


def _lease(db: str) -> tuple[str, int] | None:
    rows = db_rows(db, "SELECT worker_id, term FROM leader WHERE id = 1")
    return None if not rows else (str(rows[0][0]), int(rows[0][1]))


def test_four_processes_run_each_job_exactly_once_under_a_shared_cap(
    db: str, tmp_path: Path
) -> None:
    producer = jl.JobManager(db)
    children: list[Child] = []
    try:
        for n in range(4):
            children.append(
                spawn(db, "work", tmp_path, f"w{n}", "--concurrency", str(BULK_CONCURRENCY))
            )
        for child in children:
            child.wait_started()
        ids = [h.id for h in producer.enqueue_many(BULK, list(range(N_BULK)))]
        ids += [h.id for h in producer.enqueue_many(CAPPED, list(range(N_CAPPED)))]
        total = N_BULK + N_CAPPED
        # A witness outside every worker: the table's running rows per queue, sampled
        # on each poll while the four processes drain the backlog.
        peak: Counter[str] = Counter()
        with db_reader(db) as read:

            def done() -> bool:
                completed = 0
                sql = "SELECT status, queue, count(*) FROM jobs GROUP BY status, queue"
                for status, queue, n in read(sql):
                    if status == "running":
                        peak[queue] = max(peak[queue], int(n))
                    elif status == "completed":
                        completed += int(n)
                return completed == total

            wait_for(done, timeout=50.0, what=f"{total} jobs to complete")
        for child in children:
            assert child.terminate() == 0, child.output()
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.kill9()
        arun(producer.stop)

    assert status_counts(db) == {"completed": total}
    runs = [r for child in children for r in read_markers(child.markers)]
    per_id = Counter(r[1] for r in runs)
    assert len(per_id) == total
    assert set(per_id) == set(ids)
    assert max(per_id.values()) == 1, "a handler ran twice"
    capped = [int(r[3]) for r in runs if r[0] == CAPPED.name]
    assert len(capped) == N_CAPPED
    assert 1 <= max(capped) <= CAPPED_CONCURRENCY
    # The queue caps are counted in SQL, so they bind all four processes together.
    assert set(peak) <= {BULK.name, CAPPED.name}
    assert peak[BULK.name] <= BULK_CONCURRENCY
    assert peak[CAPPED.name] <= CAPPED_CONCURRENCY


def test_process_max_concurrency_leaves_the_rest_of_a_shared_cap_to_other_processes(
    db: str, tmp_path: Path
) -> None:
    # Ten blocking jobs under a cap of ten: without the per-process limit, whichever
    # process claims first takes all ten and the other one idles.
    producer = jl.JobManager(db)
    producer.enqueue_many(RETRY, list(range(10)))
    arun(producer.stop)
    # A short grace: at SIGTERM the blocked jobs are interrupted, not waited for (the
    # grace itself is tests/recovery/test_deploys.py's).
    args = ("--concurrency", "10", "--global-max", "10", "--process-max", "2",
            "--shutdown-grace", "0.1")  # fmt: skip
    children = [spawn(db, "block", tmp_path, f"w{n}", *args) for n in range(2)]
    try:
        a, b = (child.wait_started() for child in children)
        wait_for(
            lambda: _running_owners(db) == Counter({a: 2, b: 2}),
            what="each process to run exactly two of the ten jobs",
        )
        for child in children:
            assert child.terminate() == 0, child.output()
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.kill9()


def test_cpu_bound_jobs_spread_over_processes_without_a_process_limit(
    db: str, tmp_path: Path
) -> None:
    # Handlers that compute without awaiting run one at a time per process. Before the
    # claim-ahead budget (`_runtime/ahead.py`), the first process to claim took all 50
    # global slots, refilled them from its finalize, and the other ran none of 600 jobs.
    children = [
        spawn(db, "cpu", tmp_path, f"w{n}", "--concurrency", "50", "--global-max", "50")
        for n in range(2)
    ]
    producer = jl.JobManager(db)
    try:
        for child in children:
            child.wait_started()
        producer.enqueue_many(CPU, list(range(600)))
        wait_for(
            lambda: status_counts(db).get("completed", 0) == 600,
            what="the 600 CPU-bound jobs to complete",
            timeout=120.0,
        )
        ran = [len(read_markers(child.markers)) for child in children]
        assert sum(ran) == 600, ran
        # Each runs about half; a third is far from what hoarding gives (all and none).
        assert min(ran) >= 200, ran
        for child in children:
            assert child.terminate() == 0, child.output()
    finally:
        arun(producer.stop)
        for child in children:
            if child.proc.poll() is None:
                child.kill9()


def test_a_second_worker_never_resets_a_live_workers_jobs_and_rescues_them_at_its_death(
    db: str,
    tmp_path: Path,
) -> None:
    producer = jl.JobManager(db)
    ids = [h.id for h in producer.enqueue_many(RETRY, list(range(20)))]
    arun(producer.stop)

    first = spawn(db, "block", tmp_path, "w1", "--concurrency", "20", "--worker-timeout", "600")
    try:
        first_id = first.wait_started()
        wait_for(
            lambda: _running_owners(db) == Counter({first_id: 20}),
            what="the first worker to run all 20 jobs",
        )

        async def second() -> tuple[float, Counter[str], bool, bool]:
            jobs = jl.JobManager(db, startup_delay=0, worker_timeout=600.0, poll_interval=0.02)

            @jobs.handler(RETRY, recovery="retry", concurrency=20)
            async def finish(ctx: jl.JobContext[int]) -> int:
                return ctx.payload

            async with jobs:
                await jobs.recovery_done
                # Give its dispatch and rescue tick every chance to misbehave.
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    assert _running_owners(db) == Counter({first_id: 20})
                    await asyncio.sleep(0.05)
                owners = _running_owners(db)
                led_before = jobs.is_leader
                first.kill9()
                killed = time.monotonic()
                await wait_for_async(
                    lambda: status_counts(db) == {"completed": 20},
                    timeout=RESCUE_BOUND * 2,
                    what="the survivor to rescue and run the jobs",
                )
                return time.monotonic() - killed, owners, led_before, jobs.is_leader

        took, owners, led_before, leads_after = arun(second)
    finally:
        if first.proc.poll() is None:
            first.kill9()

    assert owners == Counter({first_id: 20}), "the second start reset a live worker's jobs"
    assert not led_before, "the first worker was leader while it lived"
    assert leads_after
    assert took < RESCUE_BOUND, f"rescue took {took:.1f}s; it must not wait for worker_timeout"
    assert status_counts(db) == {"completed": 20}
    done = {r[0] for r in db_rows(db, "SELECT id FROM jobs WHERE status = 'completed'")}
    assert done == set(ids)


def test_exactly_one_process_leads_and_leadership_moves_when_the_leader_dies(
    db: str,
    tmp_path: Path,
) -> None:
    opts = ("--heartbeat", "0.2", "--leader-ttl", "600")
    children = [spawn(db, "idle", tmp_path, f"w{n}", *opts) for n in range(2)]
    try:
        for child in children:
            child.wait_started()

        def one_leader() -> Child | None:
            states = [c.read_status() for c in children]
            leaders = [c for c, s in zip(children, states, strict=True) if s and s[1]]
            return leaders[0] if len(leaders) == 1 else None

        leader = wait_for(one_leader, what="exactly one leader")
        # It stays exactly one over many renew periods.
        for _ in range(25):
            assert one_leader() is leader
            time.sleep(0.02)
        status = leader.read_status()
        assert status is not None
        lease = _lease(db)
        assert lease is not None
        assert lease[0] == status[0]
        follower = next(c for c in children if c is not leader)

        leader.kill9()
        killed = time.monotonic()
        wait_for(
            lambda: (s := follower.read_status()) is not None and s[1],
            timeout=15.0,
            what="the follower to take over",
        )
        took = time.monotonic() - killed
        new_lease = _lease(db)
        follower_status = follower.read_status()
        assert follower_status is not None
        assert new_lease == (follower_status[0], lease[1] + 1)
        assert took < 8.0, f"takeover took {took:.1f}s with a 600 s ttl"
        assert follower.terminate() == 0, follower.output()
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.kill9()
