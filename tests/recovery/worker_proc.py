"""A worker process for the recovery tests: `python -m tests.recovery.worker_proc DB MODE ...`.

It builds a `JobManager` on DB (a SQLite path or a `postgresql://` URL) with the handlers
of MODE, starts it (`startup_delay=0`),
and runs until SIGTERM, then stops cleanly and exits 0. It reports through files only, so
the parent can watch it without sharing memory, and a `kill -9` loses nothing the parent
needs:

* `--markers FILE`: one line per handler execution, appended with O_APPEND
  (`<type> <job id> <attempt> <extra>`), written *before* the handler blocks or returns.
  This record lives outside the job table, so it can prove "ran exactly once" even if
  the table lied.
* `--status FILE`: rewritten atomically (write + rename) every ~20 ms with
  `<worker id> <leader 0|1> <running count>`; it first appears once `start()` returned.

Modes:
    block   rec.abandon / rec.retry / rec.singleton (their strategies) and rec.locker
            (abandon, takes the durable lock "shared-resource") — each blocks until its task
            is cancelled, so the jobs stay `running` until the process dies or stops.
    work    rec.bulk (concurrency from --concurrency) and rec.capped (concurrency 3): they
            record their run and return; rec.capped first samples how many rec.capped
            rows are `running` in the table (all processes) and records the count.
    lock    rec.stale (retry) takes the durable lock "shared-resource", records
            "locked", holds it until the file `<markers>.go` exists, releases it, records
            "released" and returns; rec.waiter (retry) takes the same lock, records
            "locked" and returns (the stale-release test).
    spread  rec.kb (retry) in KB_QUEUES queues (`kb.<n % KB_QUEUES>`), concurrency
            KB_CONCURRENCY each: records "<queue>:start:<monotonic>" when it starts, awaits
            2 ms, records "<queue>:end:<monotonic>" (the many-queues test).
    cpu     rec.cpu (concurrency from --concurrency): records its run, then computes for
            CPU_MS without awaiting, holding the event loop as real computation does.
    rated   rec.rated (concurrency 20, a rate limit from --rate, per key `n % 3` with
            --keyed; without --rate none): records "<key>:<time.time()>" when it starts.
    workflow  rec.wf (retry, concurrency from --concurrency), a workflow step of
            `tests/workflows/test_workflow_processes.py`; its payload is
            `{"name": STEP, "value": V, "meet": PATH?}`. It records
            "start:<step>:<ctx.upstream as JSON>", then, when STEP is `--hold`, waits for
            `<markers>.go`; with `meet`, waits until steps of its workflow run in two
            processes at once (or PATH exists; the first to see it creates PATH). Then it
            records "done:<step>" and returns V + the sum of its upstream outputs.
    ledger  rec.ledger (retry): records "enter:<worker id>", waits for `<markers>.go`,
            then in one `ctx.transaction()` inserts (order, worker id) into the table
            `ledger` (which the test made) and sets the worker id as the output; records
            "committed", or "lost" when the transaction raises `JobClaimLost` (then
            re-raised) — the exactly-once test, `tests/exactly_once/test_processes.py`.
    ledger_async  the same through `async with ctx.transaction()` (SQLite's group
            commit).
    idle    no jobs; only a started manager (for the leadership tests).

`--shutdown-grace S` sets the manager's `shutdown_grace` (default: jobledger's): a test
whose blocked handlers must only be interrupted at SIGTERM, not waited for, passes a
short one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from typing import Any

import jobledger as jl
from jobledger._types import RecoveryStrategy

ABANDON = jl.JobType("rec.abandon", int)
RETRY = jl.JobType("rec.retry", int)
SINGLETON = jl.JobType("rec.singleton", int)
LOCKER = jl.JobType("rec.locker", int)
BULK = jl.JobType("rec.bulk", int)
CAPPED = jl.JobType("rec.capped", int)
STALE = jl.JobType("rec.stale", int)
WAITER = jl.JobType("rec.waiter", int)
KB = jl.JobType("rec.kb", int)
CPU = jl.JobType("rec.cpu", int)
RATED = jl.JobType("rec.rated", int)
WF = jl.JobType("rec.wf", dict)
LEDGER = jl.JobType("rec.ledger", int)
CPU_MS = 2.0
KB_QUEUES = 60
KB_CONCURRENCY = 2

CAPPED_CONCURRENCY = 3
LOCK_NAME = "shared-resource"
STATUS_EVERY = 0.02


class Markers:
    """Append-only execution log; one `os.write` per line, so lines never interleave."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def mark(self, type_name: str, job_id: str, attempt: int, extra: object = "-") -> None:
        os.write(self.fd, f"{type_name} {job_id} {attempt} {extra}\n".encode())


