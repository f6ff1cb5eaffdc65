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


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue.py", "--system", "sqlite-raw", "--mode", "many", "-n", "300"],
        ["enqueue.py", "--system", "jobledger", "--mode", "single", "-n", "50"],
        ["claim_scale.py", "--system", "jobledger", "--pending", "400", "-n", "200"],
        ["drain.py", "--system", "jobledger", "-n", "200"],
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
