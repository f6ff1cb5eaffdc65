"""finalize_and_claim: the outcomes, then a claim that counts the slots they freed."""

from __future__ import annotations

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import ClaimRequest
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome


def _request(
    *, queue_cap: int = 2, global_cap: int = 1_000, limit: int = 2, worker: str = "w1"
) -> ClaimRequest:
    return ClaimRequest("q", queue_cap, global_cap, limit, worker, ("t.a",))


def _two_running_two_pending(store: ConformantStore) -> tuple[list[str], list[str]]:
    jobs = [new_job() for _ in range(4)]
    store.enqueue(jobs)
    running = [c.id for c in claim(store, queue_cap=2, limit=2).jobs]
    assert running == [jobs[0].id, jobs[1].id]
    return running, [jobs[2].id, jobs[3].id]


def test_the_claim_takes_the_slots_the_outcomes_freed(store: ConformantStore) -> None:
    running, pending = _two_running_two_pending(store)
    rows, taken = store.finalize_and_claim(
        [outcome(running[0]), outcome(running[1], "failed", want_row=False)], 20_000, _request()
    )
    assert col(rows[0], L.C_STATUS) == "completed"
    assert col(store.get(running[1]), L.C_STATUS) == "failed"
    assert taken is not None
    assert [c.id for c in taken.jobs] == pending  # in claim order, the cap of 2 exact
    for job_id in pending:
        row = store.get(job_id)
        assert (col(row, L.C_STATUS), col(row, L.C_WORKER)) == ("running", "w1")
        assert col(row, L.C_STARTED_AT) == 20_000


def test_a_stale_outcome_frees_no_slot(store: ConformantStore) -> None:
    running, pending = _two_running_two_pending(store)
    rows, taken = store.finalize_and_claim(
        [outcome(running[0]), outcome(running[1], worker="intruder")], 20_000, _request()
    )
    assert rows[1] is None
    assert col(store.get(running[1]), L.C_STATUS) == "running"
    assert taken is not None
    assert [c.id for c in taken.jobs] == pending[:1]  # one slot freed, one taken


def test_the_claim_counts_other_workers_running_jobs(backend: Backend) -> None:
    store = backend.store
    running, pending = _two_running_two_pending(store)
    other = new_job(queue="other")
    store.enqueue([other])
    assert [c.id for c in claim(store, "other", worker="w2").jobs] == [other.id]
    # Global cap 2: w2's job holds one slot, so one of the two freed is left to take.
    rows, taken = store.finalize_and_claim(
        [outcome(running[0]), outcome(running[1])], 20_000, _request(global_cap=2)
    )
    assert all(r is not None for r in rows)
    assert taken is not None
    assert [c.id for c in taken.jobs] == pending[:1]
    assert taken.global_blocked


def test_nothing_to_take_leaves_the_outcomes_written(store: ConformantStore) -> None:
    job = new_job()
    store.enqueue([job])
    [claimed] = claim(store).jobs
    rows, taken = store.finalize_and_claim([outcome(claimed.id)], 20_000, _request())
    assert col(rows[0], L.C_STATUS) == "completed"
    assert taken is not None
    assert (taken.jobs, taken.global_blocked) == ([], False)


@pytest.mark.parametrize("queue_cap", [1, 2])
def test_the_queue_cap_counts_what_is_still_running(backend: Backend, queue_cap: int) -> None:
    store = backend.store
    running, pending = _two_running_two_pending(store)
    [row], taken = store.finalize_and_claim(
        [outcome(running[0])], 20_000, _request(queue_cap=queue_cap, limit=5)
    )
    assert col(row, L.C_STATUS) == "completed"
    assert taken is not None
    # running[1] still holds a slot: cap 1 is full, cap 2 has one free.
    assert [c.id for c in taken.jobs] == pending[: queue_cap - 1]
    # `queue_full` is a hint a backend may leave False (see ClaimResult); SQLite sets it.
    assert taken.queue_full is (queue_cap == 1 and backend.name == "sqlite")


def _refuse_claims(backend: Backend) -> None:
    """Fault injection: every pending -> running update fails, as a broken claim would."""
    if backend.name == "sqlite":
        backend.execute(
            "CREATE TRIGGER refuse_claims BEFORE UPDATE OF status ON jobs "
            "WHEN old.status = 'pending' AND new.status = 'running' "
            "BEGIN SELECT RAISE(ABORT, 'claims refused'); END"
        )
        return
    backend.execute(
        "CREATE FUNCTION refuse_claims() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'claims refused'; END $$"
    )
    backend.execute(
        "CREATE TRIGGER refuse_claims BEFORE UPDATE OF status ON jobs FOR EACH ROW "
        "WHEN (old.status = 'pending' AND new.status = 'running') "
        "EXECUTE FUNCTION refuse_claims()"
    )


def test_a_failed_claim_still_commits_the_outcomes(backend: Backend) -> None:
    store = backend.store
    running, pending = _two_running_two_pending(store)
    _refuse_claims(backend)
    rows, taken = store.finalize_and_claim(
        [outcome(running[0]), outcome(running[1], want_row=False)], 20_000, _request()
    )
    assert taken is None
    assert col(rows[0], L.C_STATUS) == "completed"
    assert [col(store.get(i), L.C_STATUS) for i in running] == ["completed", "completed"]
    assert [col(store.get(i), L.C_STATUS) for i in pending] == ["pending", "pending"]
