"""Run the whole benchmark suite, side by side with huey, and print one table.

    python bench/run_all.py                 # what `make bench` runs (a few minutes)
    python bench/run_all.py --repeat 3      # each case 3 times, interleaved; median [min-max]
    python bench/run_all.py --big           # adds the 1M-pending claim case (slow, ~2 min)
    python bench/run_all.py --only drain    # cases whose name contains "drain"

When a PostgreSQL server is reachable, the run ends with `bench_postgres.py` (jobledger
vs procrastinate on that server, case name "pg_drain/postgres"); otherwise it says why
it skipped it. Then `peers.py --quick` (case name "peers_quick", ~15 s): every peer of
issue 21 (Celery, RQ, huey, dramatiq on Redis; procrastinate, pgqueuer on PostgreSQL)
on 300 jobs, to show that each still runs; a peer whose service is down is skipped with
the reason. The comparison itself is `bench/peers.py --repeat 3`, run on its own.

Every case is a fresh subprocess in a fresh temporary directory (see `_common.py`); each
prints JSON lines, collected here. The raw records and the machine description are
written to `bench/results/<UTC time>.json` (gitignored); the markdown table goes to
stdout.

Every case runs 20,000 jobs, the per-commit ones at `synchronous=FULL` too (single
enqueue, and huey's one-commit-per-task drain; about 10 s each on a slow disk). Not
fewer: until the first checkpoint lets the WAL start over (about 1,000 commits here,
fewer for huey) every commit appends to a growing file, whose fdatasync also writes the
file's size, so a short run measures mostly that start.

The process cases drain 60,000 jobs: the producer beside the workers enqueues its 500
jobs one every 2 ms, so no run can be shorter than about 1.2 s; at 20,000 jobs a fast
machine measured that floor for both 1 and 4 processes. Their records carry
`producer_seconds` so that a reader can see when it binds.

The CPU cases (`cpu_*`) run 1,500 jobs that each compute for 2 ms, under the same
shared cap of 50, on one worker process and on two: with `process_max_concurrency=2`
(each process claims at most two at a time), and without, which shows what the option
is for. A huey worker runs one task at a time, so its two processes share the work.

The handles case (`handles.py`, issue 21) enqueues 20,000 jobs and awaits every handle,
beside the row-counting drain, three pairs in one process; its row is the median rate and
the median of the pairs' ratios.

The many-queues case (`many_queues.py`, issue 21) runs 1 and 1,000 queues on 1 and 2
processes here (about a minute); its full matrix is that script run on its own.

The workflows case (`workflows.py`, issue 23) runs its three cases three times,
interleaved: 1,000 two-step workflows against 2,000 plain jobs (the median ratio of the
pairs), and a fan-out of 10,000 jobs and a join (its drain, enqueue and release time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import machine  # noqa: E402

N = 20_000
PROCS_N = 60_000
# CPU-bound jobs over worker processes: each job computes for CPU_MS, under the same
# shared cap of 50; with and without `process_max_concurrency`.
CPU_MS = 2
CPU_N = 1_500
CPU_PROCESS_MAX = 2
# Queue counts of the many-queues case in `make bench` (1 is the comparison).
MANY_QUEUES = (1, 1000)


@dataclass
class Case:
    name: str  # unique, used by --only
    script: str
    args: list[str]
    big: bool = False


@dataclass
class Row:
    """One line of the table: a jobledger figure, the huey figure it is compared with."""

    label: str
    sync: str
    metric: str
    ours: tuple[str, str]  # (bench, system) keys into the records
    theirs: tuple[str, str] | None
    higher_is_better: bool = True
    note: str = ""
    fields: list[str] = field(default_factory=lambda: ["rate"])


def cases(args: argparse.Namespace) -> list[Case]:
    out: list[Case] = []
    for sync in ("NORMAL", "FULL"):
        s = ["--sync", sync]
        for system in ("jobledger", "huey"):
            out.append(
                Case(f"enqueue_single/{system}/{sync}", "enqueue.py",
                     [*s, "--system", system, "--mode", "single", "-n", str(N)])
            )  # fmt: skip
        for system in ("jobledger", "sqlite-raw"):
            out.append(
                Case(f"enqueue_many/{system}/{sync}", "enqueue.py",
                     [*s, "--system", system, "--mode", "many", "-n", str(N)])
            )  # fmt: skip
        out.append(Case(f"drain/jobledger/{sync}", "drain.py", [*s, "-n", str(N)]))
        out.append(Case(f"drain/huey/{sync}", "drain.py", [*s, "--system", "huey", "-n", str(N)]))
        out.append(
            Case(f"drain_10q/jobledger/{sync}", "drain.py", [*s, "-n", str(N), "--queues", "10"])
        )
        if sync == "NORMAL":
            for system in ("jobledger", "huey"):
                out.append(
                    Case(f"drain_1500b/{system}/{sync}", "drain.py",
                         [*s, "--system", system, "-n", str(N), "--payload-bytes", "1500"])
                )  # fmt: skip
        for system in ("jobledger", "huey"):
            out.append(Case(f"latency/{system}/{sync}", "latency.py", [*s, "--system", system]))
    for system in ("jobledger", "huey"):
        out.append(
            Case(f"latency_xproc/{system}", "latency.py", ["--system", system, "--cross-process"])
        )
    for system in ("jobledger", "huey"):
        out.append(Case(f"claim_10k/{system}", "claim_scale.py", ["--system", system]))
        out.append(
            Case(f"claim_1M/{system}", "claim_scale.py",
                 ["--system", system, "--pending", "1000000"], big=True)
        )  # fmt: skip
    for procs in ("1", "4"):
        for system in ("jobledger", "huey"):
            out.append(
                Case(f"procs_{procs}/{system}", "multiproc.py",
                     ["--system", system, "--procs", procs, "-n", str(PROCS_N)])
            )  # fmt: skip
    cpu = ["--cpu-ms", str(CPU_MS), "-n", str(CPU_N), "--extra", "0"]
    for system in ("jobledger", "huey"):
        for procs in ("1", "2"):
            out.append(
                Case(f"cpu_w{procs}/{system}", "multiproc.py",
                     ["--system", system, "--procs", procs, *cpu])
            )  # fmt: skip
    out.append(
        Case("cpu_w2_pmax/jobledger", "multiproc.py",
             ["--procs", "2", "--process-max", str(CPU_PROCESS_MAX), *cpu])
    )  # fmt: skip
    # The user's path (issue 21): enqueue and await every handle, beside drain.py's
    # row-counting drain in the same process, three pairs alternating.
    out.append(Case("handles/jobledger", "handles.py", ["-n", str(N), "--repeat", "3"]))
    # The many-queues case (issue 21), its quick subset: the full matrix (100 and 5,000
    # queues, 4 processes, PostgreSQL) is `bench/many_queues.py` run on its own.
    out.append(
        Case("many_queues/jobledger", "many_queues.py",
             ["--queues", ",".join(map(str, MANY_QUEUES)), "--procs", "1,2"])
    )  # fmt: skip
    # Workflows (issue 23): two-step chains vs plain jobs, and a 10,000-wide fan-out.
    out.append(Case("workflows/jobledger", "workflows.py", ["--repeat", "3"]))
    chosen = [c for c in out if args.big or not c.big]
    if args.only:
        chosen = [c for c in chosen if any(o in c.name for o in args.only)]
    return chosen


NOT_BATCH = "huey has no batch API: vs its single enqueue"
ONE_QUEUE = "huey runs one queue per instance: vs its 1-queue drain"


def _latency_rows(sync: str) -> list[Row]:
    return [
        Row(f"latency {what} -> handler start, {p}", sync, "ms", ("latency", "jobledger"),
            ("latency", "huey"), higher_is_better=False, fields=[f"{key}_{p}_ms"])
        for what, key in (("enqueue call", "call"), ("commit", "return"))
        for p in ("p50", "p99")
    ]  # fmt: skip


XPROC_NOTE = "worker in another process; both at default polling (0.05 s vs huey's 0.1 s)"


def _xproc_latency_rows() -> list[Row]:
    return [
        Row(f"latency across processes, enqueue call -> handler start, {p}", "NORMAL", "ms",
            ("latency_xproc", "jobledger"), ("latency_xproc", "huey"), higher_is_better=False,
            fields=[f"call_{p}_ms"], note=XPROC_NOTE if p == "p50" else "")
        for p in ("p50", "p99")
    ]  # fmt: skip


def _sync_rows(sync: str) -> list[Row]:
    jl_, hy = "jobledger", "huey"
    return [
        Row("enqueue, one by one", sync, "jobs/s", ("enqueue_single", jl_), ("enqueue_single", hy)),
        Row("enqueue_many, 20k in one call", sync, "jobs/s", ("enqueue_many", jl_),
            ("enqueue_single", hy), note=NOT_BATCH),
        Row("raw SQLite, enqueue_many's statements", sync, "jobs/s",
            ("enqueue_many", "sqlite-raw"), None,
            note="the ceiling for enqueue_many on this machine"),
        Row("drain, 1 queue (c=50)", sync, "jobs/s", ("drain", jl_), ("drain", hy)),
        Row("drain, 1.5 KB payloads and outputs", sync, "jobs/s", ("drain_1500b", jl_),
            ("drain_1500b", hy)),
        Row("drain, 10 queues (c=10 each, global 50)", sync, "jobs/s", ("drain_10q", jl_),
            ("drain", hy), note=ONE_QUEUE),
        *_latency_rows(sync),
    ]  # fmt: skip


def _scale_rows() -> list[Row]:
    jl_, hy = "jobledger", "huey"
    rows = []
    for size in ("10k", "1M"):
        key = f"claim_{size}"
        rows += [
            Row(f"drain 10k of {size} pending", "NORMAL", "jobs/s", (key, jl_), (key, hy)),
            Row("  peak RSS", "NORMAL", "MB", (key, jl_), (key, hy), higher_is_better=False,
                fields=["peak_rss_mb"]),
        ]  # fmt: skip
    for procs in ("1", "4"):
        key = f"procs_{procs}"
        rows.append(
            Row(f"{procs} worker process(es) + a producer", "NORMAL", "jobs/s", (key, jl_),
                (key, hy))
        )  # fmt: skip
    rows.append(
        Row("  'database is locked' reaching users", "NORMAL", "count", ("procs_4", jl_),
            ("procs_4", hy), higher_is_better=False, fields=["locked_errors"])
    )  # fmt: skip
    rows += [
        Row(f"{CPU_MS} ms CPU jobs, 1 worker process", "NORMAL", "jobs/s",
            ("cpu_w1", jl_), ("cpu_w1", hy)),
        Row(f"  2 processes, process_max_concurrency={CPU_PROCESS_MAX}", "NORMAL", "jobs/s",
            ("cpu_w2_pmax", jl_), ("cpu_w2", hy)),
        Row("  2 processes, no per-process limit", "NORMAL", "jobs/s",
            ("cpu_w2", jl_), ("cpu_w2", hy),
            note="one process claims the whole cap and runs it alone"),
    ]  # fmt: skip
    key = ("handles_summary", jl_)
    rows += [
        Row("enqueue 20k, await every handle (c=50)", "NORMAL", "jobs/s", key, None,
            fields=["handles_rate"]),
        Row("  vs the row-counting drain in the same run", "NORMAL", "ratio", key, None,
            fields=["ratio"], note="target >= 0.9"),
    ]  # fmt: skip
    for procs in (1, 2):
        for queues in MANY_QUEUES[1:]:
            key = (f"many_queues_{queues}q_{procs}p", jl_)
            rows += [
                Row(f"{queues:,} queues (c=5, global 50), 5 ms jobs, {procs} process(es)",
                    "NORMAL", "jobs/s", key, None),
                Row("  vs 1 queue (c=50) in the same run", "NORMAL", "ratio", key, None,
                    fields=["vs_1q"], note="target >= 0.9 at 1,000 queues"),
            ]  # fmt: skip
    key = ("workflows_summary", jl_)
    fan = ("workflows_fanout", jl_)
    rows += [
        Row("1,000 workflows a->b vs 2,000 plain jobs, drain", "NORMAL", "ratio", key, None,
            fields=["chains_vs_plain"], note="target >= 0.7"),
        Row("fan-out of 10,000 + join, drain", "NORMAL", "jobs/s", fan, None),
        Row("  enqueue() of the graph (10,001 jobs, 10,000 edges)", "NORMAL", "s", fan, None,
            higher_is_better=False, fields=["enqueue_s"]),
        Row("  the finalize that releases the join", "NORMAL", "ms", fan, None,
            higher_is_better=False, fields=["release_ms"], note="bench/workflows.py"),
    ]  # fmt: skip
    return rows


ROWS = [*_sync_rows("NORMAL"), *_sync_rows("FULL"), *_xproc_latency_rows(), *_scale_rows()]


def run_case(case: Case) -> list[dict[str, Any]]:
    cmd = [sys.executable, os.path.join(HERE, case.script), *case.args]
    # The previous case's files are deleted, but their dirty pages may still be on their
    # way to the disk; a FULL case started under that writeback waited on it in every
    # fsync (one run measured 1,815 vs 3,030 jobs/s for the same single enqueue).
    os.sync()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=1800)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"!! {case.name} timed out after 1800 s\n")
        return []
    if proc.returncode != 0:
        sys.stderr.write(f"!! {case.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}\n")
        return []
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in records:
        r["case"] = case.name
    return records


def _values(records: list[dict[str, Any]], key: tuple[str, str], sync: str, f: str) -> list[float]:
    bench, system = key
    return [
        float(r[f])
        for r in records
        if r["bench"] == bench and r["system"] == system and r["sync"] == sync and f in r
    ]


def _fmt(values: list[float]) -> str:
    if not values:
        return "n/a"
    med = statistics.median(values)
    text = _num(med)
    if len(values) > 1:
        text += f" [{_num(min(values))}-{_num(max(values))}]"
    return text


def _num(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def table(records: list[dict[str, Any]]) -> str:
    lines = [
        "| benchmark | sync | unit | jobledger | huey | ratio | note |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in ROWS:
        f = row.fields[0]
        ours = _values(records, row.ours, row.sync, f)
        if not ours:
            continue
        theirs = _values(records, row.theirs, row.sync, f) if row.theirs else []
        ratio = ""
        if ours and theirs:
            a, b = statistics.median(ours), statistics.median(theirs)
            if row.higher_is_better and b > 0:
                ratio = f"{a / b:.2f}x"
            elif not row.higher_is_better and a > 0:
                ratio = f"{b / a:.2f}x" if b > 0 else ("=" if a == b else "")
            elif a == b:
                ratio = "="
        lines.append(
            f"| {row.label} | {row.sync} | {row.metric} | {_fmt(ours)} | "
            f"{_fmt(theirs) if row.theirs else ''} | {ratio} | {row.note} |"
        )
    lines.append("")
    lines.append(
        "ratio: jobledger / huey for rates, huey / jobledger for latencies, memory and "
        "errors (above 1 = jobledger better)."
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--big", action="store_true", help="add the 1M-pending claim case")
    p.add_argument("--only", action="append", help="run cases whose name contains this")
    args = p.parse_args()
    chosen = cases(args)
    started = time.time()
    records: list[dict[str, Any]] = []
    timings: dict[str, list[float]] = defaultdict(list)
    for rep in range(args.repeat):
        for case in chosen:
            t = time.perf_counter()
            got = run_case(case)
            timings[case.name].append(round(time.perf_counter() - t, 1))
            for r in got:
                r["repeat"] = rep
            records.extend(got)
            sys.stderr.write(f"[{rep + 1}/{args.repeat}] {case.name}: {timings[case.name][-1]}s\n")
    wall = round(time.time() - started, 1)
    info = machine()
    out = table(records)
    print(
        f"jobledger vs huey {_huey_version()} - {info['nproc']} CPUs, Python {info['python']}, "
        f"SQLite {info['sqlite']}, repeat={args.repeat}, {wall}s\n"
    )
    print(out)
    pg_records, pg_table = postgres_section(args)
    if pg_table:
        print(f"\n{pg_table}")
    records.extend(pg_records)
    peer_records, peer_table = peers_section(args)
    if peer_table:
        print(f"\n{peer_table}")
    records.extend(peer_records)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    path = os.path.join(HERE, "results", f"{stamp}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(
            {"machine": info, "args": vars(args), "wall_s": wall, "case_seconds": timings,
             "records": records, "table": out},
            fh,
            indent=1,
        )  # fmt: skip
    print(f"\nraw results: {os.path.relpath(path)}")


PG_CASE = "pg_drain/postgres"


def postgres_section(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """jobledger vs procrastinate on PostgreSQL (`bench_postgres.py`), only when a server
    is reachable (`$JOBLEDGER_BENCH_PG_DSN`, else `$JOBLEDGER_TEST_PG_DSN`, else
    postgres@127.0.0.1:5432/test); otherwise a note on stderr and nothing else."""
    if args.only and not any(o in PG_CASE for o in args.only):
        return [], ""
    from bench_postgres import default_dsn, unavailable

    reason = unavailable(default_dsn())
    if reason is not None:
        sys.stderr.write(f"-- PostgreSQL cases skipped: {reason}\n")
        return [], ""
    cmd = [sys.executable, os.path.join(HERE, "bench_postgres.py"), "--repeat", str(args.repeat)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=3600)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"!! {PG_CASE} timed out after 3600 s\n")
        return [], ""
    sys.stderr.write(f"{PG_CASE}: {round(time.perf_counter() - t, 1)}s\n")
    if proc.returncode != 0:
        sys.stderr.write(f"!! {PG_CASE} failed ({proc.returncode}):\n{proc.stderr[-3000:]}\n")
        return [], ""
    records = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    for r in records:
        r["case"] = PG_CASE
    summary = next((r for r in records if r["bench"] == "pg_drain_summary"), None)
    if summary is None or summary.get("jobledger_rate") is None:
        return records, ""
    rates = summary["rates"]
    lines = [
        f"PostgreSQL {summary['server']}: jobledger vs procrastinate "
        f"{summary['procrastinate_version']}, drain of {summary['n']:,} no-op jobs, "
        "one worker process, concurrency 50",
        "",
        "| benchmark | unit | jobledger | procrastinate | ratio |",
        "|---|---|---:|---:|---:|",
        f"| drain, 1 queue (c=50) | jobs/s | {_fmt(rates['jobledger'])} | "
        f"{_fmt(rates['procrastinate'])} | "
        f"{'' if summary['ratio'] is None else str(summary['ratio']) + 'x'} |",
    ]
    return records, "\n".join(lines)


PEERS_CASE = "peers_quick"


def peers_section(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """`bench/peers.py --quick` (300 jobs, each system once): a check that every peer still
    runs, not a measurement (the comparison is `bench/peers.py --repeat 3`, about ten
    minutes). A peer whose service (Redis, PostgreSQL) is down is skipped with the
    reason on stderr; under `CI=true` peers.py fails instead."""
    if args.only and not any(o in PEERS_CASE for o in args.only):
        return [], ""
    cmd = [sys.executable, os.path.join(HERE, "peers.py"), "--quick"]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=600)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"!! {PEERS_CASE} timed out after 600 s\n")
        return [], ""
    sys.stderr.write(f"{PEERS_CASE}: {round(time.perf_counter() - t, 1)}s\n")
    for line in proc.stderr.splitlines():
        if line.startswith("-- "):
            sys.stderr.write(f"{line}\n")
    if proc.returncode != 0:
        sys.stderr.write(f"!! {PEERS_CASE} failed ({proc.returncode}):\n{proc.stderr[-3000:]}\n")
        return [], ""
    records = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    for r in records:
        r["case"] = PEERS_CASE
    rows = [x for x in proc.stdout.splitlines() if x.startswith("|")]
    if not rows:
        return records, ""
    head = "Against the peers, --quick (300 jobs, once: a smoke run, not a measurement)"
    return records, "\n".join([head, "", *rows])


def _huey_version() -> str:
    try:
        from importlib.metadata import version

        return version("huey")
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
