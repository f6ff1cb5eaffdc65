"""The spread claim's statements alone, at many queues (issue 21; docs/benchmarks.md,
"Many queues under one global cap").

    python bench/spread_claim.py                     # SQLite, 1,000 queues
    python bench/spread_claim.py --queues 5000
    python bench/spread_claim.py --backend postgres  # EXPLAIN (ANALYZE, WAL) of the claim

`-n` jobs (20,000) over `--queues` queues, written as `--arrival` says (`grouped`: each
queue's jobs together; `interleaved`: job i to queue i % Q). Then, SQLite:

* `heads` / `windowed`: claiming `--take` rows over the first `--take + 16` queues (the
  engine asks `SPREAD_SLACK` = 16 queues more than it may take), each queue with 5 free
  slots, inside BEGIN IMMEDIATE .. ROLLBACK, through the store's own spread claim (each
  queue's head first, `_spread_rows`) and through the windowed statement alone
  (`spread_claim_sql`, which the store runs only for the turns after the first, once
  every asked queue had one); `--turn` sets the rows a queue takes per turn;
* `counts`: the running rows counted for a claim over those queues, with `--running`
  rows (random ones) running: one search of the running index per queue asked
  (`spread_counts_sql`) against one pass over it (`RUNNING_BY_QUEUE`), which the store
  picks while the global cap allows at most `SPREAD_SCAN_PER_QUEUE` running rows per
  queue asked;
* `cycle`: the claim of `--take` rows and its COMMIT, then their finalize and its COMMIT,
  round after round over the queues in turn: what the pages a claim touches cost at
  commit (one queue's rows share pages; with grouped arrival the heads of different
  queues do not).

PostgreSQL: the spread claim statement (`CLAIM_SPREAD`) under EXPLAIN (ANALYZE, WAL),
rolled back: its execution time (its triggers included) and the WAL records its plan
writes (row locks included, the triggers' not). Then `cycle`: through the store, a claim of
`--take` rows and their finalize, round after round, over the queues in turn and over a
second schema with every job in one queue (`cycle_1q`): the median claim and finalize
(wall, us) and, per job, the wall time and the writer's server process CPU (from
`/proc/<pid>/schedstat`, Linux; the server on this machine). `--no-count-triggers`
disables the kept counts' triggers on `jobs` (a diagnosis: what they cost).
Medians of `--reps` runs; JSON lines, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import time
import uuid
from typing import Any

from _common import NOOP, emit, fresh_dir, jl
from jobledger._storage.interface import SpreadRequest

SLACK = 16
FREE = 5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--queues", type=int, default=1000)
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--take", type=int, default=50, help="rows one claim takes")
    p.add_argument("--turn", type=int, default=1, help="rows a queue takes per turn")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--arrival", choices=("grouped", "interleaved"), default="grouped")
    p.add_argument("--running", type=int, default=50, help="SQLite `counts`: rows running")
    p.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--no-count-triggers", action="store_true", help="PostgreSQL: a diagnosis")
    args = p.parse_args()
    if args.backend == "sqlite":
        with fresh_dir() as d:
            path = os.path.join(d, "jobs.db")
            fill(path, args)
            results = sqlite_case(path, args)
    else:
        results = postgres_case(args)
    for name, value in results.items():
        emit(f"spread_claim_{name}", "jobledger", "NORMAL", backend=args.backend,
             queues=args.queues, take=args.take, arrival=args.arrival, **value)  # fmt: skip
    print()
    print(f"spread claim, {args.backend}, {args.queues:,} queues, {args.take} rows a claim, "
          f"arrival {args.arrival}")  # fmt: skip
    print()
    print("| measure | median |")
    print("|---|---:|")
    for name, value in results.items():
        shown = ", ".join(f"{k} {v}" for k, v in value.items())
        print(f"| {name} | {shown} |")


def fill(target: str, args: argparse.Namespace) -> None:
    producer = jl.JobManager(target, startup_delay=0)
    queues = args.queues
    try:
        if args.arrival == "interleaved":

            @producer.handler(NOOP, recovery="retry", queue=lambda x: f"kb.{x['kb']}")
            async def unused(ctx: jl.JobContext[dict[str, Any]]) -> None:
                raise AssertionError("the producer never starts")

            for start in range(0, args.n, 1000):
                stop = min(args.n, start + 1000)
                producer.enqueue_many(NOOP, [{"kb": i % queues} for i in range(start, stop)])
            return
        for qi in range(queues):
            count = len(range(qi, args.n, queues))
            for start in range(0, count, 1000):
                size = min(1000, count - start)
                producer.enqueue_many(NOOP, [{"kb": qi}] * size, queue=f"kb.{qi}")
    finally:
        asyncio.run(producer.stop())


def sqlite_case(path: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    from jobledger._storage.sqlite import queries as q
    from jobledger._storage.sqlite.store import _spread_rows

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    now = int(time.time() * 1000) + 1
    names = [f"kb.{i}" for i in range(args.queues)]
    asked = [(name, FREE) for name in names[: args.take + SLACK]]
    request = SpreadRequest(
        tuple(asked), 10**6, args.take, "bench", (NOOP.name,), (), False, turn=args.turn
    )

    def heads() -> int:
        return len(_spread_rows(conn, request, asked, args.take, now))

    windowed_sql = q.spread_claim_sql(len(asked), 1, 0, args.turn)
    windowed_params: list[Any] = ["bench", now, NOOP.name, args.take]
    for name, free in asked:
        windowed_params += (name, free, 0)

    def windowed() -> int:
        return len(conn.execute(windowed_sql, windowed_params).fetchall())

    out: dict[str, dict[str, Any]] = {}
    for name, claim in (("heads", heads), ("windowed", windowed)):
        times: list[float] = []
        for _ in range(args.reps):
            conn.execute("BEGIN IMMEDIATE")
            started = time.perf_counter()
            got = claim()
            times.append(time.perf_counter() - started)
            conn.execute("ROLLBACK")
        out[name] = {"us": round(statistics.median(times) * 1e6, 1), "rows": got}
    out["counts"] = counts(conn, args, [name for name, _ in asked])
    out["cycle"] = cycle(conn, args, names, now)
    return out


def counts(conn: sqlite3.Connection, args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """A spread claim's count of running rows, both ways, with `--running` rows running."""
    from jobledger._storage.sqlite import queries as q

    search = q.spread_counts_sql(len(names))
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "UPDATE jobs SET status = 'running', worker_id = 'bench' WHERE rowid IN "
            "(SELECT rowid FROM jobs WHERE status = 'pending' ORDER BY random() LIMIT ?)",
            (args.running,),
        )
        times: dict[str, list[float]] = {"search_us": [], "scan_us": []}
        for _ in range(args.reps):
            started = time.perf_counter()
            by_search = conn.execute(search, names).fetchone()
            searched = time.perf_counter()
            by_queue = dict(conn.execute(q.RUNNING_BY_QUEUE).fetchall())
            times["search_us"].append(searched - started)
            times["scan_us"].append(time.perf_counter() - searched)
        assert by_search[0] == sum(by_queue.values()) == args.running
    finally:
        conn.execute("ROLLBACK")
    out: dict[str, Any] = {k: round(statistics.median(v) * 1e6, 1) for k, v in times.items()}
    return {**out, "running": args.running, "asked": len(names)}


