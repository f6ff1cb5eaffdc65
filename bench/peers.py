"""jobledger against what users pick instead (issue 21): a no-op drain, one worker process.

    python bench/peers.py                          # every system, 20,000 jobs, once
    python bench/peers.py --repeat 3               # systems interleaved, 3 rounds
    python bench/peers.py --systems jobledger-sqlite,celery-redis
    python bench/peers.py --quick                  # 300 jobs, to see that it runs

For each system: `n` no-op jobs are written first (untimed), then ONE worker process
starts and the clock runs from the worker's start until the last job is done, counted
the way that system can tell (below). Every measurement runs in a fresh interpreter
(this script calls itself with `--one`), and the systems alternate within each round,
in a rotated order from one round to the next, so a slow minute of the shared machine
falls on all of them.

What each runs (worker; concurrency; how "done" is told):

* jobledger-sqlite: `JobManager` on a WAL file, synchronous=NORMAL, async handler,
  c=50, global cap 50; the table holds n `completed` rows (as `drain.py`).
* jobledger-handles: the same, the user's path: the n handles `enqueue_many` returned
  are awaited (`h.finished`); every handle resolved `completed`.
* jobledger-pg: `JobManager("postgresql://...")`, c=50, global cap 50; the table holds
  n `completed` rows (as `bench_postgres.py`).
* celery-redis: Celery 5, Redis broker, `task_acks_late`, an in-process `app.Worker`
  with `pool="threads", concurrency=50` (prefetch x4, its default); `task_postrun`
  counted n, then the queue list and kombu's unacked hash are both empty.
* rq-redis: `SimpleWorker.work(burst=True)` (no fork per job; RQ runs one job at a
  time per worker); burst returns, and the finished registry holds n.
* huey-redis: `RedisHuey`, `huey.create_consumer(workers=1)` (a thread; huey's
  default); its `SIGNAL_COMPLETE` counted n.
* huey-sqlite: `SqliteHuey` (WAL, synchronous=NORMAL as jobledger's, `make_huey`),
  `create_consumer(workers=1)`; `SIGNAL_COMPLETE` counted n.
* dramatiq-redis: `RedisBroker`, `Worker(worker_threads=50)`, default middleware; an
  `after_ack` middleware counted n.
* procrastinate: `run_worker_async(concurrency=50)`, LISTEN/NOTIFY on; n `succeeded`
  rows (as `bench_postgres.py`).
* pgqueuer: `QueueManager.run(batch_size=10)` (its defaults, no cap), psycopg driver;
  n handler calls and its queue table empty (a finished job's row is deleted).

Redis keys are all named after a random tag and deleted afterwards (never FLUSHDB);
PostgreSQL objects live in a fresh schema, dropped afterwards. A system whose service is
down is skipped with the reason (exit status 0); under `CI=true` that is an error.

Output: one JSON line per measurement, one summary line (medians, ratios to
jobledger-sqlite and jobledger-pg, the issue's targets), then a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import (  # noqa: E402
    NOOP,
    Stopwatch,
    fresh_dir,
    huey_prefill,
    jl,
    machine,
    make_huey,
    make_manager,
    rate,
)

REDIS_HOST = os.environ.get("JOBLEDGER_BENCH_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("JOBLEDGER_BENCH_REDIS_PORT", "6379"))
CONCURRENCY = 50
HUEY_WORKERS = 1
CHUNK = 1000

# name -> (service, package whose version is reported, concurrency as stated)
SYSTEMS: dict[str, tuple[str, str, str]] = {
    "jobledger-sqlite": ("sqlite", "jobledger", f"async, c={CONCURRENCY}"),
    "jobledger-handles": ("sqlite", "jobledger", f"async, c={CONCURRENCY}, handles awaited"),
    "jobledger-pg": ("postgres", "jobledger", f"async, c={CONCURRENCY}"),
    "celery-redis": ("redis", "celery", f"threads pool, c={CONCURRENCY}, acks_late"),
    "rq-redis": ("redis", "rq", "SimpleWorker, 1 at a time"),
    "huey-redis": ("redis", "huey", f"consumer, {HUEY_WORKERS} thread worker"),
    "huey-sqlite": ("sqlite", "huey", f"consumer, {HUEY_WORKERS} thread worker"),
    "dramatiq-redis": ("redis", "dramatiq", f"worker_threads={CONCURRENCY}"),
    "procrastinate": ("postgres", "procrastinate", f"async, concurrency={CONCURRENCY}"),
    "pgqueuer": ("postgres", "pgqueuer", "async, batch_size=10, no cap (its defaults)"),
}
REDIS_PEERS = ("celery-redis", "rq-redis", "huey-redis", "dramatiq-redis")


# -- plumbing -------------------------------------------------------------------------


class ThreadCounter:
    """Counts completions from any thread and sets an event at the target."""

    def __init__(self, target: int) -> None:
        self.n = 0
        self.target = target
        self.lock = threading.Lock()
        self.done = threading.Event()

    def hit(self, *_: Any, **__: Any) -> None:
        with self.lock:
            self.n += 1
            if self.n >= self.target:
                self.done.set()


def redis_client() -> Any:
    import redis

    return redis.Redis(host=REDIS_HOST, port=REDIS_PORT)


def drop_redis_keys(tag: str) -> int:
    r = redis_client()
    keys = list(r.scan_iter(match=f"*{tag}*", count=1000))
    for start in range(0, len(keys), 500):
        r.delete(*keys[start : start + 500])
    return len(keys)


def wait_until(pred: Callable[[], bool], timeout: float = 600.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError("the drain did not finish")
        time.sleep(0.001)


def pg_dsn() -> str:
    from bench_postgres import default_dsn

    return default_dsn()


def service_down(service: str) -> str | None:
    """Why a service cannot be used, or None."""
    if service == "sqlite":
        return None
    if service == "postgres":
        from bench_postgres import unavailable

        return unavailable(pg_dsn())
    try:
        redis_client().ping()
    except Exception as exc:
        return f"Redis at {REDIS_HOST}:{REDIS_PORT} is unreachable: {exc}"
    return None


def version(package: str) -> str:
    try:
        from importlib.metadata import version as v

        return v(package)
    except Exception:
        return "not installed"


# -- jobledger ------------------------------------------------------------------------


def run_jobledger_sqlite(n: int, tag: str) -> dict[str, Any]:
    from drain import _jobledger

    with fresh_dir() as d:
        seconds = asyncio.run(_jobledger(os.path.join(d, "jobs.db"), "NORMAL", n, 1, 0))
    return {"seconds": seconds}


def run_jobledger_handles(n: int, tag: str) -> dict[str, Any]:
    async def go(path: str) -> float:
        jobs = make_manager(path, "NORMAL", concurrency=CONCURRENCY, global_cap=CONCURRENCY)
        handles: list[jl.JobHandle[Any]] = []
        for start in range(0, n, CHUNK):
            handles += jobs.enqueue_many(NOOP, [{} for _ in range(min(CHUNK, n - start))])
        watch = Stopwatch()
        await jobs.start()
        snaps = await asyncio.gather(*(h.finished for h in handles))
        seconds = watch.elapsed()
        await jobs.stop()
        bad = [s.status for s in snaps if s.status != "completed"]
        if bad:
            raise RuntimeError(f"{len(bad)} handles ended {set(bad)}")
        return seconds

    with fresh_dir() as d:
        return {"seconds": asyncio.run(go(os.path.join(d, "jobs.db")))}


def run_jobledger_pg(n: int, tag: str) -> dict[str, Any]:
    from bench_postgres import drop_schema, run_jobledger

    dsn, schema = pg_dsn(), f"jlpeers_jl_{tag}"
    try:
        seconds = asyncio.run(run_jobledger(dsn, schema, n, "NORMAL"))
    finally:
        drop_schema(dsn, schema)
    return {"seconds": seconds}


# -- Redis peers ----------------------------------------------------------------------


def run_celery(n: int, tag: str) -> dict[str, Any]:
    from celery import Celery, signals

    unacked = f"{tag}.unacked"
    app = Celery(tag, broker=f"redis://{REDIS_HOST}:{REDIS_PORT}/0")
    app.conf.update(
        task_acks_late=True,
        task_ignore_result=True,
        task_default_queue=tag,
        task_default_exchange=tag,
        task_default_routing_key=tag,
        broker_transport_options={
            "unacked_key": unacked,
            "unacked_index_key": f"{tag}.unacked_index",
            "unacked_mutex_key": f"{tag}.unacked_mutex",
        },
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
    )

    @app.task(name="noop")  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    for _ in range(n):
        noop.delay()
    counter = ThreadCounter(n)
    signals.task_postrun.connect(counter.hit, weak=False)
    r = redis_client()
    result: dict[str, Any] = {}
    worker = app.Worker(
        pool="threads", concurrency=CONCURRENCY, loglevel="WARNING", quiet=True,
        without_heartbeat=True, without_mingle=True, without_gossip=True,
    )  # fmt: skip

    def monitor() -> None:
        counter.done.wait()
        wait_until(lambda: r.llen(tag) == 0 and r.hlen(unacked) == 0)
        result["seconds"] = watch.elapsed()
        finish(result, tag)

    threading.Thread(target=monitor, daemon=True).start()
    watch = Stopwatch()
    worker.start()
    raise RuntimeError("the Celery worker stopped before the drain ended")


def rq_noop() -> None:
    return None


def run_rq(n: int, tag: str) -> dict[str, Any]:
    from rq import Queue, SimpleWorker

    r = redis_client()
    q = Queue(tag, connection=r)
    for start in range(0, n, CHUNK):
        size = min(CHUNK, n - start)
        q.enqueue_many([Queue.prepare_data(rq_noop, result_ttl=600) for _ in range(size)])
    worker = SimpleWorker([q], connection=r)
    watch = Stopwatch()
    worker.work(burst=True, logging_level="WARNING", with_scheduler=False)
    seconds = watch.elapsed()
    ids = q.finished_job_registry.get_job_ids()
    if len(ids) != n:
        raise RuntimeError(f"RQ finished {len(ids)} of {n}")
    pipe = r.pipeline(transaction=False)
    for job_id in ids:
        pipe.delete(f"rq:job:{job_id}", f"rq:results:{job_id}")
    pipe.execute()
    return {"seconds": seconds}


def _huey_consume(huey: Any, task: Any, n: int) -> float:
    from huey.signals import SIGNAL_COMPLETE

    counter = ThreadCounter(n)
    huey.signal(SIGNAL_COMPLETE)(counter.hit)
    consumer = huey.create_consumer(workers=HUEY_WORKERS, periodic=False)
    watch = Stopwatch()
    consumer.start()
    counter.done.wait()
    seconds = watch.elapsed()
    consumer.stop(graceful=True)
    return seconds


def run_huey_redis(n: int, tag: str) -> dict[str, Any]:
    from huey import RedisHuey

    huey = RedisHuey(tag, host=REDIS_HOST, port=REDIS_PORT)

    @huey.task()  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    storage = huey.storage
    for start in range(0, n, CHUNK):
        pipe = storage.conn.pipeline(transaction=False)
        for _ in range(min(CHUNK, n - start)):
            pipe.lpush(storage.queue_key, huey.serialize_task(noop.s()))
        pipe.execute()
    return {"seconds": _huey_consume(huey, noop, n)}


def run_huey_sqlite(n: int, tag: str) -> dict[str, Any]:
    with fresh_dir() as d:
        huey = make_huey(os.path.join(d, "huey.db"), "NORMAL", name=tag)

        @huey.task()  # type: ignore[untyped-decorator]
        def noop() -> None:
            return None

        huey_prefill(huey, noop, n)
        seconds = _huey_consume(huey, noop, n)
        huey.storage.close()
    return {"seconds": seconds}


def run_dramatiq(n: int, tag: str) -> dict[str, Any]:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.middleware import Middleware

    counter = ThreadCounter(n)

    class CountAcks(Middleware):  # type: ignore[misc]
        def after_ack(self, broker: Any, message: Any) -> None:
            counter.hit()

    broker = RedisBroker(host=REDIS_HOST, port=REDIS_PORT, namespace=tag)
    broker.add_middleware(CountAcks())
    dramatiq.set_broker(broker)

    @dramatiq.actor(queue_name="default", max_retries=0)  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    for _ in range(n):
        noop.send()
    worker = dramatiq.Worker(broker, worker_threads=CONCURRENCY)
    watch = Stopwatch()
    worker.start()
    counter.done.wait()
    seconds = watch.elapsed()
    worker.stop()
    return {"seconds": seconds}


# -- PostgreSQL peers -----------------------------------------------------------------


def run_procrastinate(n: int, tag: str) -> dict[str, Any]:
    from bench_postgres import drop_schema, run_procrastinate

    dsn, schema = pg_dsn(), f"jlpeers_pc_{tag}"
    try:
        seconds = asyncio.run(run_procrastinate(dsn, schema, n, "NORMAL"))
    finally:
        drop_schema(dsn, schema)
    return {"seconds": seconds}


def run_pgqueuer(n: int, tag: str) -> dict[str, Any]:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager

    from bench_postgres import analyze, drop_schema

    dsn, schema = pg_dsn(), f"jlpeers_pq_{tag}"

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, options=f"-c search_path={schema}"
        )

    async def go() -> float:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        setup = await connect()
        queries = Queries(PsycopgDriver(setup))
        await queries.install(create_schema=False)
        for start in range(0, n, CHUNK):
            size = min(CHUNK, n - start)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        analyze(dsn, f'"{schema}".pgqueuer')
        ran = 0

        qm = QueueManager(Queries(PsycopgDriver(await connect())))

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            nonlocal ran
            ran += 1

        from bench_postgres import wait_rows

        with psycopg.connect(dsn, autocommit=True) as reader:
            sql = f'SELECT count(*) FROM "{schema}".pgqueuer'

            def left() -> int:
                row = reader.execute(sql).fetchone()
                return -1 if row is None else int(row[0])

            def done() -> int:  # finished = handler ran and the row left the queue table
                return n - left() if ran >= n else 0

            watch = Stopwatch()
            worker = asyncio.create_task(qm.run(batch_size=10))
            await wait_rows(done, n)
            seconds = watch.elapsed()
            qm.shutdown.set()
            await worker
        await setup.close()
        if ran != n:
            raise RuntimeError(f"pgqueuer ran {ran} of {n}")
        return seconds

    try:
        seconds = asyncio.run(go())
    finally:
        drop_schema(dsn, schema)
    return {"seconds": seconds}


RUNNERS: dict[str, Callable[[int, str], dict[str, Any]]] = {
    "jobledger-sqlite": run_jobledger_sqlite,
    "jobledger-handles": run_jobledger_handles,
    "jobledger-pg": run_jobledger_pg,
    "celery-redis": run_celery,
    "rq-redis": run_rq,
    "huey-redis": run_huey_redis,
    "huey-sqlite": run_huey_sqlite,
    "dramatiq-redis": run_dramatiq,
    "procrastinate": run_procrastinate,
    "pgqueuer": run_pgqueuer,
}


# -- driver ---------------------------------------------------------------------------


def record(system: str, n: int, seconds: float) -> dict[str, Any]:
    service, package, conc = SYSTEMS[system]
    return {
        "bench": "peers_drain",
        "system": system,
        "service": service,
        "version": version(package),
        "concurrency": conc,
        "n": n,
        "seconds": round(seconds, 4),
        "rate": rate(n, seconds),
    }


def finish(result: dict[str, Any], tag: str) -> None:
    """For workers that own the main thread (Celery): print and leave at once."""
    drop_redis_keys(tag)
    line = json.dumps(record(ONE["system"], ONE["n"], result["seconds"]))
    sys.__stdout__.write(line + "\n")
    sys.__stdout__.flush()
    os._exit(0)


ONE: dict[str, Any] = {}


def one(system: str, n: int) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    tag = f"jlpeers{uuid.uuid4().hex[:10]}"
    ONE.update(system=system, n=n)
    try:
        got = RUNNERS[system](n, tag)
    finally:
        if SYSTEMS[system][0] == "redis":
            drop_redis_keys(tag)
    print(json.dumps(record(system, n, got["seconds"])), flush=True)
    os._exit(0)  # consumer threads (huey, dramatiq) need not be joined


def spawn(system: str, n: int) -> dict[str, Any] | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", system, "-n", str(n)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=1200)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"!! {system} timed out\n")
        return None
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(f"!! {system} failed ({proc.returncode}):\n{proc.stderr[-3000:]}\n")
        return None
    return dict(json.loads(lines[-1]))


def median_rates(records: list[dict[str, Any]]) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for r in records:
        by.setdefault(r["system"], []).append(r["rate"])
    return {s: statistics.median(v) for s, v in by.items()}


def targets(med: dict[str, float]) -> dict[str, Any]:
    """The issue's targets, each True/False, or None when a side was not measured."""

    def ratio(a: str, b: str) -> float | None:
        return med[a] / med[b] if a in med and b in med and med[b] > 0 else None

    out: dict[str, Any] = {}
    for peer in REDIS_PEERS:
        x = ratio("jobledger-sqlite", peer)
        out[f"jobledger-sqlite > {peer}"] = None if x is None else x > 1
    x = ratio("jobledger-pg", "procrastinate")
    out["jobledger-pg >= 2x procrastinate"] = None if x is None else x >= 2
    x = ratio("jobledger-pg", "pgqueuer")
    out["jobledger-pg >= pgqueuer"] = None if x is None else x >= 1
    x = ratio("jobledger-handles", "huey-sqlite")
    out["jobledger-handles >= 2.5x huey-sqlite"] = None if x is None else x >= 2.5
    return out


