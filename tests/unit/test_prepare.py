"""`prepare_row` (the runtime's enqueue path) and `prepare` (a `NewJob`, the schedules'
path) must describe the same row: `fresh_row` of one is the other."""

from __future__ import annotations

from datetime import timedelta

import jobledger as jl
from jobledger._core.enqueue import (
    EnqueueOptions,
    key_rule,
    prepare,
    prepare_row,
    prepare_rows,
)
from jobledger._storage.interface import KeyRule, fresh_row

KIND = jl.JobType("unit.kind", dict)
NOW = 1_700_000_000_000


def test_prepare_row_is_the_fresh_row_of_prepare() -> None:
    opts = EnqueueOptions(
        queue="q",
        priority=4,
        idempotency_key="k",
        delay=timedelta(seconds=2),
        timeout=1.5,
        max_attempts=7,
        metadata={"m": [1]},
        parent_id="p",
        schedule_id="s",
    )
    args = (KIND, None, {"a": 1}, opts)
    job = prepare(*args, now_ms=NOW, enqueued_by="me", max_payload_bytes=1000)
    row = prepare_row(*args, now_ms=NOW, enqueued_by="me", max_payload_bytes=1000, job_id=job.id)
    assert row == fresh_row(job)
    assert job.status == "delayed"
    assert job.scheduled_at == NOW + 2000
    assert job.timeout_ms == 1500
    assert job.metadata == '{"m":[1]}'


def test_prepare_rows_is_prepare_row_per_entry() -> None:
    entries = [{"n": 1}, jl.JobSpec({"n": 2}, priority=-1, metadata={"own": True}), {"n": 3}]
    opts = EnqueueOptions(priority=2, metadata={"shared": 1})
    rows = prepare_rows(
        KIND, None, entries, opts, now_ms=NOW, enqueued_by="me", max_payload_bytes=99
    )
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    for entry, row in zip(entries, rows, strict=True):
        entry_opts, payload = (
            (opts.merged(entry), entry.payload) if isinstance(entry, jl.JobSpec) else (opts, entry)
        )
        assert row == prepare_row(
            KIND,
            None,
            payload,
            entry_opts,
            now_ms=NOW,
            enqueued_by="me",
            max_payload_bytes=99,
            job_id=row[0],
        )


def test_a_debounced_row_is_the_row_of_its_delay_and_carries_its_rule() -> None:
    debounced = EnqueueOptions(idempotency_key="k", debounce=2.5)
    delayed = EnqueueOptions(idempotency_key="k", delay=2.5)
    args = (KIND, None, {"a": 1})
    row = prepare_row(*args, debounced, now_ms=NOW, enqueued_by="me", max_payload_bytes=99)
    same = prepare_row(
        *args, delayed, now_ms=NOW, enqueued_by="me", max_payload_bytes=99, job_id=row[0]
    )
    assert row == same
    assert key_rule(debounced) == KeyRule("debounce", 2500)
    assert key_rule(EnqueueOptions(idempotency_key="k", unique_for=timedelta(minutes=1))) == (
        KeyRule("unique_for", 60_000)
    )
    # A window below a millisecond is one millisecond, never none.
    assert key_rule(EnqueueOptions(idempotency_key="k", unique_for=1e-6)) == (
        KeyRule("unique_for", 1)
    )
    assert key_rule(EnqueueOptions(idempotency_key="k")) is None


def test_prepare_rows_reports_the_rules_of_entries_with_options_of_their_own() -> None:
    entries = [
        {"n": 1},
        jl.JobSpec({"n": 2}, idempotency_key="a"),
        jl.JobSpec({"n": 3}, idempotency_key="b", unique_for=None),
        jl.JobSpec({"n": 4}, idempotency_key="c", unique_for=9),
    ]
    rules: dict[int, KeyRule] = {}
    opts = EnqueueOptions(idempotency_key="call", unique_for=5)
    prepare_rows(
        KIND, None, entries, opts, now_ms=NOW, enqueued_by="me", max_payload_bytes=99, rules=rules
    )
    # The plain entry takes the call's rule (the caller's to apply); the second the
    # call's too, through its merged options; the third turned it off.
    assert rules == {1: KeyRule("unique_for", 5000), 3: KeyRule("unique_for", 9000)}
