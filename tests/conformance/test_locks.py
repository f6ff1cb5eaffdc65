"""Durable named locks (layer 3): held by a running job under its claim."""

from __future__ import annotations

from jobledger._core.recovery import plan_recovery
from tests.conformance import Backend, ConformantStore, claim, new_job, outcome


def _run_two(store: ConformantStore) -> tuple[str, str]:
    a, b = new_job(), new_job()
    store.enqueue([a, b])
    claimed = claim(store, worker="w1", limit=1).jobs + claim(store, worker="w2", limit=1).jobs
    assert [c.id for c in claimed] == [a.id, b.id]
    return a.id, b.id


def test_a_held_lock_excludes_other_running_jobs(store: ConformantStore) -> None:
    a, b = _run_two(store)
    assert store.try_lock("res", a, "w1", 1) is True
    assert store.try_lock("res", b, "w2", 2) is False
    assert store.try_lock("other", b, "w2", 2) is True


def test_the_holder_may_take_its_lock_again(store: ConformantStore) -> None:
    a, _ = _run_two(store)
    assert store.try_lock("res", a, "w1", 1) is True
    assert store.try_lock("res", a, "w1", 2) is True


def test_release_frees_the_lock_but_only_for_its_holder(store: ConformantStore) -> None:
    a, b = _run_two(store)
    assert store.try_lock("res", a, "w1", 1)
    store.release_lock("res", b, "w2", 0)  # not the holder: no effect
    assert store.try_lock("res", b, "w2", 2) is False
    store.release_lock("res", a, "w1", 0)
    assert store.try_lock("res", b, "w2", 3) is True


def test_a_stale_attempts_release_leaves_the_rescuers_lock(store: ConformantStore) -> None:
    a, other = new_job(), new_job()
    store.enqueue([a, other])
    assert [c.id for c in claim(store, worker="w1", limit=1).jobs] == [a.id]
    assert store.try_lock("res", a.id, "w1", 1)
    # w1 is judged dead and `a` goes back to work; w2 takes it, and its lock.
    assert store.release_unconfirmed_claims("w1", [], 2) == 1
    assert [c.id for c in claim(store, worker="w2", limit=1).jobs] == [a.id]
    assert store.try_lock("res", a.id, "w2", 3) is True
    # w1 resumes and its stale run releases: the fence keeps w2's lock.
    store.release_lock("res", a.id, "w1", 0)
    assert [c.id for c in claim(store, worker="w3", limit=1).jobs] == [other.id]
    assert store.try_lock("res", other.id, "w3", 4) is False
    store.release_lock("res", a.id, "w2", 0)
    assert store.try_lock("res", other.id, "w3", 5) is True


def test_unconfirmed_claims_go_back_except_those_kept(store: ConformantStore) -> None:
    a, b, c = new_job(), new_job(), new_job()
    store.enqueue([a, b, c])
    assert len(claim(store, worker="w1", limit=3).jobs) == 3
    assert store.release_unconfirmed_claims("w1", [b.id], 7) == 2
    rows = {j.id: store.get(j.id) for j in (a, b, c)}
    statuses = {i: r[2] for i, r in rows.items() if r is not None}
    assert statuses == {a.id: "pending", b.id: "running", c.id: "pending"}
    assert store.release_unconfirmed_claims("w2", [], 8) == 0


def test_a_lock_is_free_once_its_holder_no_longer_runs_under_its_claim(
    store: ConformantStore,
) -> None:
    a, b = _run_two(store)
    assert store.try_lock("res", a, "w1", 1)
    # The holder finished without releasing (release_locks=False): the row stays, but it
    # no longer guards anything.
    store.finalize([outcome(a, worker="w1")], 5)
    assert store.try_lock("res", b, "w2", 6) is True
    assert store.try_lock("res", a, "w1", 7) is False


def test_a_lock_taken_under_a_stale_claim_is_free(store: ConformantStore) -> None:
    a, b = _run_two(store)
    # A lock row naming the right job but another worker (a claim that is gone).
    assert store.try_lock("res", a, "ghost", 1)
    assert store.try_lock("res", b, "w2", 2) is True


def test_finalize_with_release_locks_deletes_the_jobs_lock_rows(backend: Backend) -> None:
    store = backend.store
    a, b = _run_two(store)
    assert store.try_lock("l1", a, "w1", 1)
    assert store.try_lock("l2", a, "w1", 1)
    assert store.try_lock("l3", b, "w2", 1)
    store.finalize([outcome(a, worker="w1", release_locks=True)], 5)
    assert backend.rows("SELECT name FROM locks ORDER BY name") == [("l3",)]
    store.finalize([outcome(b, worker="w2", release_locks=False)], 6)
    assert backend.rows("SELECT name FROM locks ORDER BY name") == [("l3",)]


def test_a_stale_finalize_never_releases_the_locks_of_a_new_claim(backend: Backend) -> None:
    store = backend.store
    job = new_job()
    store.enqueue([job])
    assert claim(store, worker="w1").jobs
    # w1 is presumed dead: its row is reset and re-claimed by w2, which takes a lock.
    stats = store.recover_worker(
        "w1", lambda rows: plan_recovery(rows, lambda _t: "retry"), lambda m: m, 2
    )
    assert stats.reset == 1
    assert claim(store, worker="w2").jobs
    assert store.try_lock("res", job.id, "w2", 3)
    # w1 was alive after all and finishes late: its fence fails and must not free w2's lock.
    assert store.finalize([outcome(job.id, worker="w1", release_locks=True)], 4) == [None]
    other = new_job()
    store.enqueue([other])
    assert claim(store, worker="w3").jobs
    assert store.try_lock("res", other.id, "w3", 5) is False


def test_force_cancel_releases_the_jobs_locks(backend: Backend) -> None:
    store = backend.store
    a, b = _run_two(store)
    assert store.try_lock("res", a, "w1", 1)
    assert store.force_cancel(a, "w2", 0, "{}", 2) is None  # not a's claim
    assert backend.rows("SELECT job_id FROM locks") == [(a,)]
    assert store.force_cancel(a, "w1", 0, "{}", 2) is not None
    assert backend.rows("SELECT job_id FROM locks") == []
    assert store.try_lock("res", b, "w2", 3) is True
