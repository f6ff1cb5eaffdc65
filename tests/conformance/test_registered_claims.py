"""A worker's claim (`registered=True`) takes rows only while its worker row is live.

A worker judged dead has its row deleted by the rescue; if it could still claim, its new
claims would belong to a worker nobody knows, and no rescue would ever look for them (the
chaos run in docs/reliability.md found exactly that). `unregistered_claimers` names the
owners of such rows, so a rescue can treat them as dead.
"""

from __future__ import annotations

from jobledger._core.recovery import plan_recovery
from jobledger._types import RecoveryStrategy
from tests.conformance import ConformantStore, claim, new_job


def _claim_registered(store: ConformantStore, worker: str) -> tuple[list[str], bool]:
    got = store.claim(
        "q",
        queue_cap=100,
        global_cap=1_000,
        limit=10,
        now_ms=10_000,
        worker_id=worker,
        types=("t.a",),
        registered=True,
    )
    return [j.id for j in got.jobs], got.unregistered


def test_an_unregistered_or_stopped_worker_claims_nothing(store: ConformantStore) -> None:
    job = new_job()
    store.enqueue([job])
    assert _claim_registered(store, "w1") == ([], True)
    store.register_worker("w1", "host", 1, ["t.a=retry"], 5)
    store.stop_worker("w1", 6)
    assert _claim_registered(store, "w1") == ([], True)
    store.register_worker("w1", "host", 1, ["t.a=retry"], 7)  # registered again
    assert _claim_registered(store, "w1") == ([job.id], False)


def test_rows_claimed_under_an_unknown_worker_are_found_and_recoverable(
    store: ConformantStore,
) -> None:
    a, b = new_job(), new_job()
    store.enqueue([a, b])
    store.register_worker("live", "host", 1, [], 5)
    assert [j.id for j in claim(store, worker="ghost", limit=1).jobs] == [a.id]
    assert [j.id for j in claim(store, worker="live", limit=1).jobs] == [b.id]
    assert store.unregistered_claimers() == ["ghost"]
    strategies: dict[str, RecoveryStrategy] = {"t.a": "retry"}
    stats = store.recover_worker(
        "ghost", lambda rows: plan_recovery(rows, strategies.get), lambda why: "{}", 9
    )
    assert (stats.reset, stats.kept, stats.cancelled) == (1, 0, [])
    assert store.unregistered_claimers() == []
    row = store.get(a.id)
    assert row is not None
    assert row[2] == "pending"