def register_blocking(jobs: jl.JobManager, markers: Markers, concurrency: int) -> None:
    forever = asyncio.Event()  # never set: these handlers leave only by cancellation

    strategies: tuple[tuple[jl.JobType[int], RecoveryStrategy], ...] = (
        (ABANDON, "abandon"),
        (RETRY, "retry"),
        (SINGLETON, "singleton"),
    )
    for job_type, strategy in strategies:

        def make(name: str) -> Any:
            async def block(ctx: jl.JobContext[int]) -> None:
                markers.mark(name, ctx.job_id, ctx.attempt)
                await forever.wait()

            return block

        jobs.handler(job_type, recovery=strategy, concurrency=concurrency)(make(job_type.name))

    @jobs.handler(LOCKER, recovery="abandon", concurrency=concurrency)
    async def locker(ctx: jl.JobContext[int]) -> None:
        async with ctx.lock(LOCK_NAME):
            markers.mark(LOCKER.name, ctx.job_id, ctx.attempt, "locked")
            await forever.wait()


def register_lock(jobs: jl.JobManager, markers: Markers, go: str) -> None:
    @jobs.handler(STALE, recovery="retry")
    async def stale(ctx: jl.JobContext[int]) -> None:
        async with ctx.lock(LOCK_NAME):
            markers.mark(STALE.name, ctx.job_id, ctx.attempt, "locked")
            while not os.path.exists(go):  # noqa: ASYNC240 (a stat of a local file)
                await asyncio.sleep(0.01)
        markers.mark(STALE.name, ctx.job_id, ctx.attempt, "released")

    @jobs.handler(WAITER, recovery="retry")
    async def waiter(ctx: jl.JobContext[int]) -> None:
        async with ctx.lock(LOCK_NAME):
            markers.mark(WAITER.name, ctx.job_id, ctx.attempt, "locked")


class Sampler:
    """A connection of its own that counts running rows, on either backend."""

    def __init__(self, db: str) -> None:
        self.pg: Any = None
        self.sqlite: sqlite3.Connection | None = None
        if db.startswith(("postgresql://", "postgres://")):
            import psycopg

            from jobledger._storage.open import split_schema

            # The test URL's `options` put the schema on the search path.
            self.pg = psycopg.connect(split_schema(db)[0], autocommit=True)
        else:
            self.sqlite = sqlite3.connect(db, timeout=5.0, isolation_level=None)

    def close(self) -> None:
        for conn in (self.pg, self.sqlite):
            if conn is not None:
                conn.close()

    def running_workers(self, workflow_id: str) -> int:
        """How many processes run jobs of this workflow now."""
        sql = (
            "SELECT count(DISTINCT worker_id) FROM jobs"
            " WHERE status = 'running' AND workflow_id = ?"
        )
        if self.pg is not None:
            return int(self.pg.execute(sql.replace("?", "%s"), (workflow_id,)).fetchone()[0])
        assert self.sqlite is not None
        return int(self.sqlite.execute(sql, (workflow_id,)).fetchone()[0])

    def running(self, queue: str) -> int:
        if self.pg is not None:
            sql = "SELECT count(*) FROM jobs WHERE status = 'running' AND queue = %s"
            return int(self.pg.execute(sql, (queue,)).fetchone()[0])
        assert self.sqlite is not None
        sql = "SELECT count(*) FROM jobs WHERE status = 'running' AND queue = ?"
        return int(self.sqlite.execute(sql, (queue,)).fetchone()[0])


