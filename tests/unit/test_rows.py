"""`snapshot_from_row` (src/jobledger/_storage/rows.py) sets a snapshot's slots directly,
in field order: the snapshot it makes must equal the one the dataclass's own `__init__`
makes from the same row, field by field, whatever the row holds. `row_snapshot`, the same
snapshot decoded on first use, must be indistinguishable from it but for its type."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from jobledger._storage import layout as L
from jobledger._storage.rows import row_snapshot, snapshot_from_row
from jobledger._types import JobSnapshot, JobStatus
from jobledger.clock import from_ms


def _row(**values: object) -> tuple[object, ...]:
    row: list[object] = [None] * (L.C_STEP + 1)
    base = {
        L.C_ID: "01a232ca-7a53-80d1-b052-33868f5ef298",
        L.C_TYPE: "t",
        L.C_STATUS: "failed",
        L.C_QUEUE: "q",
        L.C_PRIORITY: 3,
        L.C_PAYLOAD: '{"a": 1}',
        L.C_OUTPUT: "[1, 2]",
        L.C_ERROR: '{"code": "E", "message": "m", "retryable": false, "params": {"x": 1}}',
        L.C_ATTEMPT: 2,
        L.C_MAX_ATTEMPTS: 5,
        L.C_TIMEOUT: 1500,
        L.C_KEY: "k",
        L.C_PARENT: "p",
        L.C_SCHEDULE: "s",
        L.C_METADATA: '{"m": true}',
        L.C_PROGRESS: 0.5,
        L.C_PROGRESS_DETAIL: "half",
        L.C_CANCEL: 1,
        L.C_WORKER: "w",
        L.C_SCHEDULED_AT: 1_000,
        L.C_STARTED_AT: 2_000,
        L.C_FINISHED_AT: 3_000,
        L.C_CREATED_AT: 500,
        L.C_UPDATED_AT: 3_500,
        L.C_ENQUEUED_BY: "e",
        L.C_RETRY_OF: "r",
        L.C_WORKFLOW: "wf",
        L.C_STEP: "st",
    }
    base.update({getattr(L, k): v for k, v in values.items()})
    for index, value in base.items():
        row[index] = value
    return tuple(row)


def _expected(row: tuple[object, ...]) -> JobSnapshot:
    """The same values through the dataclass's `__init__` (the order of the columns is
    `test_every_field_holds_its_column`'s: each column there holds a distinct value)."""
    made = snapshot_from_row(row)
    return JobSnapshot(**{f.name: getattr(made, f.name) for f in dataclasses.fields(made)})


def test_every_field_holds_its_column() -> None:
    snap = snapshot_from_row(_row())
    assert snap.id == "01a232ca-7a53-80d1-b052-33868f5ef298"
    assert (snap.type, snap.status, snap.queue, snap.priority) == ("t", JobStatus.FAILED, "q", 3)
    assert (snap.payload, snap.output, snap.metadata) == ({"a": 1}, [1, 2], {"m": True})
    assert snap.error is not None
    assert (snap.error.code, snap.error.params) == ("E", {"x": 1})
    assert (snap.attempt, snap.max_attempts, snap.timeout) == (2, 5, 1.5)
    assert (snap.idempotency_key, snap.parent_id, snap.schedule_id) == ("k", "p", "s")
    assert (snap.progress, snap.progress_detail, snap.cancel_requested) == (0.5, "half", True)
    assert (snap.worker_id, snap.enqueued_by, snap.retry_of) == ("w", "e", "r")
    assert (snap.workflow_id, snap.step) == ("wf", "st")
    assert snap.scheduled_at == from_ms(1_000)
    assert snap.started_at == from_ms(2_000)
    assert snap.finished_at == from_ms(3_000)
    assert snap.created_at == from_ms(500)
    assert snap.updated_at == from_ms(3_500)


def test_it_equals_the_dataclass_made_snapshot_and_behaves_as_one() -> None:
    for row in (
        _row(),
        _row(C_STATUS="pending", C_FINISHED_AT=None, C_STARTED_AT=None, C_ERROR=None),
        _row(C_TIMEOUT=None, C_METADATA="{}", C_PAYLOAD="{}", C_OUTPUT="null"),
    ):
        snap = snapshot_from_row(row)
        assert type(snap) is JobSnapshot
        assert snap == _expected(row)
        assert hash(snap.id) == hash(_expected(row).id)
        assert pickle.loads(pickle.dumps(snap)) == snap
        assert dataclasses.replace(snap, priority=9).priority == 9
        assert repr(snap) == repr(_expected(row))


