"""Where a drained job's time goes in SQL, at one queue and at many.

    python bench/queues_sql.py                       # 1 and 1,000 queues, 20,000 jobs
    python bench/queues_sql.py --queues 1,100,1000,5000 -n 10000
    python bench/queues_sql.py --no-checkpoints      # the writer's checkpoints held off

The drain of `bench/callgrind_queues.py` (the rows of `bench/many_queues.py`, each
queue's jobs together, drained by one started manager under a global cap of 50 with a
no-op `async def` handler, the claim-ahead budget held at its ceiling), run at full
speed instead of under callgrind. Every statement the writer connection runs is timed
(`time.perf_counter` around `execute`, the writer's connection class wrapped in this
process), grouped by its first words. Reported per queue count: microseconds of the
drain per job (`wall_us`), of which in the writer's statements (`sql_us`), and per
statement kind its microseconds and its runs per job; and the WAL frames the drain wrote
per job (`wal_frames_per_job`: every page its commits wrote, when checkpoints are held
off; with them, what was left since the last one). The wrapper's own cost is in
`wall_us`, about the same at every queue count; compare the cases, not the absolutes.

`--no-checkpoints` keeps the background checkpoint from running (the WAL then grows for
the whole drain), to tell what copying pages back costs the writer's loop beside it.
With it, `frames_per_commit` maps every frame the drain wrote to the b-tree that holds
its page (SQLite's `dbstat` on the file after the drain; a page freed since is
"unmapped"): where a commit's pages are (docs/benchmarks.md, twenty-sixth round).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sqlite3
import struct
import sys
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import callgrind_queues  # noqa: E402
import jobledger._runtime.ahead as ahead  # noqa: E402
import many_queues  # noqa: E402
from _common import emit, fresh_dir  # noqa: E402
from jobledger._storage.sqlite import connections  # noqa: E402


class StatementClock:
    """Time of each statement kind the writer connection runs, while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: Counter[str] = Counter()
        self.runs: Counter[str] = Counter()
        self._kinds: dict[str, str] = {}

    def install(self) -> None:
        plain = sqlite3.Connection.execute
        clock = self

        def execute(conn: sqlite3.Connection, sql: str, *args: Any) -> sqlite3.Cursor:
            if not clock.on:
                return plain(conn, sql, *args)
            began = time.perf_counter()
            try:
                return plain(conn, sql, *args)
            finally:
                kind = clock._kind(sql)
                clock.seconds[kind] += time.perf_counter() - began
                clock.runs[kind] += 1

        connections.WriterConnection.execute = execute  # type: ignore[method-assign,assignment]

    def _kind(self, sql: str) -> str:
        kind = self._kinds.get(sql)
        if kind is None:
            kind = self._kinds[sql] = re.sub(r"\s+", " ", sql)[:48]
        return kind

    def reset(self) -> None:
        self.seconds.clear()
        self.runs.clear()


def frames_by_btree(wal_copy: str, db: str) -> tuple[int, Counter[str]]:
    """The commits in a WAL file and its frames per b-tree of `db` (by page number)."""
    with sqlite3.connect(db) as conn:
        names = {int(p): str(name) for p, name in conn.execute("SELECT pageno, name FROM dbstat")}
    conn.close()
    with open(wal_copy, "rb") as f:
        data = f.read()
    page = struct.unpack(">I", data[8:12])[0]
    frames: Counter[str] = Counter()
    commits = 0
    at = 32  # the WAL header; then frames of a 24-byte header and a page
    while at + 24 <= len(data):
        pgno, size_after = struct.unpack(">II", data[at : at + 8])
        frames[names.get(pgno, "unmapped")] += 1
        commits += size_after != 0  # a commit's last frame records the file's size
        at += 24 + page
    return commits, frames


def measure(queues: int, n: int, clock: StatementClock, by_btree: bool) -> dict[str, Any]:
    with fresh_dir() as d:
        path = os.path.join(d, "jobs.db")
        many_queues.prefill(path, n, queues)
        with sqlite3.connect(path) as conn:  # the prefill's frames out of the WAL
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        conn.close()
        clock.reset()
        clock.on = True
        began = time.perf_counter()
        wal_copy = os.path.join(d, "drain.wal")

        def at_end() -> int:
            # The WAL once the last job ran, before `stop` checkpoints the file.
            if by_btree:
                shutil.copyfile(path + "-wal", wal_copy)
            return os.path.getsize(path + "-wal")

        try:
            wal = asyncio.run(callgrind_queues.drain(path, queues, n, at_end))
        finally:
            clock.on = False
        wall = time.perf_counter() - began
        commits, frames = frames_by_btree(wal_copy, path) if by_btree else (0, Counter())
    assert wal is not None
    per_job = {k: round(s / n * 1e6, 2) for k, s in clock.seconds.most_common()}
    return {
        "queues": queues,
        "n": n,
        "wall_us": round(wall / n * 1e6, 1),
        "sql_us": round(sum(clock.seconds.values()) / n * 1e6, 1),
        # With checkpoints held off the WAL only grows: its frames are every page the
        # drain's commits wrote (a header of 32 bytes, then frames of 24 + a page).
        "wal_frames_per_job": round(max(wal - 32, 0) / (24 + page) / n, 3),
        "statements": per_job,
        "runs_per_job": {k: round(c / n, 4) for k, c in clock.runs.items()},
        "commits": commits,
        "frames_per_commit": {k: round(c / max(commits, 1), 1) for k, c in frames.most_common()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--queues", default="1,1000", help="comma-separated queue counts")
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--no-checkpoints", action="store_true")
    args = p.parse_args()
    ahead.LAG_HIGH = float("inf")  # as callgrind_queues.py: batches of 50 throughout
    if args.no_checkpoints:
        connections.CHECKPOINT_EVERY_CHANGES = 2**62
    clock = StatementClock()
    clock.install()
    results = []
    for queues in (int(x) for x in args.queues.split(",")):
        r = measure(queues, args.n, clock, args.no_checkpoints)
        results.append(r)
        emit("queues_sql", "jobledger", "NORMAL", checkpoints=not args.no_checkpoints, **r)
    kinds = sorted(
        {k for r in results for k in r["statements"]},
        key=lambda k: -max(r["statements"].get(k, 0.0) for r in results),
    )
    print("\n| statement | " + " | ".join(f"{r['queues']:,} q, us/job" for r in results) + " |")
    print("|---|" + "---:|" * len(results))
    for label, key in (("whole drain", "wall_us"), ("writer's SQL", "sql_us")):
        print(f"| {label} | " + " | ".join(str(r[key]) for r in results) + " |")
    for k in kinds[:12]:
        cells = " | ".join(str(r["statements"].get(k, 0.0)) for r in results)
        print(f"| `{k}` | {cells} |")
    trees = sorted(
        {k for r in results for k in r["frames_per_commit"]},
        key=lambda k: -max(r["frames_per_commit"].get(k, 0.0) for r in results),
    )
    if trees:
        heads = " | ".join(f"{r['queues']:,} q" for r in results)
        print(f"\n| WAL frames per commit | {heads} |")
        print("|---|" + "---:|" * len(results))
        for k in trees:
            cells = " | ".join(str(r["frames_per_commit"].get(k, 0.0)) for r in results)
            print(f"| `{k}` | {cells} |")


if __name__ == "__main__":
    main()
