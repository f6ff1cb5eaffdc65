"""Checking an answer against the model its `Operation` names (`_observe/openapi.py`):
the one rule the conformance, hostile-data and fuzz tests share."""

from __future__ import annotations

from pydantic import BaseModel

from jobledger._observe import api_models as m
from jobledger._observe.openapi import OPERATIONS, Operation

__all__ = ["BY_ID", "BY_ROUTE", "check_answer", "model_for"]

BY_ID = {op.operation_id: op for op in OPERATIONS}
BY_ROUTE = {(op.method, op.path): op for op in OPERATIONS}


def model_for(op: Operation, status: int) -> type[BaseModel] | None:
    """The model the document names for `status` of `op` (None: the answer is not JSON)."""
    if status == op.status:
        return op.response
    what = op.errors.get(status)
    return what[1] if isinstance(what, tuple) else m.ErrorEnvelope


def check_answer(op: Operation, status: int, content_type: str, body: bytes) -> None:
    """Raise (AssertionError or pydantic's ValidationError) unless the answer is one
    the document describes: a documented status, its media type, its model."""
    documented = {op.status, 500, 503, 401, 403, 404, *op.errors}
    assert status in documented, (op.operation_id, status, body[:300])
    model = model_for(op, status)
    if model is None:
        assert content_type.startswith(op.media_type), (op.operation_id, content_type)
        return
    assert content_type == "application/json", (op.operation_id, content_type, body[:300])
    model.model_validate_json(body)