_ROWS = (
    _row(),
    _row(C_STATUS="pending", C_FINISHED_AT=None, C_STARTED_AT=None, C_ERROR=None),
    _row(C_TIMEOUT=None, C_METADATA="{}", C_PAYLOAD="{}", C_OUTPUT="null", C_KEY=None),
)


def test_a_row_snapshot_equals_the_eager_one_either_way_round() -> None:
    for row in _ROWS:
        eager = snapshot_from_row(row)
        for lazy in (row_snapshot(row), _read_status(row_snapshot(row))):
            assert isinstance(lazy, JobSnapshot)
            assert lazy == eager
            assert eager == lazy
            assert not lazy != eager  # noqa: SIM202  # `!=` is its own operator
            assert not eager != lazy  # noqa: SIM202
            assert row_snapshot(row) == lazy
        assert row_snapshot(row) != snapshot_from_row(_row(C_PRIORITY=99))
        assert snapshot_from_row(_row(C_PRIORITY=99)) != row_snapshot(row)
        assert row_snapshot(row) != row[0]


def _read_status(snap: JobSnapshot) -> JobSnapshot:
    assert snap.status in JobStatus  # what is set when made: nothing decoded yet
    return snap


def test_a_row_snapshot_reads_repr_pickles_and_copies_as_the_eager_one() -> None:
    for row in _ROWS:
        eager = snapshot_from_row(row)
        assert repr(row_snapshot(row)) == repr(eager)
        assert [getattr(row_snapshot(row), f.name) for f in dataclasses.fields(eager)] == [
            getattr(eager, f.name) for f in dataclasses.fields(eager)
        ]
        for copied in (
            pickle.loads(pickle.dumps(row_snapshot(row))),
            copy.copy(row_snapshot(row)),
            copy.deepcopy(row_snapshot(row)),
        ):
            assert type(copied) is JobSnapshot
            assert copied == eager
        assert dataclasses.asdict(row_snapshot(row)) == dataclasses.asdict(eager)
        assert dataclasses.replace(row_snapshot(row), priority=9) == dataclasses.replace(
            eager, priority=9
        )
        assert row_snapshot(row).to_json() == eager.to_json()
        assert row_snapshot(row).is_terminal == eager.is_terminal


def test_a_row_snapshot_hashes_as_the_eager_one() -> None:
    """Payload and metadata are dicts, so neither hashes; a snapshot whose dict fields are
    replaced by hashable values hashes alike whichever way it was made."""
    row = _row()
    with pytest.raises(TypeError):
        hash(row_snapshot(row))
    with pytest.raises(TypeError):
        hash(snapshot_from_row(row))
    frozen = {"payload": None, "output": None, "metadata": (), "error": None}
    eager = dataclasses.replace(snapshot_from_row(row), **frozen)  # type: ignore[arg-type]
    lazy = dataclasses.replace(row_snapshot(row), **frozen)  # type: ignore[arg-type]
    assert hash(lazy) == hash(eager)


def test_a_row_snapshot_decodes_once_and_stays_frozen() -> None:
    snap = row_snapshot(_row(C_PAYLOAD="{}"))
    payload = snap.payload
    payload["added"] = 1  # a caller may change what it was handed...
    assert snap.payload is payload  # ...and reads the same object back
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.priority = 1  # type: ignore[misc]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        snap.nope  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(row_snapshot(_row()), "nope")


def test_json_columns_that_do_not_parse_read_as_well_as_they_can() -> None:
    # A row another program wrote: not JSON, or nested past json.loads' recursion.
    deep = "[" * 5000 + "]" * 5000
    snap = snapshot_from_row(
        _row(C_PAYLOAD="{not json", C_OUTPUT=deep, C_METADATA="[1, 2]", C_ERROR=deep)
    )
    assert (snap.payload, snap.output, snap.metadata) == ("{not json", deep, {})
    assert snap.error is not None
    assert snap.error.code == "JOB_CORRUPT_ERROR_ROW"
    assert snapshot_from_row(_row(C_METADATA=deep)).metadata == {}
