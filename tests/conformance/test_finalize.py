"""finalize (fenced on the claim), retry, promote_due/next_delayed_at, progress, metadata."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from jobledger._storage import layout as L
from jobledger._storage.interface import APPLIED, JobRow, NewJob, OutcomeKind
from tests.conformance import Backend, ConformantStore, claim, col, new_job, outcome


def _running(store: ConformantStore, job: NewJob | None = None, worker: str = "w1") -> NewJob:
    job = job or new_job()
    store.enqueue([job])
    assert [c.id for c in claim(store, worker=worker).jobs] == [job.id]
    return job


@pytest.mark.parametrize("kind", ["completed", "failed", "cancelled"])
def test_a_terminal_outcome_is_written_under_the_claim(
    store: ConformantStore, kind: OutcomeKind
) -> None:
    job = _running(store)
    [row] = store.finalize(
        [
            outcome(
                job.id,
                kind,
                output='{"ok":1}',
                error='{"code":"X"}',
                progress=75.0,
                progress_detail="three quarters",
            )
        ],
        20_000,
    )
    assert row == store.get(job.id)
    assert col(row, L.C_STATUS) == kind
    assert col(row, L.C_OUTPUT) == '{"ok":1}'
    assert col(row, L.C_ERROR) == '{"code":"X"}'
    assert col(row, L.C_FINISHED_AT) == col(row, L.C_UPDATED_AT) == 20_000
    assert (col(row, L.C_PROGRESS), col(row, L.C_PROGRESS_DETAIL)) == (75.0, "three quarters")
    assert col(row, L.C_ATTEMPT) == 0
    assert col(row, L.C_WORKER) == "w1"  # the row records who ran it last


def test_an_outcome_without_progress_keeps_the_stored_progress(store: ConformantStore) -> None:
    job = _running(store)
    assert store.set_progress(job.id, "w1", 0, 40.0, "half-ish", 15_000)
    [row] = store.finalize([outcome(job.id)], 20_000)
    assert (col(row, L.C_PROGRESS), col(row, L.C_PROGRESS_DETAIL)) == (40.0, "half-ish")


@pytest.mark.parametrize(("worker", "attempt"), [("intruder", 0), ("w1", 1), ("w1", -1)])
def test_a_wrong_fence_writes_nothing(store: ConformantStore, worker: str, attempt: int) -> None:
    job = _running(store)
    before = store.get(job.id)
    assert store.finalize([outcome(job.id, worker=worker, attempt=attempt)], 20_000) == [None]
    assert store.finalize(
        [outcome(job.id, "retry", worker=worker, attempt=attempt, retry_at=30_000)], 20_000
    ) == [None]
    assert store.get(job.id) == before


def test_a_waiting_or_unknown_row_cannot_be_finalized(store: ConformantStore) -> None:
    job = new_job()
    store.enqueue([job])
    assert store.finalize([outcome(job.id), outcome("no-such-id")], 20_000) == [None, None]
    assert col(store.get(job.id), L.C_STATUS) == "pending"


def test_retry_moves_to_delayed_with_the_next_attempt(store: ConformantStore) -> None:
    job = _running(store)
    [row] = store.finalize(
        [outcome(job.id, "retry", error='{"code":"E"}', retry_at=31_000)], 20_000
    )
    assert row == store.get(job.id)
    assert col(row, L.C_STATUS) == "delayed"
    assert col(row, L.C_ATTEMPT) == 1
    assert col(row, L.C_SCHEDULED_AT) == 31_000
    assert col(row, L.C_ERROR) == '{"code":"E"}'
    assert col(row, L.C_WORKER) is None
    assert col(row, L.C_STARTED_AT) is None
    assert col(row, L.C_FINISHED_AT) is None
    assert col(row, L.C_UPDATED_AT) == 20_000
    # The next attempt is fenced on attempt 1; the old claim is stale.
    assert store.promote_due(31_000) == ["q"]
    [c] = claim(store, worker="w2", now=31_000).jobs
    assert c.attempt == 1
    assert store.finalize([outcome(job.id, worker="w1", attempt=0)], 32_000) == [None]
    assert store.finalize([outcome(job.id, worker="w2", attempt=1)], 32_000)[0] is not None


def test_a_terminal_row_is_never_reopened(store: ConformantStore) -> None:
    job = _running(store)
    first = store.finalize([outcome(job.id, "failed")], 20_000)[0]
    for kind in ("completed", "cancelled", "failed", "retry"):
        again = outcome(job.id, kind, retry_at=1)
        assert store.finalize([again], 21_000) == [None]
    assert store.get(job.id) == first
    assert store.request_cancel(job.id, None, "{}", 22_000) == (None, None, None)
    assert store.force_cancel(job.id, "w1", 0, "{}", 22_000) is None
    assert store.promote_due(10**12) == []
    assert store.get(job.id) == first


def test_the_first_terminal_write_in_a_batch_wins(store: ConformantStore) -> None:
    a, b = _running(store), _running(store)
    rows = store.finalize(
        [
            outcome(a.id, "completed", output="1"),
            outcome(b.id, "retry", retry_at=50_000),
            outcome(a.id, "failed", output="2"),
        ],
        20_000,
    )
    assert col(rows[0], L.C_STATUS) == "completed"
    assert col(rows[1], L.C_STATUS) == "delayed"
    assert rows[2] is None
    assert col(store.get(a.id), L.C_OUTPUT) == "1"


def test_promote_due_moves_due_delayed_rows_and_names_their_queues(
    store: ConformantStore,
) -> None:
    jobs = [
        new_job(status="delayed", scheduled_at=5_000, queue="b"),
        new_job(status="delayed", scheduled_at=6_000, queue="a"),
        new_job(status="delayed", scheduled_at=6_000, queue="b"),
        new_job(status="delayed", scheduled_at=6_001, queue="c"),
        new_job(status="pending", scheduled_at=1, queue="d"),
    ]
    store.enqueue(jobs)
    assert store.next_delayed_at() == 5_000
    assert store.promote_due(4_999) == []
    assert store.promote_due(6_000) == ["a", "b"]
    for job in jobs[:3]:
        row = store.get(job.id)
        assert col(row, L.C_STATUS) == "pending"
        assert col(row, L.C_UPDATED_AT) == 6_000
        assert col(row, L.C_SCHEDULED_AT) == job.scheduled_at
    assert col(store.get(jobs[3].id), L.C_STATUS) == "delayed"
    assert store.next_delayed_at() == 6_001
    assert store.promote_due(7_000) == ["c"]
    assert store.next_delayed_at() is None


def test_progress_is_fenced_on_the_claim(store: ConformantStore) -> None:
    job = _running(store)
    assert store.set_progress(job.id, "w1", 0, 12.5, "a bit", 15_000) is True
    row = store.get(job.id)
    assert (col(row, L.C_PROGRESS), col(row, L.C_PROGRESS_DETAIL)) == (12.5, "a bit")
    assert col(row, L.C_UPDATED_AT) == 15_000
    assert store.set_progress(job.id, "w2", 0, 99.0, None, 16_000) is False
    assert store.set_progress(job.id, "w1", 1, 99.0, None, 16_000) is False
    assert store.set_progress("no-such-id", "w1", 0, 99.0, None, 16_000) is False
    assert col(store.get(job.id), L.C_PROGRESS) == 12.5
    store.finalize([outcome(job.id)], 20_000)
    assert store.set_progress(job.id, "w1", 0, 99.0, None, 21_000) is False


def test_metadata_patches_merge_shallowly_under_the_claim(store: ConformantStore) -> None:
    job = _running(store, new_job(metadata={"a": 1, "nested": {"x": 1}}))
    merged = store.patch_metadata(job.id, "w1", 0, {"b": 2, "nested": {"y": 2}}, 15_000)
    assert merged == {"a": 1, "nested": {"y": 2}, "b": 2}
    row: JobRow | None = store.get(job.id)
    assert json.loads(col(row, L.C_METADATA)) == merged
    assert col(row, L.C_UPDATED_AT) == 15_000
    assert store.patch_metadata(job.id, "w2", 0, {"c": 3}, 16_000) is None
    assert store.patch_metadata(job.id, "w1", 1, {"c": 3}, 16_000) is None
    assert json.loads(col(store.get(job.id), L.C_METADATA)) == merged


def test_an_outcome_nobody_waits_on_reports_only_that_it_applied(store: ConformantStore) -> None:
    job = _running(store)
    stale = outcome(job.id, worker="w2", want_row=False)
    assert store.finalize([stale], 20_000) == [None]
    [answer] = store.finalize([outcome(job.id, output="7", want_row=False)], 20_000)
    assert answer is APPLIED
    row = store.get(job.id)
    assert (col(row, L.C_STATUS), col(row, L.C_OUTPUT)) == ("completed", "7")


def test_a_batch_of_outcomes_applies_each_under_its_own_fence(store: ConformantStore) -> None:
    jobs = [new_job() for _ in range(7)]
    store.enqueue(jobs)
    assert len(claim(store, limit=7).jobs) == 7
    a, b, c, d, e, f, g = (j.id for j in jobs)
    answers = store.finalize(
        [
            outcome(g, release_locks=True, want_row=False),  # written on its own, first
            outcome(a, output='{"n":1}', progress=40.0, progress_detail="x", want_row=False),
            outcome(b, "failed", error='{"code":"E"}', want_row=False),
            outcome(c, attempt=3, want_row=False),  # stale attempt: no match
            outcome(d, worker="w2", want_row=False),  # another worker's claim: no match
            outcome(e, "cancelled", want_row=False),
            outcome(f, output="2"),  # someone waits on this one: its row comes back
            outcome(e, want_row=False),  # the same job twice: the second finds it done
        ],
        20_000,
    )
    assert answers[:6] == [APPLIED, APPLIED, APPLIED, None, None, APPLIED]
    assert answers[6] == store.get(f)
    assert answers[7] is None
    assert col(store.get(g), L.C_STATUS) == "completed"
    rows = {j.id: store.get(j.id) for j in jobs}
    assert (col(rows[a], L.C_STATUS), col(rows[a], L.C_OUTPUT)) == ("completed", '{"n":1}')
    assert (col(rows[a], L.C_PROGRESS), col(rows[a], L.C_PROGRESS_DETAIL)) == (40.0, "x")
    assert col(rows[a], L.C_FINISHED_AT) == 20_000
    assert (col(rows[b], L.C_STATUS), col(rows[b], L.C_ERROR)) == ("failed", '{"code":"E"}')
    assert [col(rows[x], L.C_STATUS) for x in (c, d, e, f)] == [
        "running",
        "running",
        "cancelled",
        "completed",
    ]


def test_a_batch_keeps_every_text_and_number_as_sent(store: ConformantStore) -> None:
    # A batch travels as one JSON document (PostgreSQL parses it as jsonb): the texts in
    # it must come back byte for byte, not re-serialised (key order, spacing, escapes,
    # the digits of a number), and the floats as the same doubles.
    texts = [
        '{"b": 1,  "a": [1.50, 1e-05, "x\\"y\\\\u00e9"]}',
        '{"code":"E","message":"line\\nnext \\t tab ü 😀"}',
        "not JSON at all: \\ \" '",
    ]
    progress = [1e-05, 0.1 + 0.2, 99.99999999999999]
    jobs = [new_job() for _ in range(3)]
    store.enqueue(jobs)
    assert len(claim(store, limit=3).jobs) == 3
    answers = store.finalize(
        [
            outcome(
                j.id,
                "completed" if i else "failed",
                output=texts[i],
                error=texts[(i + 1) % 3],
                progress=progress[i],
                progress_detail=texts[(i + 2) % 3],
                want_row=False,
            )
            for i, j in enumerate(jobs)
        ],
        20_000,
    )
    assert answers == [APPLIED, APPLIED, APPLIED]
    for i, j in enumerate(jobs):
        row = store.get(j.id)
        assert col(row, L.C_OUTPUT) == texts[i]
        assert col(row, L.C_ERROR) == texts[(i + 1) % 3]
        assert col(row, L.C_PROGRESS_DETAIL) == texts[(i + 2) % 3]
        assert col(row, L.C_PROGRESS) == progress[i]


def test_a_batch_tells_a_missing_value_from_an_empty_or_zero_one(store: ConformantStore) -> None:
    # The SQLite store binds a batch's None as a zero-length blob and turns it back into
    # NULL in SQL (sqlite/queries.py, finish_many_sql): an empty text and a zero must
    # not be taken for it, nor it for them, in any of the batch's three kinds of group
    # (nobody reads the row; the row built from the claim; the row read whole).
    jobs = [new_job() for _ in range(6)]
    store.enqueue(jobs)
    claimed = {c.id: c for c in claim(store, limit=6).jobs}
    assert len(claimed) == 6
    for j in jobs:
        assert store.set_progress(j.id, "w1", 0, 40.0, "half", 15_000)
    empty = {"output": "", "error": "", "progress": 0.0, "progress_detail": ""}
    missing = {"output": None, "error": None, "progress": None, "progress_detail": None}
    groups = [  # (want_row, with the claim)
        (False, False),
        (True, True),
        (True, False),
    ]
    outcomes = []
    for n, (want_row, with_claim) in enumerate(groups):
        for j, fields in ((jobs[2 * n], missing), (jobs[2 * n + 1], empty)):
            outcomes.append(
                outcome(
                    j.id,
                    want_row=want_row,
                    claimed=claimed[j.id] if with_claim else None,
                    **fields,
                )
            )
    answers = store.finalize(outcomes, 20_000)
    for o, answer in zip(outcomes, answers, strict=True):
        row = store.get(o.job_id)
        assert answer == (row if o.want_row else APPLIED)
        columns = (L.C_OUTPUT, L.C_ERROR, L.C_PROGRESS, L.C_PROGRESS_DETAIL)
        got = tuple(col(row, c) for c in columns)
        if o.output is None:
            # Nothing sent: no output or error; the last reported progress stays.
            assert got == (None, None, 40.0, "half")
        else:
            assert got == ("", "", 0.0, "")
            assert type(col(row, L.C_PROGRESS)) is float


def test_one_outcome_tells_a_missing_value_from_an_empty_or_zero_one(
    store: ConformantStore,
) -> None:
    # An outcome alone is not batched: its own statement binds a None as the batch does
    # (SQLite's FINISH and FINISH_NO_ROW), read back or not.
    jobs = [new_job() for _ in range(4)]
    store.enqueue(jobs)
    assert len(claim(store, limit=4).jobs) == 4
    for j in jobs:
        assert store.set_progress(j.id, "w1", 0, 40.0, "half", 15_000)
    empty: dict[str, Any] = {"output": "", "error": "", "progress": 0.0, "progress_detail": ""}
    missing: dict[str, Any] = dict.fromkeys(empty)
    cases = [(jobs[0], missing, False), (jobs[1], empty, False), (jobs[2], missing, True),
             (jobs[3], empty, True)]  # fmt: skip
    for job, fields, want_row in cases:
        [answer] = store.finalize([outcome(job.id, want_row=want_row, **fields)], 20_000)
        row = store.get(job.id)
        assert answer == (row if want_row else APPLIED)
        got = tuple(col(row, c) for c in (L.C_OUTPUT, L.C_ERROR, L.C_PROGRESS, L.C_PROGRESS_DETAIL))
        assert got == ((None, None, 40.0, "half") if fields is missing else ("", "", 0.0, ""))


def test_a_batch_larger_than_one_statement_applies_every_outcome(store: ConformantStore) -> None:
    jobs = [new_job() for _ in range(123)]  # the SQLite store writes 50 per statement
    store.enqueue(jobs)
    assert len(claim(store, limit=123, queue_cap=200).jobs) == 123
    stale = {j.id for j in jobs[7::10]}  # some in every statement, the last one too
    answers = store.finalize(
        [
            outcome(j.id, output=str(i), attempt=9 if j.id in stale else 0, want_row=False)
            for i, j in enumerate(jobs)
        ],
        20_000,
    )
    assert answers == [None if j.id in stale else APPLIED for j in jobs]
    for i, j in enumerate(jobs):
        row = store.get(j.id)
        if j.id in stale:
            assert col(row, L.C_STATUS) == "running"
        else:
            assert (col(row, L.C_STATUS), col(row, L.C_OUTPUT)) == ("completed", str(i))


def test_a_retry_of_a_cancel_requested_row_is_a_cancel(store: ConformantStore) -> None:
    job = _running(store)
    store.request_cancel(job.id, "user asked", "{}", 15_000)
    [row] = store.finalize(
        [outcome(job.id, "retry", error='{"code":"E"}', retry_at=30_000, progress=5.0)], 20_000
    )
    assert row == store.get(job.id)
    assert col(row, L.C_STATUS) == "cancelled"
    assert col(row, L.C_ATTEMPT) == 0
    assert col(row, L.C_FINISHED_AT) == 20_000
    assert col(row, L.C_PROGRESS) == 5.0
    assert json.loads(col(row, L.C_ERROR)) == {
        "code": "JOB_CANCELLED",
        "message": "user asked",
        "retryable": False,
        "params": {"reason": "cancel"},
    }


def test_an_outcome_with_its_claim_answers_the_row_as_read_back_whole(backend: Backend) -> None:
    """`Outcome.claimed` lets a store build the terminal row from the claim (SQLite reads
    back only the columns the claim lacks or that may have moved): the answer must be
    the stored row, value for value and type for type, whatever moved while it ran."""
    store = backend.store
    backend.execute(
        "INSERT INTO job_schedules (id, type, name, trigger, payload, catch_up, enabled, "
        "metadata, created_at, updated_at) VALUES ('s-1', 't.a', '', '{}', '{}', '{}', 1, "
        "'{}', 0, 0)"
    )
    parent = new_job()
    store.enqueue([parent])
    [first] = claim(store).jobs
    store.finalize([outcome(first.id, "failed", error='{"code":"E"}')], 11_000)
    # A re-run (`retry_job`): `retry_of` and another `enqueued_by`.
    _, rerun = store.retry_job(parent.id, None, enqueued_by="retrier", now_ms=12_000)
    rerun_id = col(rerun, L.C_ID)
    keyed = new_job(
        key="k-1",
        parent=parent.id,
        schedule="s-1",
        priority=-3,
        timeout_ms=2_500,
        metadata={"m": 1},
        payload={"deep": [1, 2.5, None]},
    )
    failed, cancelled, progressed, patched, stale, unclaimed = (new_job() for _ in range(6))
    store.enqueue([keyed, failed, cancelled, progressed, patched, stale, unclaimed])
    claimed = {c.id: c for c in claim(store, now=13_000).jobs}
    assert len(claimed) == 8
    # What moves while the attempts run: progress, metadata, a cancel request, and the
    # references a deleted parent or schedule leaves (cleared on the rows naming them).
    assert store.set_progress(progressed.id, "w1", 0, 1 / 3, "a third", 14_000)
    assert store.patch_metadata(patched.id, "w1", 0, {"set": "in the handler"}, 14_000)
    store.request_cancel(cancelled.id, "stop", '{"code":"JOB_CANCELLED"}', 14_000)
    assert store.gc(12_500) == 1  # the parent, failed at 11_000
    assert store.delete_schedule("s-1", 14_000)
    # A claim older than the row (a reset and re-claim adopted by the running attempt):
    # what the row says wins over what the claim said.
    old = dataclasses.replace(claimed[stale.id], started_at=1, metadata='{"old":1}')
    answers = store.finalize(
        [
            outcome(keyed.id, output='{"ok":true}', claimed=claimed[keyed.id]),
            outcome(rerun_id, output="2", claimed=claimed[rerun_id]),
            outcome(failed.id, "failed", error='{"code":"X"}', claimed=claimed[failed.id]),
            outcome(cancelled.id, "cancelled", error="{}", claimed=claimed[cancelled.id]),
            outcome(progressed.id, claimed=claimed[progressed.id]),
            outcome(patched.id, progress=0.5, progress_detail="½", claimed=claimed[patched.id]),
            outcome(stale.id, claimed=old),
            outcome(unclaimed.id, output="1"),  # no claim: read back whole
        ],
        20_000,
    )
    ids = [keyed.id, rerun_id, failed.id, cancelled.id, progressed.id, patched.id, stale.id]
    for answer, job_id in zip(answers, [*ids, unclaimed.id], strict=True):
        stored = store.get(job_id)
        assert answer == stored
        assert answer is not None
        assert stored is not None
        assert [type(v) for v in answer] == [type(v) for v in stored]
    assert claimed[keyed.id].parent_id == parent.id
    assert claimed[keyed.id].schedule_id == "s-1"
    assert (col(answers[0], L.C_PARENT), col(answers[0], L.C_SCHEDULE)) == (None, None)
    assert col(answers[0], L.C_KEY) == "k-1"
    assert (col(answers[1], L.C_RETRY_OF), col(answers[1], L.C_ENQUEUED_BY)) == (
        parent.id,
        "retrier",
    )
    assert col(answers[3], L.C_CANCEL) == 1
    assert col(answers[4], L.C_PROGRESS) == 1 / 3
    assert json.loads(col(answers[5], L.C_METADATA)) == {"set": "in the handler"}
    assert col(answers[6], L.C_STARTED_AT) == 13_000
    # A claim does not stand in for the fence: another worker's outcome writes nothing.
    store.enqueue([new_job()])
    [c] = claim(store, now=21_000).jobs
    fenced_out = [
        outcome(c.id, worker="w2", claimed=c),
        outcome(keyed.id, claimed=claimed[keyed.id]),
    ]
    assert store.finalize(fenced_out, 22_000) == [None, None]
