"""Workflows across real worker processes (DESIGN §8.8, issue 23), on both backends: a
worker killed with SIGKILL in the middle of a 50-step graph and a new one finishing it,
two processes sharing one graph, and the rescue of a step whose worker died.

The children are `tests.recovery.worker_proc` in mode `workflow`: each step records its
start (with the `ctx.upstream` it was given) and its effect ("done") in an O_APPEND file
of its process, outside the job table, so "ran once" is checked against a record the
table cannot rewrite. A step the test needs running at a kill is held (`--hold`) by a
file that never appears, so what was running when the process died is known exactly,
never guessed from timing. The next worker rescues a dead process's rows at start (its
pid is gone on this host), as `tests/recovery/test_crash.py` relies on.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jobledger as jl
from tests.conftest import db_rows
from tests.recovery import Child, arun, read_markers, spawn, status_counts, wait_for
from tests.recovery.worker_proc import WF


@dataclass(frozen=True)
class Run:
    """One line of a child's markers: a step started (with what it saw) or finished."""

    job_id: str
    attempt: int
    kind: str  # "start" or "done"
    step: str
    upstream: dict[str, Any] | None  # for "start"


def runs(child: Child) -> list[Run]:
    out = []
    for type_name, job_id, attempt, extra in read_markers(child.markers):
        assert type_name == WF.name
        kind, rest = extra.split(":", 1)
        if kind == "start":
            step, seen = rest.split(":", 1)
            out.append(Run(job_id, attempt, kind, step, json.loads(seen)))
        else:
            out.append(Run(job_id, attempt, kind, rest, None))
    return out


@dataclass
class Graph:
    """The steps a test enqueues and what each must output and see upstream: a step
    returns its value plus the sum of its upstream outputs (`worker_proc.wf_total`)."""

    steps: dict[str, tuple[list[int], list[str]]] = field(default_factory=dict)  # values, after

    def add(self, name: str, value: int, after: list[str] | None = None) -> None:
        self.steps[name] = ([value], after or [])

    def add_many(self, name: str, values: list[int], after: list[str] | None = None) -> None:
        self.steps[name] = (values, after or [])

    def outputs(self) -> dict[str, list[int]]:
        """Each step's outputs, one per job, in order (the steps are added in order)."""
        out: dict[str, list[int]] = {}
        for name, (values, after) in self.steps.items():
            total = sum(sum(out[u]) for u in after)
            out[name] = [v + total for v in values]
        return out

    def upstream(self, name: str) -> dict[str, Any]:
        """What `ctx.upstream` must hold for a job of `name`."""
        out = self.outputs()
        many = {n for n, (values, _) in self.steps.items() if len(values) > 1}
        return {u: out[u] if u in many else out[u][0] for u in self.steps[name][1]}

    def enqueue(
        self, jobs: jl.JobManager, meet: tuple[str, Path] | None = None
    ) -> jl.WorkflowHandle:
        """Write the graph; with `meet=(step, path)`, that step's jobs rendezvous."""
        wf = jobs.workflow("proc")
        for name, (values, after) in self.steps.items():
            extra = {"meet": str(meet[1])} if meet and meet[0] == name else {}
            payloads = [{"name": name, "value": v, **extra} for v in values]
            if len(values) > 1:
                wf.add_many(WF, payloads, name=name, after=after)
            else:
                wf.add(WF, payloads[0], name=name, after=after)
        return wf.enqueue()


def enqueue(db: str, graph: Graph, meet: tuple[str, Path] | None = None) -> jl.WorkflowHandle:
    producer = jl.JobManager(db)  # never started: it only writes the graph
    try:
        return graph.enqueue(producer, meet)
    finally:
        arun(producer.stop)


def step_rows(db: str, handle: jl.WorkflowHandle) -> dict[str, list[tuple[Any, ...]]]:
    """Step name -> (id, status, attempt, output, started_at, finished_at, worker_id,
    upstream_left) of its jobs, in the step's order, read from the table."""
    rows = db_rows(
        db,
        "SELECT id, status, attempt, output, started_at, finished_at, worker_id,"
        " upstream_left FROM jobs",
    )
    by_id = {str(r[0]): tuple(r) for r in rows}
    return {step: [by_id[h.id] for h in hs] for step, hs in handle.jobs.items()}


def stop_all(children: list[Child]) -> None:
    for child in children:
        if child.proc.poll() is None:
            child.kill9()


# -- kill -9 in the middle of a 50-step graph -------------------------------------------