def register_work(jobs: jl.JobManager, markers: Markers, concurrency: int, db: str) -> Sampler:
    sampler = Sampler(db)

    @jobs.handler(BULK, recovery="retry", concurrency=concurrency)
    async def bulk(ctx: jl.JobContext[int]) -> int:
        markers.mark(BULK.name, ctx.job_id, ctx.attempt)
        return ctx.payload

    @jobs.handler(CAPPED, recovery="retry", concurrency=CAPPED_CONCURRENCY)
    async def capped(ctx: jl.JobContext[int]) -> int:
        running = sampler.running(CAPPED.name)
        markers.mark(CAPPED.name, ctx.job_id, ctx.attempt, running)
        # Hold the slot across a few loop turns so other processes' claims overlap it.
        await asyncio.sleep(0.002)
        return ctx.payload

    return sampler


def register_spread(jobs: jl.JobManager, markers: Markers) -> None:
    @jobs.handler(
        KB, recovery="retry", concurrency=KB_CONCURRENCY, queue=lambda n: f"kb.{n % KB_QUEUES}"
    )
    async def kb(ctx: jl.JobContext[int]) -> None:
        # CLOCK_MONOTONIC is one clock for every process on the host.
        markers.mark(KB.name, ctx.job_id, ctx.attempt, f"{ctx.queue}:start:{time.monotonic()}")
        await asyncio.sleep(0.002)
        markers.mark(KB.name, ctx.job_id, ctx.attempt, f"{ctx.queue}:end:{time.monotonic()}")


def register_cpu(jobs: jl.JobManager, markers: Markers, concurrency: int) -> None:
    @jobs.handler(CPU, recovery="retry", concurrency=concurrency)
    async def cpu(ctx: jl.JobContext[int]) -> None:
        markers.mark(CPU.name, ctx.job_id, ctx.attempt)
        end = time.perf_counter() + CPU_MS / 1000
        while time.perf_counter() < end:
            pass


def register_rated(jobs: jl.JobManager, markers: Markers, rate: str | None, keyed: bool) -> None:
    limit = None
    if rate is not None:
        parsed = jl.RateLimit.parse(rate)
        limit = jl.RateLimit(
            parsed.limit, parsed.per, key=(lambda n: str(n % 3)) if keyed else None
        )

    @jobs.handler(RATED, recovery="retry", concurrency=20, rate_limit=limit)
    async def rated(ctx: jl.JobContext[int]) -> None:
        markers.mark(RATED.name, ctx.job_id, ctx.attempt, f"{ctx.payload % 3}:{time.time()}")


def wf_total(upstream: dict[str, Any]) -> int:
    total = 0
    for value in upstream.values():
        total += sum(value) if isinstance(value, list) else int(value)
    return total


def register_workflow(
    jobs: jl.JobManager, markers: Markers, concurrency: int, hold: str | None, go: str, db: str
) -> Sampler:
    sampler = Sampler(db)

    @jobs.handler(WF, recovery="retry", concurrency=concurrency)
    async def step(ctx: jl.JobContext[dict[str, Any]]) -> int:
        name = str(ctx.payload["name"])
        upstream = dict(ctx.upstream)
        seen = json.dumps(upstream, sort_keys=True, separators=(",", ":"))
        markers.mark(WF.name, ctx.job_id, ctx.attempt, f"start:{name}:{seen}")
        if name == hold:
            while not os.path.exists(go):  # noqa: ASYNC240 (a stat of a local file)
                await asyncio.sleep(0.01)
        meet = ctx.payload.get("meet")
        if meet is not None:
            # A rendezvous, so that "both processes did work" never depends on timing:
            # the first steps of each process hold their slots until the other process
            # runs one too (a per-process cap leaves it pending work), then a file tells
            # every later step, in either process, not to wait.
            workflow_id = ctx.workflow_id
            assert workflow_id is not None
            while not os.path.exists(meet):  # noqa: ASYNC240 (a stat of a local file)
                if sampler.running_workers(workflow_id) >= 2:
                    with open(meet, "a"):  # noqa: ASYNC230 (creating an empty local file)
                        pass
                    break
                await asyncio.sleep(0.01)
        markers.mark(WF.name, ctx.job_id, ctx.attempt, f"done:{name}")
        return int(ctx.payload["value"]) + wf_total(upstream)

    return sampler


