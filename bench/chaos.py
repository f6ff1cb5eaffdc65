"""Chaos run: worker processes on one database, killed, frozen and locked out at random.

    python bench/chaos.py                            # SQLite, 4 workers, 3,000 jobs, 60 s
    python bench/chaos.py --backend postgres         # the same on a fresh PostgreSQL database
    python bench/chaos.py --seed 7 --kills 20        # another schedule, more kills
    python bench/chaos.py --workers 2 --jobs 60 --duration 6 --kills 1 --stops 1 --locks 0

What it does (see docs/reliability.md):

* `--workers` worker processes (this script with `--worker`, each in a process group of
  its own), each a started `JobManager` with a short `worker_timeout`,
  `heartbeat_interval`, `leader_ttl` and `startup_delay`, so that rescue and recovery
  happen inside the run. Three job types, all `recovery="retry"`: `chaos.capped` (queue
  cap `--capped-cap`), `chaos.mid` (`--mid-cap`) and `chaos.bulk` (cap 50, so the shared
  `global_max_concurrency=--global-cap` is what binds).
* This process is the producer (a never-started manager): it enqueues `--jobs` jobs
  spread over the first 80 % of `--duration` (each job sleeps 2-8 ms; `--flaky` of them
  raise on their first attempt, to exercise retries). Every job carries its number `n` in
  its payload and the idempotency key `chaos:<n>`, unique for an hour after the job ends
  (`unique_for`), so a batch re-sent after an ambiguous failure cannot hide or double a
  job, even one that was claimed and finished before the batch went again (a plain key
  dedupes only while its job is live).
* Faults, at random times drawn from `--seed` (the schedule is reproducible; its effects
  depend on timing): `--kills` kill -9 of a worker's process group (a replacement starts
  `--restart-delay` s later); `--stops` SIGSTOP of a worker for `worker_timeout` + 0.5-1.5 s,
  then SIGCONT (its rows are rescued as a dead worker's meanwhile); `--locks` lock holders
  (SQLite: another process holding `BEGIN IMMEDIATE`; PostgreSQL: a session holding
  `LOCK TABLE <schema>.jobs IN ACCESS EXCLUSIVE MODE`) for `--lock-seconds`; and on
  PostgreSQL `--terminates` rounds of `pg_terminate_backend` on every jobledger connection
  to the run's own database (the workers' and the producer's; never the server itself);
  and `--deploys` (default 0) a deploy's stop: SIGTERM to a worker whose manager has
  started, the worker's clean shutdown (exit status 0, or the run fails), then a
  replacement.
* A schedule (`--schedule-every`, default 0.5 s; 0: none): an `Interval` of type
  `chaos.tick` under `AllMissed`, created before the workers start, whose leader moves
  with the kills and stops. Its jobs share the global cap and are left out of the job
  counts above; the verdict holds that no point of its grid got two jobs, none between
  the first and the last fire got none (a point skipped by a failed write, a late
  callback or a leaderless gap is made up), and that it still fires at the end.
* Workflows (`--workflows`, default 60): diamonds `a -> (b1, b2, b3) -> c` of type
  `chaos.step` (queue cap 4), enqueued evenly by a second producer thread over the same
  80 %, their steps flaky like the jobs. The verdict holds that each workflow was
  written once, every step completed, and no step started before one of its upstream
  steps had ended with a completion (from the handlers' records).
* Every handler execution appends `job_id n queue attempt pid start|end|raise|abort
  monotonic_ns` to a per-process file with one `os.write` (it survives kill -9; the
  monotonic clock is the same in every process). A sampler thread counts `running` rows
  per queue in the table every `--sample-every` s.
* After `--duration`: the faults stop, frozen workers are continued, dead slots are
  refilled, and the workers get `--drain-timeout` s to finish everything. The verdict is
  read from the table then, with the workers still alive; then they are stopped (SIGTERM).
  When rows are stuck, a fresh worker is started (`--recheck` s) to see whether a restart
  frees them.

`--ledger` (DESIGN 8.13): every handler completes through `ctx.transaction()`, inserting
`(job id, n, pid)` into a table `ledger` of the job database in the same commit. The
verdict then also holds that the ledger has exactly one row per completed job and none
for any other (`ledger_rows`, `ledger_duplicates`, `ledger_mismatch`): a stalled worker's
commit after its rescue must lose (`ledger_claims_lost` counts those seen).

Output: one JSON object (the figures, the fault schedule, the machine), then a markdown
table. Exit status 1 when a job is lost (missing, or pending/delayed after the drain) or
enqueued twice (two rows of one `n`), a row is stuck `running`, a cap was exceeded
(from the table's samples or from the handlers' own records), a worker exited by itself,
the schedule's grid has a point doubled or missing or it stopped firing, or a workflow
was doubled, left unfinished or ran a step early; 2 when PostgreSQL is
unreachable. Duplicates (jobs whose handler completed more than once) are at-least-once
delivery, expected after a kill or a stop;
`dup_unexplained` counts those where no kill or stop touched the processes involved.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import fresh_dir, jl, machine  # noqa: E402


@dataclass(frozen=True)
class Work:
    n: int
    ms: float
    flaky: bool = False


CAPPED = jl.JobType("chaos.capped", Work)
MID = jl.JobType("chaos.mid", Work)
BULK = jl.JobType("chaos.bulk", Work)
# The schedule's jobs (`--schedule-every`): their own type and queue, under the global cap.
TICK = jl.JobType("chaos.tick", Work)
TICK_NAME = "chaos"
# Workflow steps (`--workflows`): diamonds a -> (b1, b2, b3) -> c. A step's payload `n` is
# STEP_BASE + 10 * workflow + step (0 = a, 1-3 = b, 4 = c).
STEP = jl.JobType("chaos.step", Work)
STEP_CAP = 4
STEP_BASE = 1_000_000
UPSTREAM = {0: (), 1: (0,), 2: (0,), 3: (0,), 4: (1, 2, 3)}
# Types whose rows are not the producer's numbered jobs.
OTHER_TYPES = f"('{TICK.name}', '{STEP.name}')"
BULK_CAP = 50
TERMINAL = ("completed", "failed", "cancelled")
LOCK_GAP = 1.0  # s: a lock fault due while another holder is active waits this long
FAULT_WINDOW = 5.0  # s after an execution in which a kill/stop of its process explains a dup
UNIQUE_FOR = 3600.0  # s a job's key stays taken after it ended: longer than any run


# -- the worker process ---------------------------------------------------------------


def worker_main(cfg: dict[str, Any]) -> int:
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(created).3f %(process)d %(name)s %(levelname)s %(message)s",
    )
    return asyncio.run(_worker(cfg))


async def _worker(cfg: dict[str, Any]) -> int:
    pid = os.getpid()
    fd = os.open(
        os.path.join(cfg["dir"], f"exec.{pid}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
    )
    jobs = jl.JobManager(
        cfg["db"],
        global_max_concurrency=cfg["global_cap"],
        startup_delay=cfg["startup_delay"],
        heartbeat_interval=cfg["heartbeat"],
        worker_timeout=cfg["worker_timeout"],
        leader_ttl=cfg["leader_ttl"],
        poll_interval=0.05,
    )
    retry = jl.RetryPolicy(max_attempts=cfg["max_attempts"], backoff="fixed", base_delay=0.05)
    mark_ = "%s" if cfg["db"].startswith("postgresql") else "?"
    ledger = (
        f"INSERT INTO ledger (job_id, n, pid) VALUES ({mark_}, {mark_}, {mark_})"
        if cfg.get("ledger")
        else None
    )

    def register(job_type: jl.JobType[Work], cap: int, ledgered: bool = True) -> None:
        queue = job_type.name

        def mark(ctx: jl.JobContext[Work], what: str) -> None:
            line = f"{ctx.job_id} {ctx.payload.n} {queue} {ctx.attempt} {pid} {what}"
            os.write(fd, f"{line} {time.monotonic_ns()}\n".encode())

        @jobs.handler(job_type, recovery="retry", concurrency=cap, retry=retry)
        async def run(ctx: jl.JobContext[Work]) -> int:
            mark(ctx, "start")
            try:
                await asyncio.sleep(ctx.payload.ms / 1000)
            except asyncio.CancelledError:
                mark(ctx, "abort")
                raise
            if ctx.payload.flaky and ctx.attempt == 0:
                mark(ctx, "raise")
                raise RuntimeError("chaos: a flaky job's first attempt")
            if ledger is not None and ledgered:
                ended = False
                try:
                    async with ctx.transaction() as tx:  # SQLite: the group commit
                        tx.execute(ledger, (ctx.job_id, ctx.payload.n, pid))
                        tx.set_output(ctx.payload.n)
                        # Before the commit: the commit frees the job's slot, and the
                        # cap checks read this record as the end of the execution.
                        mark(ctx, "end")
                        ended = True
                except jl.JobClaimLost:
                    mark(ctx, "lost")  # a later record: it overrides the "end"'s outcome
                    raise
                except BaseException as exc:
                    # The block failed before its body ran (its group's BEGIN met a
                    # write lock held past the busy timeout): the attempt ends here.
                    # Without a record the cap checks would count it running until its
                    # process ends.
                    if not ended:
                        mark(ctx, "abort" if isinstance(exc, asyncio.CancelledError) else "raise")
                    raise
                return ctx.payload.n
            mark(ctx, "end")
            return ctx.payload.n

    register(CAPPED, cfg["capped_cap"])
    register(MID, cfg["mid_cap"])
    register(BULK, BULK_CAP)
    if cfg.get("schedule_every"):
        # No ledger rows: ticks go on completing while the verdict reads the ledger.
        register(TICK, BULK_CAP, ledgered=False)
    if cfg.get("workflows"):
        register(STEP, STEP_CAP)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await jobs.start()
    ready = os.path.join(cfg["dir"], f"ready.{pid}")
    _write_atomic(ready, jobs.worker_id)
    await stop.wait()
    await jobs.stop()
    return 0


def _write_atomic(path: str, text: str) -> None:
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


# -- the lock holder process ----------------------------------------------------------


def hold_lock_main(backend: str, target: str, schema: str, seconds: float) -> int:
    """Hold the database's write lock for `seconds`; print what happened as JSON."""
    asked = time.monotonic()
    if backend == "sqlite":
        conn = sqlite3.connect(target, timeout=5.0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            got = time.monotonic()
            time.sleep(seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(target, autocommit=True, application_name="chaos-lock") as pg:
            pg.execute("SET lock_timeout = '5s'")
            with pg.transaction():
                pg.execute(f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE')
                got = time.monotonic()
                time.sleep(seconds)
    print(json.dumps({"waited": round(got - asked, 3), "held": seconds}), flush=True)
    return 0


# -- the database of one run ----------------------------------------------------------


class Backend:
    """Where the run's jobs live, and the harness's own reads of it."""

    name = "sqlite"
    schema = ""

    def __init__(self, workdir: str) -> None:
        self.path = os.path.join(workdir, "chaos.db")
        self.url = self.path
        self.lock_target = self.path
        self.jobs_table = "jobs"

    def setup(self) -> None:
        return None

    def teardown(self) -> None:
        return None

    def connect(self) -> Any:
        return sqlite3.connect(self.path, timeout=5.0, isolation_level=None)

    def query(self, conn: Any, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql).fetchall()]

    def terminate(self) -> int:
        raise RuntimeError("pg_terminate_backend is a PostgreSQL fault")


class PostgresBackend(Backend):
    """A fresh database per run (`jlchaos_<hex>`), dropped at the end: every connection to
    it is the run's own, so `pg_terminate_backend` can pick them by `datname`."""

    name = "postgres"
    schema = "chaos"

    def __init__(self, workdir: str, dsn: str) -> None:
        from urllib.parse import urlsplit, urlunsplit

        self.admin_dsn = dsn
        self.dbname = f"jlchaos_{uuid.uuid4().hex[:10]}"
        parts = urlsplit(dsn)
        self.dsn = urlunsplit(parts._replace(path=f"/{self.dbname}"))
        sep = "&" if parts.query else "?"
        self.url = f"{self.dsn}{sep}schema={self.schema}"
        self.lock_target = self.dsn
        self.jobs_table = f'"{self.schema}".jobs'
        self.created = False

    def setup(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.created = True

    def teardown(self) -> None:
        if not self.created:
            return
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')

    def connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, application_name="chaos-harness")
        conn.execute("SET statement_timeout = '500ms'")
        conn.execute("SET lock_timeout = '300ms'")
        return conn

    def query(self, conn: Any, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql).fetchall()]

    def terminate(self) -> int:
        """Terminate every jobledger connection to this run's database (not ours)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, application_name="chaos-harness") as c:
            rows = c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name LIKE 'jobledger%'"
            ).fetchall()
        return sum(1 for (ok,) in rows if ok)


# -- the fault schedule ---------------------------------------------------------------


@dataclass(order=True)
class Fault:
    at: float  # seconds after the chaos clock starts
    kind: str = field(compare=False)  # kill | stop | lock | terminate
    slot: int = field(compare=False, default=0)
    seconds: float = field(compare=False, default=0.0)  # stop / lock length


def schedule(args: argparse.Namespace, rng: random.Random) -> list[Fault]:
    out: list[Fault] = []
    lo, hi = 0.05 * args.duration, 0.9 * args.duration
    for kind, count in (
        ("kill", args.kills),
        ("stop", args.stops),
        ("lock", args.locks),
        ("terminate", args.terminates),
        ("deploy", args.deploys),  # last: the other kinds' draws stay as they were
    ):
        for _ in range(count):
            seconds = 0.0
            if kind == "stop":
                seconds = args.worker_timeout + rng.uniform(0.5, 1.5)
            elif kind == "lock":
                seconds = args.lock_seconds
            out.append(Fault(rng.uniform(lo, hi), kind, rng.randrange(args.workers), seconds))
    return sorted(out)


def make_jobs(args: argparse.Namespace, rng: random.Random) -> list[tuple[jl.JobType[Work], Work]]:
    types = (CAPPED, MID, BULK)
    weights = (0.2, 0.3, 0.5)
    out: list[tuple[jl.JobType[Work], Work]] = []
    for n in range(args.jobs):
        job_type = rng.choices(types, weights)[0]
        out.append((job_type, Work(n, round(rng.uniform(2, 8), 2), rng.random() < args.flaky)))
    return out


# -- the harness ----------------------------------------------------------------------


@dataclass
class Worker:
    slot: int
    proc: subprocess.Popen[bytes]
    started_ns: int
    log: str
    stopped_until: float | None = None  # monotonic s of the scheduled SIGCONT
    deployed: bool = False  # sent SIGTERM (`--deploys`): a clean stop, then a replacement

    @property
    def pid(self) -> int:
        return self.proc.pid


class Harness:
    def __init__(self, args: argparse.Namespace, workdir: str, backend: Backend) -> None:
        self.args = args
        self.dir = workdir
        self.backend = backend
        self.slots: list[Worker | None] = [None] * args.workers
        self.restart_at: dict[int, float] = {}
        self.every: list[Worker] = []  # every worker process ever started
        self.lockers: list[subprocess.Popen[bytes]] = []
        self.kills: dict[int, int] = {}  # pid -> kill time (monotonic ns)
        self.stops: dict[int, list[list[int]]] = defaultdict(list)  # pid -> [[stop, cont]]
        self.exited: dict[int, int] = {}  # pid -> when it was seen gone (ns)
        self.done_faults: Counter[str] = Counter()
        self.skipped_faults: Counter[str] = Counter()
        self.terminated = 0
        self.lock_results: list[dict[str, Any]] = []
        self.peak_table: Counter[str] = Counter()
        self.samples = 0
        self.sample_errors = 0
        self.enqueue_errors = 0
        self.enqueued = 0
        self.workflow_errors = 0
        self.workflows_enqueued = 0
        self.halt = threading.Event()
        self.deferred = 0  # lock faults put off while another holder was active
        self.final_exits: list[int] = []  # exit codes of the last workers' clean stop
        self.t0 = time.monotonic()
        self.events: list[list[Any]] = []  # [s after t0, kind, pid or detail]
        # Worker logs stamp records with the wall clock, the handlers with the monotonic
        # one (the same in every process); this maps one onto the other.
        self.wall_minus_mono = time.time() - time.monotonic()

    def event(self, kind: str, detail: Any) -> None:
        self.events.append([round(time.monotonic() - self.t0, 2), kind, detail])

    # -- processes --

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        src = os.path.join(os.path.dirname(HERE), "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        return env

    def worker_config(self) -> dict[str, Any]:
        a = self.args
        return {
            "db": self.backend.url,
            "dir": self.dir,
            "global_cap": a.global_cap,
            "capped_cap": a.capped_cap,
            "mid_cap": a.mid_cap,
            "startup_delay": a.startup_delay,
            "heartbeat": a.heartbeat,
            "worker_timeout": a.worker_timeout,
            "leader_ttl": a.leader_ttl,
            "max_attempts": a.max_attempts,
            "ledger": a.ledger,
            "schedule_every": a.schedule_every,
            "workflows": a.workflows,
        }

    def start_worker(self, slot: int) -> Worker:
        log = os.path.join(self.dir, f"worker.{slot}.{len(self.every)}.log")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker"]
        cmd += [json.dumps(self.worker_config())]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, env=self.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        w = Worker(slot, proc, time.monotonic_ns(), log)
        self.event("start", proc.pid)
        self.slots[slot] = w
        self.every.append(w)
        return w

    def wait_ready(self, workers: list[Worker], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for w in workers:
            while not self.is_ready(w):
                if w.proc.poll() is not None:
                    raise RuntimeError(f"worker exited with {w.proc.returncode}: {tail(w.log)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {w.pid} did not start: {tail(w.log)}")
                time.sleep(0.02)

    def signal_group(self, w: Worker, sig: int) -> None:
        try:
            os.killpg(w.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self, w: Worker) -> None:
        self.signal_group(w, signal.SIGKILL)
        w.proc.wait(10)
        now = time.monotonic_ns()
        self.kills[w.pid] = now
        self.event("kill", w.pid)
        self.exited[w.pid] = now
        self.slots[w.slot] = None
        self.restart_at[w.slot] = time.monotonic() + self.args.restart_delay

    def stop(self, w: Worker, seconds: float) -> None:
        self.signal_group(w, signal.SIGSTOP)
        self.stops[w.pid].append([time.monotonic_ns(), 0])
        self.event("stop", w.pid)
        w.stopped_until = time.monotonic() + seconds

    def cont(self, w: Worker) -> None:
        self.signal_group(w, signal.SIGCONT)
        self.stops[w.pid][-1][1] = time.monotonic_ns()
        self.event("cont", w.pid)
        w.stopped_until = None

    def hold_lock(self, seconds: float) -> None:
        cmd = [sys.executable, os.path.abspath(__file__), "--hold-lock", self.backend.name]
        cmd += [self.backend.lock_target, self.backend.schema or "-", str(seconds)]
        self.event("lock", seconds)
        self.lockers.append(
            subprocess.Popen(
                cmd,
                env=self.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def reap_lockers(self, wait: bool = False) -> None:
        for p in list(self.lockers):
            if wait:
                try:
                    p.wait(self.args.lock_seconds + 10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)
            if p.poll() is None:
                continue
            self.lockers.remove(p)
            out = p.stdout.read().decode() if p.stdout else ""
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if p.returncode == 0 and lines:
                self.lock_results.append(json.loads(lines[-1]))
            else:
                self.lock_results.append({"error": out.strip()[-300:] or p.returncode})

    def alive(self) -> list[Worker]:
        return [w for w in self.slots if w is not None and w.proc.poll() is None]

    def check_exits(self) -> None:
        """A worker that died by itself is a finding; its slot is refilled like a kill's.
        A deployed one (SIGTERM) must have stopped cleanly: exit status 0."""
        for w in list(self.slots):
            if w is not None and w.proc.poll() is not None:
                self.exited[w.pid] = time.monotonic_ns()
                kind = "deployed" if w.deployed else "exited"
                self.event(kind, [w.pid, w.proc.returncode])
                self.slots[w.slot] = None
                self.restart_at[w.slot] = time.monotonic() + self.args.restart_delay

    def is_ready(self, w: Worker) -> bool:
        return os.path.exists(os.path.join(self.dir, f"ready.{w.pid}"))

    def deploy(self, w: Worker) -> None:
        """A deploy's stop: SIGTERM, the worker's clean shutdown (`shutdown_grace`), and a
        replacement once it has exited (`check_exits`)."""
        self.signal_group(w, signal.SIGTERM)
        w.deployed = True
        self.event("deploy", w.pid)

    def apply(self, fault: Fault) -> None:
        if fault.kind == "lock":
            self.hold_lock(fault.seconds)
        elif fault.kind == "terminate":
            n = self.backend.terminate()
            self.terminated += n
            self.event("terminate", n)
        else:
            # The scheduled slot, or the next one that can take the fault; at least one
            # worker is always left running (neither frozen nor dead).
            order = [(fault.slot + i) % len(self.slots) for i in range(len(self.slots))]
            running = [w for w in self.alive() if w.stopped_until is None and not w.deployed]
            # A deploy stops a worker that is up (its manager started, `ready.<pid>`): one
            # still importing has no handler for SIGTERM yet and dies of it, holding nothing.
            targets = [w for w in running if fault.kind != "deploy" or self.is_ready(w)]
            victim = next((self.slots[i] for i in order if self.slots[i] in targets), None)
            if victim is None or len(running) < 2:
                self.skipped_faults[fault.kind] += 1
                return
            if fault.kind == "kill":
                self.kill(victim)
            elif fault.kind == "deploy":
                self.deploy(victim)
            else:
                self.stop(victim, fault.seconds)
        self.done_faults[fault.kind] += 1

    # -- threads: producer and sampler --

    def produce(self, jobs: list[tuple[jl.JobType[Work], Work]], until: float) -> None:
        """Enqueue the jobs evenly until `until` (monotonic s), in small batches."""
        producer = jl.JobManager(self.backend.url, startup_delay=0)
        start = time.monotonic()
        span = max(until - start, 0.001)
        try:
            while self.enqueued < len(jobs) and not self.halt.is_set():
                due = min(len(jobs), int(len(jobs) * (time.monotonic() - start) / span) + 1)
                batch = jobs[self.enqueued : due]
                by_type: dict[str, list[Work]] = defaultdict(list)
                types = {}
                for job_type, work in batch:
                    by_type[job_type.name].append(work)
                    types[job_type.name] = job_type
                try:
                    for name, works in by_type.items():
                        specs = [jl.JobSpec(w, idempotency_key=f"chaos:{w.n}") for w in works]
                        producer.enqueue_many(types[name], specs, unique_for=UNIQUE_FOR)
                except Exception:
                    self.enqueue_errors += 1  # the same batch again (keys make it safe)
                else:
                    self.enqueued = due
                time.sleep(0.05)
        finally:
            asyncio.run(producer.stop())

    def sample(self) -> None:
        sql = (
            f"SELECT queue, count(*) FROM {self.backend.jobs_table} "
            "WHERE status = 'running' GROUP BY queue"
        )
        conn: Any = None
        try:
            while not self.halt.is_set():
                try:
                    if conn is None:
                        conn = self.backend.connect()
                    rows = self.backend.query(conn, sql)
                except Exception:
                    self.sample_errors += 1
                    if conn is not None:
                        try:
                            conn.close()
                        except Exception:
                            pass
                    conn = None
                else:
                    self.samples += 1
                    total = 0
                    for queue, n in rows:
                        self.peak_table[str(queue)] = max(self.peak_table[str(queue)], int(n))
                        total += int(n)
                    self.peak_table["*"] = max(self.peak_table["*"], total)
                self.halt.wait(self.args.sample_every)
        finally:
            if conn is not None:
                conn.close()

    # -- reading the table --

    def read(self, sql: str) -> list[tuple[Any, ...]]:
        """One of the verdict's reads, on a connection of its own (30 s on PostgreSQL,
        where the sampler's are held to 500 ms)."""
        conn = self.backend.connect()
        try:
            if self.backend.name == "postgres":
                conn.execute("SET statement_timeout = '30s'")
            return self.backend.query(conn, sql)
        finally:
            conn.close()

    def rows(self) -> list[tuple[str, str, str, int, str | None, int]]:
        """(id, status, queue, attempt, worker_id, n) for every chaos job."""
        raw = self.read(
            "SELECT id, status, queue, attempt, worker_id, payload FROM "
            f"{self.backend.jobs_table} WHERE type NOT IN {OTHER_TYPES}"
        )
        out: list[tuple[str, str, str, int, str | None, int]] = []
        for job_id, status, queue, attempt, worker_id, payload in raw:
            data = json.loads(payload) if isinstance(payload, str) else payload
            out.append((str(job_id), str(status), str(queue), int(attempt), worker_id, data["n"]))
        return out

    def steps(self) -> list[tuple[str, str, int, str | None]]:
        """(id, status, n, workflow id) of every workflow step (`--workflows`)."""
        raw = self.read(
            f"SELECT id, status, payload, workflow_id FROM {self.backend.jobs_table} "
            f"WHERE type = '{STEP.name}'"
        )
        out = []
        for job_id, status, payload, wf in raw:
            data = json.loads(payload) if isinstance(payload, str) else payload
            out.append((str(job_id), str(status), int(data["n"]), None if wf is None else str(wf)))
        return out

    def fires(self) -> list[str]:
        """The idempotency key of every job the schedule wrote (`--schedule-every`)."""
        sql = f"SELECT idempotency_key FROM {self.backend.jobs_table} WHERE type = '{TICK.name}'"
        return [str(k) for (k,) in self.read(sql)]

    def worker_pids(self) -> dict[str, int]:
        conn = self.backend.connect()
        try:
            return {
                str(i): int(p)
                for i, p in self.backend.query(conn, f"SELECT id, pid FROM {self._workers()}")
            }
        finally:
            conn.close()

    def _workers(self) -> str:
        return f'"{self.backend.schema}".workers' if self.backend.schema else "workers"

    def unfinished(self, total: int) -> int:
        """Jobs not yet terminal or not yet written, workflow steps included."""
        conn = self.backend.connect()
        try:
            sql = (
                f"SELECT count(*), sum(CASE WHEN status IN {TERMINAL!r} THEN 0 ELSE 1 END) "
                f"FROM {self.backend.jobs_table} WHERE type NOT IN {OTHER_TYPES}"
            )
            rows = self.backend.query(conn, sql)
            steps = self.backend.query(
                conn,
                f"SELECT count(*), sum(CASE WHEN status IN {TERMINAL!r} THEN 0 ELSE 1 END) "
                f"FROM {self.backend.jobs_table} WHERE type = '{STEP.name}'",
            )
        except Exception:
            return -1
        finally:
            conn.close()
        count, open_ = rows[0]
        step_count, steps_open = steps[0]
        # More rows than jobs (a job enqueued twice) is for the verdict to report; the
        # drain is over once every job's row is terminal.
        left = int(open_ or 0) + max(total - int(count), 0)
        steps_left = int(steps_open or 0) + max(5 * int(self.args.workflows) - int(step_count), 0)
        return left + steps_left

    def produce_workflows(self, count: int, until: float, rng: random.Random) -> None:
        """Enqueue `count` diamond workflows evenly until `until` (monotonic s). After a
        failed enqueue the workflow is looked up by name before it is sent again: a
        commit may have landed though the call raised (PostgreSQL), and a workflow's
        steps carry no idempotency key that would dedupe a second copy."""
        producer = jl.JobManager(self.backend.url, startup_delay=0)
        start = time.monotonic()
        span = max(until - start, 0.001)
        k = 0
        try:
            while k < count and not self.halt.is_set():
                due = start + span * k / count
                if time.monotonic() < due:
                    time.sleep(min(0.05, due - time.monotonic()))
                    continue
                base = STEP_BASE + 10 * k
                works = [
                    Work(base + i, round(rng.uniform(2, 8), 2), rng.random() < self.args.flaky)
                    for i in range(5)
                ]
                name = f"chaos-{k}"
                try:
                    wf = producer.workflow(name)
                    a = wf.add(STEP, works[0], name="a")
                    bs = [wf.add(STEP, works[i], name=f"b{i}", after=[a]) for i in (1, 2, 3)]
                    wf.add(STEP, works[4], name="c", after=bs)
                    wf.enqueue()
                except Exception:
                    self.workflow_errors += 1
                    if not self.workflow_written(name):
                        time.sleep(0.05)
                        continue  # not written: the same workflow again
                self.workflows_enqueued = k = k + 1
        finally:
            asyncio.run(producer.stop())

    def workflow_written(self, name: str) -> bool:
        """Whether a workflow of this name is in the database; waits until it can tell."""
        table = f'"{self.backend.schema}".workflows' if self.backend.schema else "workflows"
        while not self.halt.is_set():
            conn: Any = None
            try:
                conn = self.backend.connect()
                rows = self.backend.query(
                    conn, f"SELECT count(*) FROM {table} WHERE name = '{name}'"
                )
                return int(rows[0][0]) > 0
            except Exception:
                time.sleep(0.1)
            finally:
                if conn is not None:
                    conn.close()
        return False

    def cleanup(self) -> None:
        """Every process this run started, whatever state it is in, is gone afterwards."""
        for w in self.every:
            if w.proc.poll() is None:
                self.signal_group(w, signal.SIGCONT)
                self.signal_group(w, signal.SIGKILL)
                w.proc.wait(10)
        for p in self.lockers:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")[-n:]
    except FileNotFoundError:
        return ""


# -- what the handlers recorded -------------------------------------------------------


@dataclass
class Execution:
    job_id: str
    queue: str
    attempt: int
    pid: int
    start: int
    end: int | None = None
    outcome: str = "?"  # end | raise | abort | ? (no record: killed, or still running)
    zombie: bool = False  # its process was frozen (SIGSTOP) while it ran
    shadowed: bool = False  # see `shadows`


def read_executions(workdir: str) -> list[Execution]:
    out: list[Execution] = []
    open_: dict[tuple[int, str, int], Execution] = {}
    ended: dict[tuple[int, str, int], Execution] = {}
    for name in sorted(os.listdir(workdir)):
        if not name.startswith("exec."):
            continue
        with open(os.path.join(workdir, name)) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 7:  # a line cut by kill -9 (one write: not expected)
                    continue
                job_id, _n, queue, attempt, pid, what, ns = parts
                key = (int(pid), job_id, int(attempt))
                if what == "start":
                    ex = Execution(job_id, queue, int(attempt), int(pid), int(ns))
                    open_[key] = ex
                    out.append(ex)
                elif key in open_:
                    ex = open_.pop(key)
                    ex.end, ex.outcome = int(ns), what
                    ended[key] = ex
                elif what == "lost" and key in ended:
                    ended[key].outcome = what  # its commit found the claim gone
    return out


def shadows(h: Harness, logs: Logs) -> dict[int, list[tuple[int, int]]]:
    """Per pid, the spans in which the database no longer counted that worker as alive
    while it still ran (or would run) handlers: from a SIGSTOP until it found itself
    declared dead after the SIGCONT (claims it made before the freeze start their
    handlers only then, after the rows were rescued and claimed again elsewhere), and a
    stale heartbeat of an unfrozen worker (the `worker_timeout` + lock before it noticed)."""
    grace = notice_grace(h)
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pid, windows in h.stops.items():
        for stop, cont in windows:
            cont = cont or stop
            noticed = [t for t in logs.declared_dead.get(pid, []) if cont <= t <= cont + grace]
            out[pid].append((stop, min(noticed) if noticed else cont + grace))
    stale = int((h.args.worker_timeout + h.args.lock_seconds) * 1e9)
    for pid, times in logs.declared_dead.items():
        for t in times:
            if not any(a <= t <= b for a, b in out.get(pid, [])):
                out[pid].append((t - stale, t))
    return dict(out)


def peaks(
    executions: list[Execution], h: Harness, horizon: int, shadow: dict[int, list[tuple[int, int]]]
) -> tuple[dict[str, int], dict[str, int], int]:
    """Max concurrently running handlers per queue ('*' = all), from the handlers' own
    records: (all executions, those outside a shadow, shadowed executions).

    An execution without an end record ends when its process was killed or seen gone;
    one whose process was frozen while it ran counts until the freeze (frozen code does
    not run), and is marked a zombie. The second figure leaves out executions that
    overlap a shadow of their process (see `shadows`): the table had given their rows
    to another worker, so they are at-least-once re-runs, not claims under the cap."""
    events: list[tuple[int, int, str, bool]] = []
    shadowed = 0
    for ex in executions:
        end = ex.end
        if end is None:
            end = h.kills.get(ex.pid) or h.exited.get(ex.pid) or horizon
        for stop, _cont in h.stops.get(ex.pid, []):
            if ex.start < stop < end:
                ex.zombie = True
                end = stop
        ex.shadowed = any(a <= end and ex.start <= b for a, b in shadow.get(ex.pid, []))
        shadowed += ex.shadowed
        events.append((ex.start, 1, ex.queue, ex.shadowed))
        events.append((end, -1, ex.queue, ex.shadowed))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
    now: Counter[str] = Counter()
    top: Counter[str] = Counter()
    now_live: Counter[str] = Counter()
    top_live: Counter[str] = Counter()
    for _, delta, queue, in_shadow in events:
        for q in (queue, "*"):
            now[q] += delta
            top[q] = max(top[q], now[q])
            if not in_shadow:
                now_live[q] += delta
                top_live[q] = max(top_live[q], now_live[q])
    return dict(top), dict(top_live), shadowed


@dataclass
class Logs:
    """What the workers logged (WARNING and above), read from their log files."""

    declared_dead: dict[int, list[int]]  # pid -> when it found itself recovered as dead
    finalize_failed: int  # rows of "finalize of N job(s) failed" errors
    kinds: Counter[str]  # "<logger> <LEVEL> <first words>" -> count
    tracebacks: int


def read_logs(h: Harness) -> Logs:
    dead: dict[int, list[int]] = defaultdict(list)
    failed = 0
    kinds: Counter[str] = Counter()
    tracebacks = 0
    for w in h.every:
        text = tail(w.log, 10_000_000)
        tracebacks += text.count("Traceback")
        for line in text.splitlines():
            parts = line.split(" ", 4)
            if len(parts) < 5 or parts[3] not in ("WARNING", "ERROR", "CRITICAL"):
                continue
            try:
                created, pid = float(parts[0]), int(parts[1])
            except ValueError:
                continue
            message = parts[4]
            kinds[" ".join([parts[2], parts[3], *message.split()[:4]])] += 1
            # Either notice: the heartbeat's, or a claim's that found no worker row.
            if "was recovered as dead" in message or "has no worker row" in message:
                dead[pid].append(int((created - h.wall_minus_mono) * 1e9))
            if message.startswith("finalize of "):
                failed += int(message.split()[2])
    return Logs(dict(dead), failed, kinds, tracebacks)


def notice_grace(h: Harness) -> int:
    """Nanoseconds after its SIGCONT within which a frozen worker finds itself declared
    dead: two heartbeats and a second, plus a lock hold, which may block its loop's reads
    past the SIGCONT (on PostgreSQL an ACCESS EXCLUSIVE lock blocks even reads). Without
    the hold, a PostgreSQL run of seed 1 counted a worker as a live one declared dead: it
    noticed 2.2 s after its SIGCONT, a lock held over the first 1.6 s of those."""
    return int((2 * h.args.heartbeat + 1.0 + h.args.lock_seconds) * 1e9)


def unfrozen_deaths(h: Harness, logs: Logs) -> int:
    """How often a worker found itself declared dead though it had not just been frozen
    (a stale heartbeat of a live, running process)."""
    grace = notice_grace(h)
    n = 0
    for pid, times in logs.declared_dead.items():
        windows = h.stops.get(pid, [])
        for t in times:
            if not any(stop <= t <= (cont or t) + grace for stop, cont in windows):
                n += 1
    return n


def faulted(ex: Execution, h: Harness, logs: Logs) -> bool:
    """Whether a kill or a stop of its process, or its process being declared dead,
    could explain that its completion was not the one that counted."""
    end = ex.end if ex.end is not None else ex.start
    window = end + int(FAULT_WINDOW * 1e9)
    kill = h.kills.get(ex.pid)
    if kill is not None and ex.start <= kill <= window:
        return True
    if any(ex.start <= t <= window for t in logs.declared_dead.get(ex.pid, [])):
        return True
    # Continued shortly before it started: a claim made just before the freeze, whose
    # handler starts only after SIGCONT, when its row has been rescued and claimed again.
    since = ex.start - int(FAULT_WINDOW * 1e9)
    stops = h.stops.get(ex.pid, [])
    return (
        ex.zombie
        or any(ex.start <= stop <= window for stop, _ in stops)
        or any(cont and since <= cont <= ex.start for _, cont in stops)
    )


# -- one run --------------------------------------------------------------------------


def run(args: argparse.Namespace, backend: Backend, workdir: str) -> dict[str, Any]:
    rng = random.Random(args.seed)
    faults = schedule(args, rng)
    jobs = make_jobs(args, rng)
    h = Harness(args, workdir, backend)
    wall = time.monotonic()
    threads: list[threading.Thread] = []
    try:
        backend.setup()
        # The schema exists before the lock holders and the sampler need it.
        first_manager = jl.JobManager(backend.url, startup_delay=0)
        if args.schedule_every:

            @first_manager.handler(TICK, recovery="retry")
            async def unused(ctx: jl.JobContext[Work]) -> None:
                raise AssertionError("this manager never starts")

            # Created here, before any worker, so its grid starts with the run. Under
            # AllMissed every point of the grid gets its job: a point a leaderless gap,
            # a failed write or a late callback skipped is made up.
            first_manager.ensure_job_schedule(
                TICK,
                Work(-1, 2.0),
                trigger=jl.Interval(args.schedule_every),
                name=TICK_NAME,
                catch_up=jl.AllMissed(max=1000),
            )
        asyncio.run(first_manager.stop())
        if args.ledger:
            conn = backend.connect()
            try:
                conn.execute("CREATE TABLE ledger (job_id TEXT, n INTEGER, pid INTEGER)")
            finally:
                conn.close()
        first = [h.start_worker(i) for i in range(args.workers)]
        h.wait_ready(first, 60)
        t0 = h.t0 = time.monotonic()
        produce_until = t0 + 0.8 * args.duration
        threads = [
            threading.Thread(target=h.produce, args=(jobs, produce_until), daemon=True),
            threading.Thread(target=h.sample, daemon=True),
        ]
        if args.workflows:
            flow_rng = random.Random(args.seed + 1)  # the fault schedule stays the seed's
            threads.append(
                threading.Thread(
                    target=h.produce_workflows,
                    args=(args.workflows, produce_until, flow_rng),
                    daemon=True,
                )
            )
        for t in threads:
            t.start()
        pending_faults = list(faults)
        while time.monotonic() - t0 < args.duration:
            now = time.monotonic()
            while pending_faults and pending_faults[0].at <= now - t0:
                fault = pending_faults.pop(0)
                if fault.kind == "lock" and h.lockers:
                    # One lock holder at a time: two back to back would hold the lock
                    # longer than `worker_timeout`, and live workers would look dead.
                    fault.at = now - t0 + LOCK_GAP
                    pending_faults = sorted([*pending_faults, fault])
                    h.deferred += 1
                    break
                h.apply(fault)
            for w in h.alive():
                if w.stopped_until is not None and w.stopped_until <= now:
                    h.cont(w)
            h.check_exits()
            for slot, at in list(h.restart_at.items()):
                if at <= now and h.slots[slot] is None:
                    del h.restart_at[slot]
                    h.start_worker(slot)
            h.reap_lockers()
            time.sleep(0.02)
        chaos_seconds = time.monotonic() - t0
        # The faults end: thaw, refill, and let every job finish.
        for w in h.alive():
            if w.stopped_until is not None:
                h.cont(w)
        h.reap_lockers(wait=True)
        h.check_exits()
        for slot in range(args.workers):
            if h.slots[slot] is None:
                h.restart_at.pop(slot, None)
                h.start_worker(slot)
        threads[0].join(args.drain_timeout)
        if args.workflows:
            threads[2].join(args.drain_timeout)
        drain_start = time.monotonic()
        left = h.unfinished(args.jobs)
        while left != 0 and time.monotonic() - drain_start < args.drain_timeout:
            time.sleep(0.1)
            left = h.unfinished(args.jobs)
        drain_seconds = time.monotonic() - drain_start
        h.halt.set()
        for t in threads:
            t.join(10)
        horizon = time.monotonic_ns()
        rows = h.rows()
        fires = h.fires() if args.schedule_every else None
        steps = h.steps() if args.workflows else None
        read_at_ms = int(time.time() * 1000)
        owners = h.worker_pids()
        live_pids = {w.pid for w in h.alive()}
        # Stop the workers (a clean stop: SIGTERM, up to 10 s each).
        last = h.alive()
        for w in last:
            h.signal_group(w, signal.SIGTERM)
        for w in last:
            try:
                h.final_exits.append(w.proc.wait(15))
            except subprocess.TimeoutExpired:
                h.signal_group(w, signal.SIGKILL)
                w.proc.wait(10)
                h.final_exits.append(-9)
        stuck_rows = [r for r in rows if r[1] == "running"]
        recheck: dict[str, Any] | None = None
        if stuck_rows and args.recheck > 0:
            recheck = recheck_stuck(h, {r[0] for r in stuck_rows}, args.recheck)
    finally:
        h.halt.set()
        h.cleanup()
    result = verdict(
        args, h, faults, rows, owners, live_pids, horizon, chaos_seconds, drain_seconds,
        time.monotonic() - wall, recheck,
    )  # fmt: skip
    if fires is not None:
        result["schedule"] = schedule_check(h, fires, read_at_ms)
        result["ok"] = result["ok"] and result["schedule"]["ok"]
    if steps is not None:
        result["workflows"] = workflow_check(h, steps)
        result["ok"] = result["ok"] and result["workflows"]["ok"]
    return result


def workflow_check(h: Harness, steps: list[tuple[str, str, int, str | None]]) -> dict[str, Any]:
    """The diamonds after the drain: each written once, every step `completed`, and no
    step started before one of its upstream steps had completed (from the handlers'
    records: a step is released by the commit of its upstream's finalize, which comes
    after that execution's "end" record, so a start before every upstream "end" is a
    step run early)."""
    by_wf: dict[str, set[str]] = defaultdict(set)
    ids: dict[int, list[str]] = defaultdict(list)
    statuses: Counter[str] = Counter()
    for job_id, status, n, wf in steps:
        by_wf[str(wf)].add(job_id)
        ids[n].append(job_id)
        statuses[status] += 1
    first_start: dict[str, int] = {}
    first_end: dict[str, int] = {}
    for ex in read_executions(h.dir):
        if ex.job_id in first_start:
            first_start[ex.job_id] = min(first_start[ex.job_id], ex.start)
        else:
            first_start[ex.job_id] = ex.start
        if ex.outcome == "end" and ex.end is not None:
            first_end[ex.job_id] = min(first_end.get(ex.job_id, ex.end), ex.end)
    early: list[str] = []
    for k in range(h.workflows_enqueued):
        base = STEP_BASE + 10 * k
        for step, ups in UPSTREAM.items():
            for job_id in ids.get(base + step, []):
                started = first_start.get(job_id)
                for up in ups:
                    ends = [first_end[u] for u in ids.get(base + up, []) if u in first_end]
                    if started is not None and (not ends or started < min(ends)):
                        early.append(job_id)
    doubled = sum(
        1 for k in range(h.workflows_enqueued) if len(ids.get(STEP_BASE + 10 * k, [])) > 1
    )
    missing = sum(
        1 for k in range(h.args.workflows) for i in range(5) if not ids.get(STEP_BASE + 10 * k + i)
    )
    not_completed = sum(c for st, c in statuses.items() if st != "completed")
    return {
        "workflows": h.args.workflows,
        "written": len(by_wf),
        "enqueue_errors": h.workflow_errors,
        "steps": len(steps),
        "statuses": dict(statuses),
        "doubled": doubled,
        "missing_steps": missing,
        "not_completed": not_completed,
        "started_early": len(early),
        "started_early_ids": sorted(set(early))[:10],
        "ok": not doubled and not missing and not not_completed and not early,
    }


def schedule_check(h: Harness, keys: list[str], read_at_ms: int) -> dict[str, Any]:
    """The schedule's fires against its grid: no point written twice (the compare-and-set
    on `next_run`, through kills, freezes, lock holds and leadership moves) and none
    missing (under `AllMissed` a point whose fire was never written, a write failed or
    a callback run late, is made up by the next fire or by a takeover's catch-up:
    docs/design/schedules.md, "Fires"), and still firing when the run ends (some leader
    arms it)."""
    period = round(h.args.schedule_every * 1000)
    count = Counter(keys)
    doubled = sorted(k for k, c in count.items() if c > 1)
    points = sorted({int(k.rsplit(":", 1)[1]) for k in count})
    missing: list[int] = []
    for a, b in itertools.pairwise(points):
        missing.extend(range(a + period, b, period))
    # The newest fire, read with the workers alive, lies within a period of the read,
    # give or take a lock hold and its retries and a leadership handed over.
    args = h.args
    slack = period + int((args.lock_seconds + 5.0 + args.leader_ttl + args.worker_timeout) * 1000)
    stalled = not points or points[-1] < read_at_ms - slack
    t0_ms = (h.t0 + h.wall_minus_mono) * 1000
    return {
        "every_s": h.args.schedule_every,
        "fires": len(keys),
        # Seconds after the faults' clock started (the workers were ready then).
        "first_fire_s": round((points[0] - t0_ms) / 1000, 2) if points else None,
        "last_fire_s": round((points[-1] - t0_ms) / 1000, 2) if points else None,
        "doubled": len(doubled),
        "doubled_keys": doubled[:10],
        "missing": len(missing),
        "missing_s": [round((t - t0_ms) / 1000, 2) for t in missing[:10]],
        "stalled": stalled,
        "ok": not doubled and not missing and not stalled,
    }


def recheck_stuck(h: Harness, ids: set[str], seconds: float) -> dict[str, Any]:
    """With every worker stopped, one fresh worker: does a restart free the stuck rows?"""
    w = h.start_worker(0)
    try:
        h.wait_ready([w], 60)
        deadline = time.monotonic() + seconds
        left = ids
        while time.monotonic() < deadline:
            left = {r[0] for r in h.rows() if r[0] in ids and r[1] not in TERMINAL}
            if not left:
                break
            time.sleep(0.2)
        h.signal_group(w, signal.SIGTERM)
        w.proc.wait(15)
    finally:
        if w.proc.poll() is None:
            h.signal_group(w, signal.SIGKILL)
            w.proc.wait(10)
    return {"stuck": len(ids), "finished_after_restart": len(ids) - len(left)}


def verdict(
    args: argparse.Namespace,
    h: Harness,
    faults: list[Fault],
    rows: list[tuple[str, str, str, int, str | None, int]],
    owners: dict[str, int],
    live_pids: set[int],
    horizon: int,
    chaos_seconds: float,
    drain_seconds: float,
    wall: float,
    recheck: dict[str, Any] | None,
) -> dict[str, Any]:
    statuses = Counter(r[1] for r in rows)
    by_n: dict[int, list[str]] = defaultdict(list)
    for r in rows:
        by_n[r[5]].append(r[1])
    missing = [n for n in range(args.jobs) if n not in by_n]
    double = sum(1 for v in by_n.values() if len(v) > 1)
    lost = len(missing) + statuses["pending"] + statuses["delayed"]
    stuck_rows = [r for r in rows if r[1] == "running"]
    stuck_live = sum(1 for r in stuck_rows if owners.get(str(r[4])) in live_pids)

    executions = read_executions(h.dir)
    logs = read_logs(h)
    handler_peak, live_peak, shadowed = peaks(executions, h, horizon, shadows(h, logs))
    completions: dict[str, list[Execution]] = defaultdict(list)
    for ex in executions:
        if ex.outcome == "end":
            completions[ex.job_id].append(ex)
    dups = {j: c for j, c in completions.items() if len(c) > 1}
    unexplained = sorted(j for j, c in dups.items() if sum(not faulted(e, h, logs) for e in c) >= 2)
    never_ran = sum(1 for r in rows if r[1] == "completed" and r[0] not in completions)

    ledger = ledger_check(h, rows, executions) if args.ledger else None

    caps = {CAPPED.name: args.capped_cap, MID.name: args.mid_cap, "*": args.global_cap}
    table_peak = dict(h.peak_table)
    exceeded = sorted(
        f"{q} {src}={peak[q]}>{cap}"
        for q, cap in caps.items()
        for src, peak in (("table", table_peak), ("handlers", live_peak))
        if peak.get(q, 0) > cap
    )
    result: dict[str, Any] = {
        "bench": "chaos",
        "backend": h.backend.name,
        "seed": args.seed,
        "workers": args.workers,
        "jobs": args.jobs,
        "enqueued": h.enqueued,
        "kills": h.done_faults["kill"],
        "deploys": h.done_faults["deploy"],
        # A deployed worker's exit status: 0 is a clean stop.
        "deploy_exits": [e[2] for e in h.events if e[1] == "deployed"],
        "stops": h.done_faults["stop"],
        "lock_holds": h.done_faults["lock"],
        "terminates": h.done_faults["terminate"],
        "terminated_connections": h.terminated,
        "skipped_faults": dict(h.skipped_faults),
        "worker_processes": len(h.every),
        "duplicates": len(dups),
        "dup_unexplained": len(unexplained),
        "dup_unexplained_ids": unexplained[:10],
        "lost": lost,
        "missing": len(missing),
        "double_enqueued": double,
        "stuck": len(stuck_rows),
        "stuck_live_owner": stuck_live,
        "stuck_ids": [r[0] for r in stuck_rows][:10],
        "recheck": recheck,
        "completed": statuses["completed"],
        "failed": statuses["failed"],
        "cancelled": statuses["cancelled"],
        "completed_never_ran": never_ran,
        "executions": len(executions),
        "zombie_executions": sum(ex.zombie for ex in executions),
        "shadowed_executions": shadowed,
        "caps": caps,
        "max_running_table": {q: table_peak.get(q, 0) for q in caps},
        "max_running_handlers": {q: live_peak.get(q, 0) for q in caps},
        "max_running_handlers_all": {q: handler_peak.get(q, 0) for q in caps},
        "max_running_bulk": {
            "table": table_peak.get(BULK.name, 0),
            "handlers": handler_peak.get(BULK.name, 0),
        },
        "cap_exceeded": exceeded,
        "samples": h.samples,
        "sample_errors": h.sample_errors,
        "enqueue_errors": h.enqueue_errors,
        "lock_results": h.lock_results,
        "declared_dead_while_alive": sum(len(v) for v in logs.declared_dead.values()),
        "declared_dead_unfrozen": unfrozen_deaths(h, logs),
        "deferred_locks": h.deferred,
        "finalize_failed_rows": logs.finalize_failed,
        "worker_log_kinds": dict(logs.kinds.most_common(25)),
        "worker_tracebacks": logs.tracebacks,
        "final_exit_codes": h.final_exits,
        # Workers that ended by themselves during the run (not killed, not the final
        # SIGTERM): a worker must ride out every fault here.
        "worker_exits": [e[2] for e in h.events if e[1] == "exited"],
        "events": h.events,
        "chaos_seconds": round(chaos_seconds, 2),
        "drain_seconds": round(drain_seconds, 2),
        "wall_seconds": round(wall, 2),
        "options": {
            k: getattr(args, k)
            for k in (
                "duration",
                "drain_timeout",
                "worker_timeout",
                "heartbeat",
                "leader_ttl",
                "startup_delay",
                "lock_seconds",
                "restart_delay",
                "flaky",
                "max_attempts",
            )
        },
        "faults": [[round(f.at, 2), f.kind, f.slot, round(f.seconds, 2)] for f in faults],
        "machine": machine(),
        "ledger": ledger,
        "ok": lost == 0
        and double == 0
        and not any(e[1] == "exited" for e in h.events)
        and all(e[2][1] == 0 for e in h.events if e[1] == "deployed")
        and not stuck_rows
        and not exceeded
        and (ledger is None or (not ledger["duplicates"] and not ledger["mismatch"])),
    }
    return result


def ledger_check(
    h: Harness, rows: list[tuple[str, str, str, int, str | None, int]], executions: list[Any]
) -> dict[str, Any]:
    """The ledger against the table: one row per completed job, none for another."""
    entries = h.read("SELECT job_id, n FROM ledger")
    per_job = Counter(str(job_id) for job_id, _ in entries)
    completed = {r[0] for r in rows if r[1] == "completed"}
    if h.args.workflows:  # their steps complete through the ledger too
        completed |= {job_id for job_id, status, _, _ in h.steps() if status == "completed"}
    return {
        "rows": len(entries),
        "completed": len(completed),
        "duplicates": sorted(j for j, c in per_job.items() if c > 1)[:10],
        "mismatch": sorted(set(per_job) ^ completed)[:10],
        "claims_lost": sum(1 for ex in executions if ex.outcome == "lost"),
    }


HEADER = (
    "| backend | seed | jobs | kills | stops | lock holds | terminates | duplicates "
    "(unexplained) | lost | stuck | failed | max running capped / mid / all (table; handlers) "
    "| caps | all, incl. stale re-runs | live workers declared dead | workers exited "
    "| schedule fires / doubled / missed | workflows written / steps not completed / "
    "started early | wall s |"
)


def table_row(r: dict[str, Any]) -> str:
    t, hd, c = r["max_running_table"], r["max_running_handlers"], r["caps"]
    peaks_ = " / ".join(f"{t[q]}; {hd[q]}" for q in c)
    caps = " / ".join(str(c[q]) for q in c)
    return (
        f"| {r['backend']} | {r['seed']} | {r['jobs']} | {r['kills']} | {r['stops']} | "
        f"{r['lock_holds']} | {r['terminates']} | {r['duplicates']} ({r['dup_unexplained']}) | "
        f"{r['lost']} | {r['stuck']} | {r['failed']} | {peaks_} | {caps} | "
        f"{r['max_running_handlers_all']['*']} | {r['declared_dead_unfrozen']} | "
        f"{len(r['worker_exits'])} | {_schedule_cell(r.get('schedule'))} | "
        f"{_workflow_cell(r.get('workflows'))} | {r['wall_seconds']} |"
    )


def _schedule_cell(s: dict[str, Any] | None) -> str:
    if s is None:
        return "-"
    stalled = ", stalled" if s["stalled"] else ""
    return f"{s['fires']} / {s['doubled']} / {s['missing']}{stalled}"


def _workflow_cell(w: dict[str, Any] | None) -> str:
    if w is None:
        return "-"
    return f"{w['written']} / {w['not_completed'] + w['missing_steps']} / {w['started_early']}"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--dsn", default=None, help="PostgreSQL server (a database per run)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    p.add_argument("--drain-timeout", type=float, default=30.0)
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--stops", type=int, default=6)
    p.add_argument("--locks", type=int, default=8)
    p.add_argument("--terminates", type=int, default=None, help="PostgreSQL; default 4")
    p.add_argument("--deploys", type=int, default=0, help="SIGTERM, clean stop, replacement")
    p.add_argument("--lock-seconds", type=float, default=3.0)
    p.add_argument("--restart-delay", type=float, default=0.5)
    p.add_argument("--worker-timeout", type=float, default=5.0)
    p.add_argument("--heartbeat", type=float, default=0.5)
    p.add_argument("--leader-ttl", type=float, default=4.0)
    p.add_argument("--startup-delay", type=float, default=1.0)
    p.add_argument("--global-cap", type=int, default=8)
    p.add_argument("--capped-cap", type=int, default=2)
    p.add_argument("--mid-cap", type=int, default=4)
    p.add_argument("--flaky", type=float, default=0.1, help="share raising on attempt 0")
    p.add_argument("--ledger", action="store_true", help="complete through ctx.transaction()")
    p.add_argument("--max-attempts", type=int, default=20)
    p.add_argument(
        "--schedule-every", type=float, default=0.5, help="s between a schedule's fires; 0: none"
    )
    p.add_argument("--workflows", type=int, default=60, help="diamond workflows (5 steps each)")
    p.add_argument("--sample-every", type=float, default=0.05)
    p.add_argument("--recheck", type=float, default=10.0, help="s for a fresh worker; 0: off")
    p.add_argument(
        "--keep", action="store_true", help="keep the run's directory and database (printed)"
    )
    args = p.parse_args(argv)
    if args.terminates is None:
        args.terminates = 4 if args.backend == "postgres" else 0
    if args.terminates and args.backend != "postgres":
        p.error("--terminates is a PostgreSQL fault")
    if args.workers < 2 and (args.kills or args.stops):
        p.error("kills and stops need --workers >= 2 (one is always left running)")
    return args


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return worker_main(json.loads(argv[1]))
    if argv[:1] == ["--hold-lock"]:
        return hold_lock_main(argv[1], argv[2], argv[3], float(argv[4]))
    args = parse(argv)
    budget = args.duration + 2 * args.drain_timeout + args.recheck + 180
    signal.signal(signal.SIGALRM, _overtime)
    signal.alarm(int(budget))
    with fresh_dir() as workdir:
        if args.backend == "postgres":
            from bench_postgres import default_dsn, unavailable

            dsn = args.dsn or default_dsn()
            reason = unavailable(dsn)
            if reason is not None:
                sys.stderr.write(f"skipped: {reason}\n")
                return 2
            backend: Backend = PostgresBackend(workdir, dsn)
        else:
            backend = Backend(workdir)
        try:
            result = run(args, backend, workdir)
        finally:
            if args.keep and isinstance(backend, PostgresBackend) and backend.created:
                # Kept for the post-mortem, as the directory is; drop it by hand.
                sys.stderr.write(f"kept: database {backend.dbname} (DROP DATABASE when done)\n")
            else:
                backend.teardown()
            if args.keep:
                keep = f"{workdir}.kept"
                os.rename(workdir, keep)
                os.makedirs(workdir)
                sys.stderr.write(f"kept: {keep}\n")
    signal.alarm(0)
    print(json.dumps(result), flush=True)
    print()
    print(HEADER)
    print("|" + "---|" * HEADER.count(" |"))
    print(table_row(result))
    if not result["ok"]:
        r = result
        print(
            f"\nFAILED: lost={r['lost']} double_enqueued={r['double_enqueued']} "
            f"stuck={r['stuck']} caps={r['cap_exceeded']} exited={r['worker_exits']} "
            f"schedule={r.get('schedule')} workflows={r.get('workflows')}"
        )
    return 0 if result["ok"] else 1


def _overtime(signum: int, frame: Any) -> None:
    raise TimeoutError("the chaos run overran its time budget")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