WIDTH, LAYERS = 6, 8
HELD = "s4_0"  # in the middle: 24 steps done before it, 25 waiting after it


def layered() -> Graph:
    """A root, LAYERS layers of WIDTH steps each after every step of the layer before,
    and a sink: 50 steps, each of layers 2 to 8 and the sink seeing six upstream
    outputs."""
    g = Graph()
    g.add("s0", 1)
    previous = ["s0"]
    for layer in range(1, LAYERS + 1):
        names = [f"s{layer}_{i}" for i in range(WIDTH)]
        for i, name in enumerate(names):
            g.add(name, 10 * layer + i, previous)
        previous = names
    g.add("s9", 0, previous)
    assert len(g.steps) == 50
    return g


def test_a_worker_killed_mid_graph_and_a_new_one_finish_it_each_effect_once(
    db: str, tmp_path: Path
) -> None:
    graph = layered()
    handle = enqueue(db, graph)
    held_layer = [f"s4_{i}" for i in range(WIDTH)]
    children = [spawn(db, "workflow", tmp_path, "w1", "--hold", HELD)]
    try:
        dead_id = children[0].wait_started()

        def held_and_layer_done() -> bool:
            started = any(r.step == HELD and r.kind == "start" for r in runs(children[0]))
            rows = step_rows(db, handle)
            others = [rows[s][0][1] for s in held_layer if s != HELD]
            return started and others == ["completed"] * (WIDTH - 1)

        wait_for(held_and_layer_done, what="the held step to run beside a finished layer")
        children[0].kill9()

        # What was running at the kill, read from the table the corpse left.
        at_kill = step_rows(db, handle)
        running = {s for s, rows in at_kill.items() if rows[0][1] == "running"}
        assert running == {HELD}
        assert at_kill[HELD][0][6] == dead_id
        assert status_counts(db) == {"completed": 24, "running": 1, "waiting": 25}
        for layer in range(5, LAYERS + 1):
            assert at_kill[f"s{layer}_0"][0][1] == "waiting"  # nothing released early

        children.append(spawn(db, "workflow", tmp_path, "w2"))
        children[1].wait_started()
        wait_for(lambda: status_counts(db) == {"completed": 50}, what="the new worker to finish")
        for child in children[1:]:
            assert child.terminate() == 0, child.output()
    finally:
        stop_all(children)

    first, second = runs(children[0]), runs(children[1])
    starts = Counter(r.step for r in first + second if r.kind == "start")
    dones = Counter(r.step for r in first + second if r.kind == "done")
    assert set(starts) == set(dones) == set(graph.steps)
    # At-least-once: only the step running at the kill ran twice; every effect once.
    assert {s for s, n in starts.items() if n > 1} == running
    assert starts[HELD] == 2
    assert set(dones.values()) == {1}
    assert {r.step for r in first if r.kind == "done"} | {HELD} == {
        s for s, rows in at_kill.items() if rows[0][1] in ("completed", "running")
    }
    # Once in each process; a rescue puts the row back without spending an attempt.
    held_starts = [[r.attempt for r in rs if (r.step, r.kind) == (HELD, "start")]
                   for rs in (first, second)]  # fmt: skip
    assert held_starts == [[0], [0]]
    waiting = {s for s, rows in at_kill.items() if rows[0][1] == "waiting"}
    assert {r.step for r in second if r.kind == "start"} == waiting | {HELD}
    # Every run, the killed one too, saw its upstream steps' real outputs.
    for r in first + second:
        if r.kind == "start":
            assert r.upstream == graph.upstream(r.step), r.step
    expected = graph.outputs()
    final = step_rows(db, handle)
    for step, rows in final.items():
        assert [json.loads(row[3]) for row in rows] == expected[step], step
    reader = jl.JobManager(db)
    try:
        snap = reader.get_workflow(handle.id)
        assert snap is not None
        assert snap.status == "completed"
        assert len(snap.jobs) == 50
    finally:
        arun(reader.stop)


# -- two worker processes share one graph -------------------------------------------------

FAN = 40
CHAIN = 5


def fan_and_chain() -> Graph:
    """root -> 40 parallel steps (one `add_many`) -> join -> a chain of five."""
    g = Graph()
    g.add("root", 1000)
    g.add_many("fan", list(range(FAN)), ["root"])
    g.add("join", 0, ["fan"])
    previous = "join"
    for k in range(1, CHAIN + 1):
        g.add(f"c{k}", k, [previous])
        previous = f"c{k}"
    return g


