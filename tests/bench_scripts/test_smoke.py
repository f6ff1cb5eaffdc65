"""The bench scripts that reach into jobledger's storage run, on a few rows.

`make bench` is not part of `make test`, so a change of the table's layout could break
a script that writes rows itself (`enqueue.py --system sqlite-raw`, `claim_scale.py`)
without any test noticing; these runs catch that, in about a second each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a bench script with its files under `tmp_path`; it must exit 0."""
    env = {**os.environ, "BENCH_TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, *args], cwd=BENCH, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue.py", "--system", "sqlite-raw", "--mode", "many", "-n", "300"],
        ["enqueue.py", "--system", "jobledger", "--mode", "single", "-n", "50"],
        ["claim_scale.py", "--system", "jobledger", "--pending", "400", "-n", "200"],
        ["drain.py", "--system", "jobledger", "-n", "200"],
        ["flow.py", "-n", "300", "--keys", "10", "--only", "base,rate_high,keyed"],
        ["workflows.py", "--chains", "50", "--width", "200"],
        ["otel.py", "-n", "100", "--repeat", "1"],
        ["exactly_once.py", "-n", "200", "--repeat", "1"],
        ["cpu.py", "--one", "jobledger", "-n", "100"],
        ["spread_claim.py", "--queues", "20", "-n", "400", "--take", "10", "--reps", "5"],
    ],
    ids=lambda a: "-".join(a[:3]),
)
def test_a_bench_script_runs_and_reports(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, *args], cwd=BENCH, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert records
    assert all(r["rate"] > 0 for r in records if "rate" in r), records


@pytest.mark.postgres
def test_the_enqueue_bench_runs_on_postgres(tmp_path: Path) -> None:
    from tests.conformance.conftest import PG_DSN, require_postgres

    require_postgres()
    done = run_bench(
        tmp_path, "enqueue.py", "--backend", "postgres", "--dsn", PG_DSN,
        "--mode", "many", "--chunk", "20", "-n", "60",
    )  # fmt: skip
    [record] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert (record["system"], record["n"], record["chunk"]) == ("jobledger-pg", 60, 20)
    assert record["rate"] > 0


# A tiny chaos run (docs/reliability.md): two workers, one kill -9, one SIGSTOP past
# `worker_timeout`, a schedule and ten workflows. Its verdict (exit status 0): nothing
# lost, nothing stuck `running`, no cap exceeded, no worker exited by itself, the
# schedule's grid whole and every workflow done in order. No lock holder: its hold must
# stay under `worker_timeout`, which is short here. Duplicates are at-least-once
# delivery after a kill or a stop, so they are not asserted.
CHAOS_SMOKE = [
    "chaos.py", "--backend", "sqlite", "--seed", "3", "--workers", "2", "--jobs", "60",
    "--duration", "5", "--kills", "1", "--stops", "1", "--locks", "0", "--workflows", "10",
    "--worker-timeout", "1.5", "--heartbeat", "0.2", "--leader-ttl", "1.5",
    "--startup-delay", "0.5", "--drain-timeout", "8", "--recheck", "0",
]  # fmt: skip


def test_a_tiny_chaos_run_loses_nothing_and_keeps_the_caps(tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, *CHAOS_SMOKE], cwd=BENCH, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(records) == 1, done.stdout + done.stderr
    r = records[0]
    assert done.returncode == 0, (r, done.stderr[-3000:])
    assert (r["kills"], r["stops"]) == (1, 1), r["events"]
    assert r["enqueued"] == 60
    assert (r["lost"], r["missing"], r["stuck"]) == (0, 0, 0), r
    assert r["completed"] == 60, r
    assert r["cap_exceeded"] == [], r
    assert r["worker_exits"] == [], r
    assert r["schedule"]["ok"], r["schedule"]
    assert r["schedule"]["fires"] > 0, r["schedule"]
    assert r["workflows"]["ok"], r["workflows"]
    assert r["workflows"]["written"] == 10, r["workflows"]
    assert r["wall_seconds"] < 20, r["wall_seconds"]