def table(records: list[dict[str, Any]], med: dict[str, float]) -> str:
    by: dict[str, list[float]] = {}
    for r in records:
        by.setdefault(r["system"], []).append(r["rate"])
    lines = [
        "| system | version | worker | jobs/s (median [min-max], runs) "
        "| vs jobledger-sqlite | vs jobledger-pg |",
        "|---|---|---|---:|---:|---:|",
    ]
    for system in SYSTEMS:
        if system not in by:
            continue
        v = by[system]
        cell = f"{med[system]:,.0f} [{min(v):,.0f}-{max(v):,.0f}], {len(v)}"
        ratios = []
        for base in ("jobledger-sqlite", "jobledger-pg"):
            ratios.append(f"{med[system] / med[base]:.2f}" if base in med else "")
        _, package, conc = SYSTEMS[system]
        lines.append(
            f"| {system} | {package} {version(package)} | {conc} | {cell} | "
            f"{ratios[0]} | {ratios[1]} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    p.add_argument("--quick", action="store_true", help="300 jobs, once: a smoke run")
    p.add_argument("--one", choices=tuple(SYSTEMS), help=argparse.SUPPRESS)
    args = p.parse_args()
    n = 300 if args.quick else args.n
    if args.one:
        one(args.one, n)
        return
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    skipped: dict[str, str] = {}
    down: dict[str, str | None] = {}
    for system in chosen:
        service = SYSTEMS[system][0]
        if service not in down:
            down[service] = service_down(service)
        if down[service] is not None:
            skipped[system] = str(down[service])
        elif version(SYSTEMS[system][1]) == "not installed":
            skipped[system] = f"{SYSTEMS[system][1]} is not installed (the bench extra)"
    for system, reason in skipped.items():
        sys.stderr.write(f"-- {system} skipped: {reason}\n")
    if skipped and os.environ.get("CI") == "true":
        sys.exit(f"under CI=true a needed service or package is missing: {skipped}")
    runnable = [s for s in chosen if s not in skipped]
    records: list[dict[str, Any]] = []
    failed: list[str] = []
    for rep in range(1 if args.quick else args.repeat):
        k = rep % max(1, len(runnable))
        for system in runnable[k:] + runnable[:k]:
            got = spawn(system, n)
            if got is None:
                failed.append(system)
                continue
            got["repeat"] = rep
            print(json.dumps(got), flush=True)
            records.append(got)
            time.sleep(0.5)  # let the servers settle between runs
    med = median_rates(records)
    base = {b: med.get(b) for b in ("jobledger-sqlite", "jobledger-pg")}
    summary = {
        "bench": "peers_summary",
        "n": n,
        "median_rate": med,
        "vs": {b: {s: round(r / v, 3) for s, r in med.items()} for b, v in base.items() if v},
        "targets": targets(med),
        "skipped": skipped,
        "failed": failed,
        "machine": machine(),
    }
    print(json.dumps(summary), flush=True)
    info = summary["machine"]
    print(
        f"\nno-op drain of {n:,} jobs, one worker process each; {info['nproc']} CPUs, "
        f"Python {info['python']}, SQLite {info['sqlite']}, repeat={args.repeat}\n"
    )
    print(table(records, med))
    print("\ntargets (issue 21):")
    for name, ok in summary["targets"].items():
        print(f"- {name}: {'n/a' if ok is None else ('met' if ok else 'NOT met')}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