def test_two_processes_share_a_graph_each_job_once_and_the_join_sees_all_outputs(
    db: str, tmp_path: Path
) -> None:
    graph = fan_and_chain()
    total = 1 + FAN + 1 + CHAIN
    # Four slots a process: the first process to see the fan-out cannot take all of it,
    # and its fan steps wait (`meet`) until the other process runs one too.
    children = [spawn(db, "workflow", tmp_path, f"w{n}", "--process-max", "4") for n in range(2)]
    try:
        ids = [child.wait_started() for child in children]
        handle = enqueue(db, graph, meet=("fan", tmp_path / "met"))
        wait_for(
            lambda: status_counts(db) == {"completed": total},
            what=f"the {total} jobs to complete",
        )
        for child in children:
            assert child.terminate() == 0, child.output()
    finally:
        stop_all(children)

    per_child = [runs(child) for child in children]
    every = [r for rs in per_child for r in rs]
    all_ids = {h.id for hs in handle.jobs.values() for h in hs}
    assert len(all_ids) == total
    for kind in ("start", "done"):
        per_job = Counter(r.job_id for r in every if r.kind == kind)
        assert set(per_job) == all_ids
        assert set(per_job.values()) == {1}, f"a job's {kind} ran twice"
    for worker_id, rs in zip(ids, per_child, strict=True):
        assert any(r.step == "fan" for r in rs), f"{worker_id} ran none of the fan-out"
    # Each job saw its upstream jobs' outputs, which exist only once they completed: so
    # none started early. (The rows' times cannot show it across processes: a claim
    # reads its clock before it waits for the write lock of the finalize it follows.)
    for r in every:
        if r.kind == "start":
            assert r.upstream == graph.upstream(r.step), r.step
    join = next(r for r in every if r.step == "join" and r.kind == "start")
    assert join.upstream == {"fan": [1000 + i for i in range(FAN)]}  # all 40, in order
    rows = step_rows(db, handle)
    expected = graph.outputs()
    for step, step_jobs in rows.items():
        assert [json.loads(row[3]) for row in step_jobs] == expected[step], step


# -- a step whose worker died is rescued, retried, and only then releases ------------------


def test_a_rescued_step_is_retried_and_releases_its_downstream_only_when_it_completes(
    db: str, tmp_path: Path
) -> None:
    graph = Graph()
    graph.add("a", 7)
    graph.add("b", 1, ["a"])
    graph.add("c", 100, ["a"])
    handle = enqueue(db, graph)
    children = [spawn(db, "workflow", tmp_path, "w1", "--hold", "a")]
    try:
        children[0].wait_started()
        wait_for(lambda: runs(children[0]), what="step a to start")
        children[0].kill9()
        assert status_counts(db) == {"running": 1, "waiting": 2}

        # The new worker rescues a and runs it again, held too, so the test can look at
        # the downstream steps while the retry is in flight.
        children.append(spawn(db, "workflow", tmp_path, "w2", "--hold", "a"))
        live_id = children[1].wait_started()
        wait_for(lambda: runs(children[1]), what="the retry of a to start")
        for _ in range(10):  # the claim, the heartbeats and the polls go on meanwhile
            rows = step_rows(db, handle)
            a_status, a_attempt, a_worker = rows["a"][0][1], rows["a"][0][2], rows["a"][0][6]
            # The rescue put the row back without spending an attempt (the first is 0).
            assert (a_status, a_attempt, a_worker) == ("running", 0, live_id)
            for down in ("b", "c"):
                assert (rows[down][0][1], rows[down][0][7]) == ("waiting", 1), down
            time.sleep(0.02)
        Path(f"{children[1].markers}.go").touch()
        wait_for(lambda: status_counts(db) == {"completed": 3}, what="the workflow to finish")
        assert children[1].terminate() == 0, children[1].output()
    finally:
        stop_all(children)

    first, second = runs(children[0]), runs(children[1])
    assert [(r.step, r.kind) for r in first] == [("a", "start")]
    # In the new worker's own record: a finished before either downstream step started.
    events = [(r.step, r.kind) for r in second]
    assert events[:2] == [("a", "start"), ("a", "done")]
    assert sorted(events[2:]) == [("b", "done"), ("b", "start"), ("c", "done"), ("c", "start")]
    # And each read a's output, which the table holds only once a completed.
    for r in second:
        if r.kind == "start" and r.step != "a":
            assert r.upstream == {"a": 7}, r.step
    rows = step_rows(db, handle)
    assert [json.loads(rows[s][0][3]) for s in ("a", "b", "c")] == [7, 8, 107]
