"""Checking an answer against the model its `Operation` names (`_observe/openapi.py`):
the one rule the conformance, hostile-data and fuzz tests share."""

from __future__ import annotations

from pydantic import BaseModel

from jobledger._observe import api_models as m
from jobledger._observe.openapi import OPERATIONS, Operation, openapi_schema

__all__ = ["BY_ID", "BY_ROUTE", "check_answer", "model_for", "sse_events"]

BY_ID = {op.operation_id: op for op in OPERATIONS}
BY_ROUTE = {(op.method, op.path): op for op in OPERATIONS}
# What a server with every route and a token documents (the widest document).
_DOCUMENT = openapi_schema(actions=True, token=True)


def model_for(op: Operation, status: int) -> type[BaseModel] | None:
    """The model the document names for `status` of `op` (None: the answer is not JSON)."""
    if status == op.status:
        return op.response
    what = op.errors.get(status)
    return what[1] if isinstance(what, tuple) else m.ErrorEnvelope


def sse_events(text: str) -> list[dict[str, str]]:
    """The events of an event stream as a parser reads them: `{"event", "id", "data"}`
    for each block with data (the `retry:` block and `: ping` comments have none)."""
    out: list[dict[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        data: list[str] = []
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name in ("event", "id"):
                fields[name] = value
        if data:
            out.append({**fields, "data": "\n".join(data)})
    return out


def check_answer(op: Operation, status: int, content_type: str, body: bytes) -> None:
    """Raise (AssertionError or pydantic's ValidationError) unless the answer is one
    the document describes: a documented status, its media type, its model."""
    responses = _DOCUMENT["paths"][op.path][op.method.lower()]["responses"]
    assert str(status) in responses, (op.operation_id, status, body[:300])
    model = model_for(op, status)
    if (
        op.media_type == "text/html"
        and status != op.status
        and content_type.startswith("text/html")
    ):
        return  # a page that refuses (bad filter, unknown id): HTML, as documented
    if model is None:
        assert content_type.startswith(op.media_type), (op.operation_id, content_type)
        if op.stream is not None:
            events = sse_events(body.decode())
            assert events, (op.operation_id, body[:300])
            for event in events:
                op.stream.model_validate(event)
        return
    assert content_type == "application/json", (op.operation_id, content_type, body[:300])
    model.model_validate_json(body)