def test_the_peers_bench_runs_its_tiny_mode_for_jobledger(tmp_path: Path) -> None:
    """`bench/peers.py --quick`, jobledger's own systems only: the peers (Celery, RQ,
    huey on Redis, dramatiq, procrastinate, pgqueuer) need services and the bench extra,
    so they stay out of `make test`; this checks the driver, the summary and the table."""
    env = {**os.environ, "BENCH_TMPDIR": str(tmp_path)}
    args = ["peers.py", "--quick", "--systems", "jobledger-sqlite,jobledger-handles"]
    done = subprocess.run(
        [sys.executable, *args], cwd=BENCH, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    runs = [r for r in records if r["bench"] == "peers_drain"]
    assert {r["system"] for r in runs} == {"jobledger-sqlite", "jobledger-handles"}, records
    assert all(r["rate"] > 0 and r["n"] == 300 for r in runs), runs
    summary = records[-1]
    assert summary["bench"] == "peers_summary"
    assert summary["failed"] == [], summary
    assert "| jobledger-sqlite |" in done.stdout


@pytest.mark.parametrize("kind", ["handles", "floor"])
def test_the_callgrind_drain_runs_outside_callgrind(kind: str) -> None:
    """It prints nothing (valgrind counts); a run that ends is what can be checked."""
    done = subprocess.run(
        [sys.executable, "callgrind_drain.py", "200", kind, "steady"],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_callgrind_queues_script_runs_outside_callgrind() -> None:
    """It prints nothing (valgrind counts): both of its runs end."""
    for extra in ([], ["prefill"]):
        done = subprocess.run(
            [sys.executable, "callgrind_queues.py", "20", "200", *extra],
            cwd=BENCH,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr


def test_queues_sql_times_the_statements_of_every_case(tmp_path: Path) -> None:
    """One JSON line per queue count: the drain's claims, finalizes and commits were
    timed, the writer's SQL is part of the drain's time, not more, and with checkpoints
    held off the WAL kept every frame the drain wrote, mapped to its b-tree."""
    done = run_bench(tmp_path, "queues_sql.py", "--queues", "1,20", "-n", "300", "--no-checkpoints")
    cases = [
        json.loads(line)
        for line in done.stdout.splitlines()
        if line.startswith("{") and '"queues_sql"' in line
    ]
    assert [c["queues"] for c in cases] == [1, 20]
    for c in cases:
        kinds = set(c["statements"])
        assert "COMMIT" in kinds
        assert any(k.startswith("WITH o (key, id") for k in kinds)  # the batched finalize
        assert 0 < c["sql_us"] <= c["wall_us"]
        assert c["wal_frames_per_job"] > 0
        # Every frame mapped to a b-tree: the job table's pages among them, each commit.
        assert c["commits"] > 0
        assert c["frames_per_commit"]["jobs"] >= 1
    assert "| statement |" in done.stdout
    assert "| WAL frames per commit |" in done.stdout


def test_handles_reports_the_collectors_work_per_case(tmp_path: Path) -> None:
    """`--gc`: each case's line counts the collections of each generation while its clock
    ran; awaiting 500 handles allocates past the youngest generation's threshold."""
    done = run_bench(tmp_path, "handles.py", "-n", "500", "--gc")
    cases = {
        r["bench"]: r
        for r in (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    }
    for case in ("handles_rows", "handles_handles"):
        counts = cases[case]["gc_collections"]
        assert len(counts) == 3
        assert all(c >= 0 for c in counts)
        assert cases[case]["gc_ms"] >= 0
    assert cases["handles_handles"]["gc_collections"][0] >= 1


def test_handles_futures_reference_resolves_every_future(tmp_path: Path) -> None:
    """`--futures`: the reference case gathers one plain future per job, each resolved when
    its job settles (the script exits non-zero if one is left), and the summary carries
    its ratio to the rows drain."""
    done = run_bench(tmp_path, "handles.py", "-n", "300", "--repeat", "2", "--futures")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    futures = [r for r in records if r["bench"] == "handles_futures"]
    assert [r["repeat"] for r in futures] == [0, 1]
    assert all(r["rate"] > 0 for r in futures)
    summary = next(r for r in records if r["bench"] == "handles_summary")
    assert len(summary["futures_ratios"]) == 2
    assert summary["futures_ratio"] > 0
    assert "reference: plain futures" in done.stdout


def test_many_queues_reports_every_outcome_in_its_flushes(tmp_path: Path) -> None:
    """Each run's line counts the finalize flushes of its workers: together they wrote
    every job's outcome once."""
    args = ["many_queues.py", "--queues", "1,20", "--procs", "1", "-n", "300"]
    done = run_bench(tmp_path, *args, "--handler-ms", "1", "--sample-ms", "5")
    runs = [
        json.loads(line)
        for line in done.stdout.splitlines()
        if line.startswith('{"bench": "many_queues",')
    ]
    assert [r["queues"] for r in runs] == [1, 20], runs
    for r in runs:
        assert r["flushes"] > 0, r
        assert 0 <= r["in_waves"] <= 1, r
        # outcomes_per_flush is rounded to 0.1
        assert abs(r["flushes"] * r["outcomes_per_flush"] - 300) <= r["flushes"] * 0.05, r