def cycle(
    conn: sqlite3.Connection, args: argparse.Namespace, names: list[str], now: int
) -> dict[str, Any]:
    """Claim `take` rows (heads first) and commit, finalize them and commit, moving on
    through the queues in turn, as the engine's turns do."""
    from jobledger._storage.sqlite.store import _spread_rows

    finish = "UPDATE jobs SET status = 'completed', finished_at = ?, updated_at = ? WHERE rowid = ?"
    width = args.take + SLACK
    claims: list[float] = []
    finals: list[float] = []
    at = 0
    for _ in range(min(args.reps, args.n // args.take - 1)):
        turn = (names[at:] + names[:at])[:width] if len(names) > 1 else names
        asked = [(name, FREE if len(names) > 1 else args.take) for name in turn]
        request = SpreadRequest(
            tuple(asked), 10**6, args.take, "bench", (NOOP.name,), (), False, turn=args.turn
        )
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        rows = _spread_rows(conn, request, asked, args.take, now)
        conn.execute("COMMIT")
        at = (at + len({r[3] for r in rows})) % len(names)  # the queues served go last
        claimed = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(finish, [(now + 5, now + 5, r[0]) for r in rows])
        conn.execute("COMMIT")
        claims.append(claimed - started)
        finals.append(time.perf_counter() - claimed)
    return {
        "claim_commit_us": round(statistics.median(claims) * 1e6, 1),
        "finalize_commit_us": round(statistics.median(finals) * 1e6, 1),
    }


def postgres_case(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    import psycopg

    from jobledger._storage.postgres.queries import Queries

    schema = f"jlsc_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        sep = "&" if "?" in args.dsn else "?"
        fill(f"{args.dsn}{sep}schema={schema}", args)
        conn = psycopg.connect(args.dsn, autocommit=True)
        conn.execute(f'ANALYZE "{schema}".jobs')
        sql = "EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + Queries(schema).CLAIM_SPREAD
        names = [f"kb.{i}" for i in range(min(args.queues, args.take + SLACK))]
        params = {
            "names": names,
            "caps": [FREE] * len(names),
            "excluded": [],
            "now": int(time.time() * 1000) + 1,
            "types": [NOOP.name],
            "gcap": 10**6,
            "limit": args.take,
            "worker": "bench",
            "turn": args.turn,
        }
        times: list[float] = []
        wal: list[int] = []
        for _ in range(min(args.reps, 50)):
            with conn.transaction(force_rollback=True):
                plan = conn.execute(sql, params).fetchone()[0]
            plan = plan if isinstance(plan, list) else json.loads(plan)
            times.append(float(plan[0]["Execution Time"]))
            wal.append(int(plan[0]["Plan"].get("WAL Records", 0)))
        conn.close()
        many = pg_cycle(schema, args, args.queues)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    one = pg_one_queue(args)
    return {
        "claim_statement": {
            "ms": round(statistics.median(times), 3),
            "wal_records": int(statistics.median(wal)),
        },
        "cycle": many,
        "cycle_1q": one,
    }


def pg_one_queue(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    schema = f"jlsc_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        sep = "&" if "?" in args.dsn else "?"
        fill(
            f"{args.dsn}{sep}schema={schema}",
            argparse.Namespace(queues=1, n=args.n, arrival="grouped"),
        )
        return pg_cycle(schema, args, 1)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pg_cycle(schema: str, args: argparse.Namespace, queues: int) -> dict[str, Any]:
    """Claim `take` rows and finalize them through the store, round after round; the
    queues in turn as the engine's spread claims take them (one queue: its own claim)."""
    from jobledger._storage.interface import Outcome
    from jobledger._storage.postgres.store import PostgresStore

    store = PostgresStore(args.dsn, schema=schema, listen=False)
    try:
        conn = store.conn
        if args.no_count_triggers:
            for trigger in ("jobs_count_insert", "jobs_count_update", "jobs_count_delete"):
                conn.execute(f'ALTER TABLE "{schema}".jobs DISABLE TRIGGER {trigger}')
        conn.execute(f'ANALYZE "{schema}".jobs')
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        conn.commit()
        names = [f"kb.{i}" for i in range(queues)]
        claims: list[float] = []
        finals: list[float] = []
        at = 0
        rounds = min(args.reps, args.n // args.take - 1)
        cpu0, wall0 = _cpu(pid), time.perf_counter()
        for _ in range(rounds):
            now = int(time.time() * 1000)
            started = time.perf_counter()
            if queues == 1:
                result = store.claim(names[0], queue_cap=args.take, global_cap=10**6,
                                     limit=args.take, now_ms=now, worker_id="bench",
                                     types=(NOOP.name,))  # fmt: skip
            else:
                turn = (names[at:] + names[:at])[: args.take + SLACK]
                asked = tuple((name, FREE) for name in turn)
                request = SpreadRequest(
                    asked, 10**6, args.take, "bench", (NOOP.name,), turn=args.turn
                )
                result = store.claim_spread(request, now)
                at = (at + len({j.queue for j in result.jobs})) % queues
            claimed = time.perf_counter()
            store.finalize(
                [Outcome(j.id, "bench", j.attempt, "completed", want_row=False)
                 for j in result.jobs],
                now + 5,
            )  # fmt: skip
            claims.append(claimed - started)
            finals.append(time.perf_counter() - claimed)
        wall, cpu = time.perf_counter() - wall0, _cpu(pid) - cpu0
        jobs = rounds * args.take
        return {
            "claim_us": round(statistics.median(claims) * 1e6),
            "finalize_us": round(statistics.median(finals) * 1e6),
            "wall_us_per_job": round(wall / jobs * 1e6, 1),
            "server_cpu_us_per_job": round(cpu / jobs * 1e6, 1),
        }
    finally:
        store.close()


def _cpu(pid: int) -> float:
    """A local server process's CPU seconds (Linux), 0.0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        return 0.0


if __name__ == "__main__":
    main()
