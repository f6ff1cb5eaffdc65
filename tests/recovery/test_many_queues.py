"""Many queues under one global cap across worker processes (docs/design/lock-layers.md,
"Dispatch at scale"): both caps exact, as the table and the handlers see them, every job
run once, and the queues take turns, so every queue starts early in the drain."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import jobledger as jl
from tests.conftest import db_reader
from tests.recovery import Child, arun, read_markers, spawn, status_counts, wait_for
from tests.recovery.worker_proc import KB, KB_CONCURRENCY, KB_QUEUES

PER_QUEUE = 12
GLOBAL_CAP = 8  # well under KB_QUEUES * KB_CONCURRENCY: the global cap binds throughout


def _overlap(events: list[tuple[float, int]]) -> int:
    """The most intervals open at once; at one instant an end goes first."""
    open_ = best = 0
    for _, delta in sorted(events):
        open_ += delta
        best = max(best, open_)
    return best


def test_three_processes_share_the_global_cap_over_many_queues_in_turn(
    db: str, tmp_path: Path
) -> None:
    producer = jl.JobManager(db)
    children: list[Child] = []
    total = KB_QUEUES * PER_QUEUE
    try:
        for n in range(3):
            children.append(spawn(db, "spread", tmp_path, f"w{n}", "--global-max", str(GLOBAL_CAP)))
        for child in children:
            child.wait_started()
        # Queue after queue: a claim in id order would run kb.0 to its end first.
        payloads = [qi + KB_QUEUES * k for qi in range(KB_QUEUES) for k in range(PER_QUEUE)]
        ids = [h.id for h in producer.enqueue_many(KB, payloads)]
        peak_total = 0
        peak_queue: Counter[str] = Counter()
        with db_reader(db) as read:

            def done() -> bool:
                nonlocal peak_total
                completed = running = 0
                sql = "SELECT status, queue, count(*) FROM jobs GROUP BY status, queue"
                for status, queue, n in read(sql):
                    if status == "running":
                        running += int(n)
                        peak_queue[queue] = max(peak_queue[queue], int(n))
                    elif status == "completed":
                        completed += int(n)
                peak_total = max(peak_total, running)
                return completed == total

            wait_for(done, timeout=90.0, what=f"{total} jobs to complete")
        for child in children:
            assert child.terminate() == 0, child.output()
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.kill9()
        arun(producer.stop)

    assert status_counts(db) == {"completed": total}
    marks = [r for child in children for r in read_markers(child.markers)]
    starts = [m for m in marks if ":start:" in m[3]]
    assert Counter(m[1] for m in starts) == Counter(ids), "each job runs exactly once"
    # The table, sampled from outside every worker.
    assert 0 < peak_total <= GLOBAL_CAP
    assert max(peak_queue.values()) <= KB_CONCURRENCY
    # The handlers: their run intervals, over every process.
    spans: dict[str, list[tuple[float, int]]] = {}
    every: list[tuple[float, int]] = []
    first: dict[str, float] = {}
    for _, _, _, extra in marks:
        queue, edge, at = extra.split(":")
        event = (float(at), 1 if edge == "start" else -1)
        spans.setdefault(queue, []).append(event)
        every.append(event)
        if edge == "start":
            first[queue] = min(first.get(queue, event[0]), event[0])
    assert _overlap(every) <= GLOBAL_CAP
    assert max(_overlap(e) for e in spans.values()) <= KB_CONCURRENCY
    # Turns: every queue has started by the time a fair share of the jobs has. One turn
    # each is KB_QUEUES starts (1/PER_QUEUE of the drain); a queue served to its end
    # before the next would put the last first start at the very end.
    order = sorted(float(m[3].split(":")[2]) for m in starts)
    last_first = max(first.values())
    started_before = sum(1 for t in order if t < last_first)
    assert started_before <= total // 3, (started_before, total)