def register_ledger(
    jobs: jl.JobManager, markers: Markers, go: str, db: str, *, group: bool = False
) -> None:
    mark = "%s" if db.startswith("postgresql") else "?"
    insert = f"INSERT INTO ledger (order_id, worker_id) VALUES ({mark}, {mark})"

    @jobs.handler(LEDGER, recovery="retry")
    async def ledger(ctx: jl.JobContext[int]) -> None:
        markers.mark(LEDGER.name, ctx.job_id, ctx.attempt, f"enter:{jobs.worker_id}")
        while not os.path.exists(go):  # noqa: ASYNC240 (a stat of a local file)
            await asyncio.sleep(0.01)
        try:
            if group:
                async with ctx.transaction() as tx:
                    tx.execute(insert, (ctx.payload, jobs.worker_id))
                    tx.set_output(jobs.worker_id)
            else:
                with ctx.transaction() as tx:
                    tx.execute(insert, (ctx.payload, jobs.worker_id))
                    tx.set_output(jobs.worker_id)
        except jl.JobClaimLost:
            markers.mark(LEDGER.name, ctx.job_id, ctx.attempt, "lost")
            raise
        markers.mark(LEDGER.name, ctx.job_id, ctx.attempt, "committed")


def write_status(path: str, jobs: jl.JobManager) -> None:
    running = len(jobs._engine.inflight)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{jobs.worker_id} {int(jobs.is_leader)} {running}\n")
    os.replace(tmp, path)


async def main(args: argparse.Namespace) -> int:
    jobs = jl.JobManager(
        args.db,
        startup_delay=0,
        global_max_concurrency=args.global_max,
        process_max_concurrency=args.process_max,
        worker_timeout=args.worker_timeout,
        heartbeat_interval=args.heartbeat,
        leader_ttl=args.leader_ttl,
        poll_interval=0.02,
        worker_id=args.worker_id,
        **({} if args.shutdown_grace is None else {"shutdown_grace": args.shutdown_grace}),
    )
    markers = Markers(args.markers)
    sampler: Sampler | None = None
    if args.mode == "block":
        register_blocking(jobs, markers, args.concurrency)
    elif args.mode == "work":
        sampler = register_work(jobs, markers, args.concurrency, args.db)
    elif args.mode == "lock":
        register_lock(jobs, markers, f"{args.markers}.go")
    elif args.mode == "spread":
        register_spread(jobs, markers)
    elif args.mode == "rated":
        register_rated(jobs, markers, args.rate, args.keyed)
    elif args.mode == "cpu":
        register_cpu(jobs, markers, args.concurrency)
    elif args.mode == "workflow":
        sampler = register_workflow(
            jobs, markers, args.concurrency, args.hold, f"{args.markers}.go", args.db
        )
    elif args.mode in ("ledger", "ledger_async"):
        group = args.mode == "ledger_async"
        register_ledger(jobs, markers, f"{args.markers}.go", args.db, group=group)
    elif args.mode != "idle":
        raise SystemExit(f"unknown mode {args.mode!r}")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await jobs.start()
    while not stop.is_set():
        if args.status:
            write_status(args.status, jobs)
        try:
            await asyncio.wait_for(stop.wait(), STATUS_EVERY)
        except TimeoutError:
            pass
    await jobs.stop()
    if sampler is not None:
        sampler.close()
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="worker_proc")
    p.add_argument("db")
    modes = (
        "block",
        "work",
        "lock",
        "spread",
        "cpu",
        "rated",
        "workflow",
        "ledger",
        "ledger_async",
        "idle",
    )
    p.add_argument("mode", choices=modes)
    p.add_argument("--markers", required=True)
    p.add_argument("--status", default=None)
    p.add_argument("--worker-id", default=None)
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--global-max", type=int, default=1000)
    p.add_argument("--process-max", type=int, default=None)
    p.add_argument("--worker-timeout", type=float, default=600.0)
    p.add_argument("--heartbeat", type=float, default=5.0)
    p.add_argument("--leader-ttl", type=float, default=15.0)
    p.add_argument("--shutdown-grace", type=float, default=None)
    p.add_argument("--rate", default=None)
    p.add_argument("--keyed", action="store_true")
    p.add_argument("--hold", default=None, help="workflow: the step that waits for .go")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
