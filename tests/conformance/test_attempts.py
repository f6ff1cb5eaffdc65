"""`job_attempts`: one record per ended attempt, written by the transaction that moves the
job (finalize, the rescue of a dead worker), collected with the job, on every backend."""

from __future__ import annotations

import json

import pytest

from jobledger._core.recovery import plan_recovery
from jobledger._storage.interface import JobFilter, NewJob, OutcomeKind
from jobledger._storage.records import AttemptRow
from tests.conformance import ConformantStore, claim, new_job, outcome

CLAIMED_AT = 10_000  # `claim`'s default now


def _running(store: ConformantStore, job: NewJob | None = None, worker: str = "w1") -> NewJob:
    job = job or new_job()
    store.enqueue([job])
    assert [c.id for c in claim(store, worker=worker, types=(job.type,)).jobs] == [job.id]
    return job


@pytest.mark.parametrize(
    ("kind", "want_row", "ended"),
    [
        ("completed", True, "completed"),
        ("completed", False, "completed"),
        ("failed", True, "failed"),
        ("failed", False, "failed"),
        ("cancelled", True, "cancelled"),
        ("retry", True, "retry"),
        ("requeue", True, "interrupted"),
    ],
)
def test_each_applied_outcome_writes_its_attempt(
    store: ConformantStore, kind: OutcomeKind, want_row: bool, ended: str
) -> None:
    job = _running(store)
    error = None if kind == "completed" else '{"code":"E","traceback":"tb"}'
    logs = json.dumps([[15_000, "INFO", "hello"]])
    [row] = store.finalize(
        [
            outcome(
                job.id,
                kind,
                error=error,
                retry_at=30_000,
                want_row=want_row,
                started_at=CLAIMED_AT,
                logs=logs,
            )
        ],
        20_000,
    )
    assert row is not None
    assert store.attempts(job.id) == [AttemptRow(0, "w1", CLAIMED_AT, 20_000, ended, error, logs)]


def test_the_batched_finalize_writes_every_attempt(store: ConformantStore) -> None:
    jobs = [new_job() for _ in range(60)]  # more than one statement's chunk on SQLite
    store.enqueue(jobs)
    assert len(claim(store).jobs) == 60
    logs = json.dumps([[15_000, "INFO", "kept"]])
    error = '{"code":"E"}'
    # Every third failed, every other with log lines, every fifth read back whole.
    outcomes = [
        outcome(
            j.id,
            "failed" if i % 3 == 0 else "completed",
            error=error if i % 3 == 0 else None,
            want_row=i % 5 == 0,
            started_at=CLAIMED_AT,
            logs=logs if i % 2 == 0 else None,
        )
        for i, j in enumerate(jobs)
    ]
    # One stale outcome in the batch: its job was never claimed by "w2".
    outcomes[7] = outcome(jobs[7].id, worker="w2", want_row=False, started_at=CLAIMED_AT)
    results = store.finalize(outcomes, 20_000)
    assert results.count(None) == 1
    for i, j in enumerate(jobs):
        kind = "failed" if i % 3 == 0 else "completed"
        expected = (
            []
            if i == 7
            else [
                AttemptRow(
                    0,
                    "w1",
                    CLAIMED_AT,
                    20_000,
                    kind,
                    error if i % 3 == 0 else None,
                    logs if i % 2 == 0 else None,
                )
            ]
        )
        assert store.attempts(j.id) == expected
        if i % 5 == 0:
            assert results[i] == store.get(j.id)


def test_a_stale_outcome_writes_no_attempt(store: ConformantStore) -> None:
    job = _running(store)
    assert store.finalize([outcome(job.id, worker="intruder")], 20_000) == [None]
    assert store.finalize([outcome(job.id, attempt=3)], 20_000) == [None]
    assert store.attempts(job.id) == []


def test_a_retry_that_meets_a_cancel_request_is_recorded_cancelled(
    store: ConformantStore,
) -> None:
    job = _running(store)
    status, _, _ = store.request_cancel(job.id, "stop", '{"code":"JOB_CANCELLED"}', 15_000)
    assert status == "running"
    [row] = store.finalize(
        [outcome(job.id, "retry", error='{"code":"E"}', retry_at=30_000, started_at=CLAIMED_AT)],
        20_000,
    )
    assert row is not None
    [record] = store.attempts(job.id)
    assert (record.outcome, record.error) == ("cancelled", '{"code":"E"}')


def test_attempts_accumulate_oldest_first_across_retries(store: ConformantStore) -> None:
    job = _running(store)
    store.finalize([outcome(job.id, "retry", error='{"n":1}', retry_at=10_000)], 11_000)
    store.promote_due(12_000)
    assert [c.id for c in claim(store, now=13_000).jobs] == [job.id]
    store.finalize([outcome(job.id, "requeue", attempt=1)], 14_000)
    assert [c.id for c in claim(store, now=15_000, worker="w2").jobs] == [job.id]
    store.finalize([outcome(job.id, worker="w2", attempt=1)], 16_000)
    assert [(a.attempt, a.worker_id, a.outcome) for a in store.attempts(job.id)] == [
        (0, "w1", "retry"),
        (1, "w1", "interrupted"),  # not spent: the next attempt has its number again
        (1, "w2", "completed"),
    ]


def test_a_dead_workers_running_attempts_are_recorded_lost(store: ConformantStore) -> None:
    reset = _running(store, new_job(type="t.a"), worker="dead")
    cancelled = _running(store, new_job(type="t.b"), worker="dead")
    waiting = new_job(enqueued_by="dead")
    store.enqueue([waiting])
    store.register_worker("dead", "elsewhere", 1, ["t.a=retry", "t.b=abandon"], 0)
    strategies = {"t.a": "retry", "t.b": "abandon"}
    stats = store.recover_worker(
        "dead",
        lambda rows: plan_recovery(rows, strategies.get),  # type: ignore[arg-type]
        lambda why: json.dumps({"message": why}),
        50_000,
    )
    assert stats.reset == 1
    assert len(stats.cancelled) == 1
    for job in (reset, cancelled):
        [record] = store.attempts(job.id)
        assert (record.attempt, record.worker_id, record.outcome) == (0, "dead", "lost")
        assert (record.started_at, record.finished_at) == (CLAIMED_AT, 50_000)
        assert json.loads(record.error or "{}")["code"] == "JOB_WORKER_LOST"
    assert store.attempts(waiting.id) == []  # it never ran


def test_gc_collects_the_attempts_with_their_job(store: ConformantStore) -> None:
    old, kept = _running(store), new_job()
    store.finalize([outcome(old.id, started_at=CLAIMED_AT)], 20_000)
    store.enqueue([kept])
    assert store.gc(30_000) == 1
    assert store.count(JobFilter()) == 1
    assert store.attempts(old.id) == []


def test_an_unknown_job_has_no_attempts(store: ConformantStore) -> None:
    assert store.attempts("no-such-id") == []
