"""The console's workflow reads (`list_workflows`, `count_workflows`, `workflow_edges`):
what a listing counts, how it pages, and which edges belong to a workflow."""

from __future__ import annotations

from jobledger._core.ids import new_id
from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow, NewWorkflow, Outcome, fresh_row
from jobledger._storage.observe import STATUSES
from tests.conformance import Backend, ConformantStore, claim, new_job

# (step, jobs, upstream steps)
Graph = list[tuple[str, int, list[str]]]
DIAMOND: Graph = [
    ("top", 1, []),
    ("left", 1, ["top"]),
    ("right", 2, ["top"]),
    ("join", 1, ["left", "right"]),
]


def write_workflow(
    store: ConformantStore, name: str, graph: Graph, *, at: int
) -> tuple[str, dict[str, list[str]]]:
    """Write `graph` as the workflow `name` created at `at`; its id and each step's job
    ids."""
    wf_id = new_id(at)
    rows: list[JobRow] = []
    left: list[int] = []
    edges: list[tuple[str, str, str, bool]] = []
    ids: dict[str, list[str]] = {}
    for step, n, ups in graph:
        ids[step] = []
        for _ in range(n):
            base = fresh_row(new_job(created_at=at))
            n_up = sum(len(ids[u]) for u in ups)
            row = (
                *base[: L.C_STATUS],
                "waiting" if n_up else "pending",
                *base[L.C_STATUS + 1 : L.C_WORKFLOW],
                wf_id,
                step,
            )
            for u in ups:
                edges.extend((up, row[L.C_ID], "cancel", len(ids[u]) > 1) for up in ids[u])
            rows.append(row)
            left.append(n_up)
            ids[step].append(row[L.C_ID])
    store.enqueue_workflow(NewWorkflow(wf_id, name, at, rows, left, edges))
    return wf_id, ids


def counts(**nonzero: int) -> tuple[int, ...]:
    return tuple(nonzero.get(s, 0) for s in STATUSES)


def test_a_listing_counts_each_workflows_jobs_per_status(store: ConformantStore) -> None:
    first, _ = write_workflow(store, "etl", DIAMOND, at=1_000)
    second, _ = write_workflow(store, "ingest", [("only", 3, [])], at=2_000)
    found = store.list_workflows(limit=10)
    assert [(w.id, w.name, w.created_at) for w in found] == [
        (second, "ingest", 2_000),
        (first, "etl", 1_000),
    ]
    assert found[0].counts == counts(pending=3)
    assert found[1].counts == counts(pending=1, waiting=4)
    assert store.count_workflows() == 2


def test_the_counts_follow_the_jobs(store: ConformantStore) -> None:
    _, ids = write_workflow(store, "etl", DIAMOND, at=1_000)
    taken = claim(store, now=5_000).jobs
    assert [j.id for j in taken] == ids["top"]
    store.finalize([Outcome(ids["top"][0], "w1", taken[0].attempt, "failed")], 6_000)
    (record,) = store.list_workflows(limit=1)
    # The failed root cancels everything below it (the release trigger).
    assert record.counts == counts(failed=1, cancelled=4)


def test_listings_page_newest_first_and_filter_by_name(store: ConformantStore) -> None:
    made = [write_workflow(store, "a" if i % 2 else "b", [("s", 1, [])], at=1_000 + i)[0]
            for i in range(5)]  # fmt: skip
    newest_first = made[::-1]
    assert [w.id for w in store.list_workflows(limit=2)] == newest_first[:2]
    assert [w.id for w in store.list_workflows(limit=2, offset=2)] == newest_first[2:4]
    assert [w.id for w in store.list_workflows(limit=10, offset=5)] == []
    assert [w.id for w in store.list_workflows(limit=10, name="a")] == made[1::2][::-1]
    assert store.count_workflows(name="a") == 2
    assert store.count_workflows(name="nobody") == 0
    assert store.list_workflows(limit=10, name="nobody") == []


def test_a_workflow_without_jobs_lists_with_zero_counts(backend: Backend) -> None:
    store = backend.store
    wf, ids = write_workflow(store, "gone", [("s", 1, [])], at=1_000)
    backend.execute("DELETE FROM jobs WHERE id = ?", (ids["s"][0],))
    (record,) = store.list_workflows(limit=5)
    assert (record.id, record.counts) == (wf, counts())


def test_edges_are_those_into_the_workflows_jobs(store: ConformantStore) -> None:
    wf, ids = write_workflow(store, "etl", DIAMOND, at=1_000)
    other, _ = write_workflow(store, "other", [("x", 1, [])], at=2_000)
    top, left, (r1, r2), join = ids["top"][0], ids["left"][0], ids["right"], ids["join"][0]
    assert store.workflow_edges(wf) == [
        (top, left, "cancel", False),
        (top, r1, "cancel", False),
        (top, r2, "cancel", False),
        (left, join, "cancel", False),
        (r1, join, "cancel", True),
        (r2, join, "cancel", True),
    ]
    assert store.workflow_edges(other) == []
    assert store.workflow_edges("no-such-workflow") == []


def test_an_edge_from_a_job_of_another_workflow_belongs_to_the_downstream_one(
    backend: Backend,
) -> None:
    store = backend.store
    old, old_ids = write_workflow(store, "old", [("parse", 2, [])], at=1_000)
    new, new_ids = write_workflow(store, "new", [("index", 1, [])], at=2_000)
    index = new_ids["index"][0]
    # No operation writes such an edge yet (a workflow built on an earlier one's jobs).
    for up in old_ids["parse"]:
        if backend.name == "sqlite":
            backend.execute(
                "INSERT INTO job_deps (upstream_key, job_key, policy, many) SELECT u.rowid, "
                "j.rowid, 'run', 1 FROM jobs u, jobs j WHERE u.id = ? AND j.id = ?",
                (up, index),
            )
        else:
            backend.execute(
                "INSERT INTO job_deps (upstream_id, job_id, policy, many) "
                "VALUES (?, ?, 'run', true)",
                (up, index),
            )
    assert store.workflow_edges(new) == [(up, index, "run", True) for up in old_ids["parse"]]
    assert store.workflow_edges(old) == []
