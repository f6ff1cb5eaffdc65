"""The pure workflow graph (`_core/workflow.py`): ordering and every invalid shape."""

from __future__ import annotations

from typing import Any

import pytest

from jobledger._core.workflow import Step, WorkflowGraph
from jobledger.errors import JobValidationError


def _add(g: WorkflowGraph, name: str | None, after: Any = None, **kw: Any) -> Step:
    return g.add_step(
        "t", [{}], many=False, name=name, after=after,
        on_upstream_failure=kw.get("policy", "cancel"), options={},
    )  # fmt: skip


def _invalid(g: WorkflowGraph) -> dict[str, Any]:
    with pytest.raises(JobValidationError) as info:
        g.check()
    assert info.value.code == "JOB_WORKFLOW_INVALID"
    return info.value.params


def test_a_diamond_is_ordered_by_dependency_then_by_insertion() -> None:
    g = WorkflowGraph("w")
    # Added out of order: `join` names steps that come later.
    _add(g, "join", after=["left", "right"])
    top = _add(g, "top")
    _add(g, "right", after=[top])
    _add(g, "left", after="top")
    ordered, upstream = g.check()
    assert [s.name for s in ordered] == ["top", "right", "left", "join"]
    assert upstream == {"join": ("left", "right"), "top": (), "right": ("top",), "left": ("top",)}


def test_a_repeated_reference_counts_once() -> None:
    g = WorkflowGraph("w")
    a = _add(g, "a")
    _add(g, "b", after=[a, "a"])
    assert g.check()[1]["b"] == ("a",)


def test_unnamed_steps_get_distinct_names() -> None:
    g = WorkflowGraph("w")
    _add(g, None)
    _add(g, None)
    assert [s.name for s in g.check()[0]] == ["t-0", "t-1"]


def test_a_duplicate_name_is_invalid() -> None:
    g = WorkflowGraph("w")
    _add(g, "a")
    _add(g, "a")
    assert _invalid(g) == {"step": "a", "reason": "duplicate"}


def test_an_unknown_step_is_invalid() -> None:
    g = WorkflowGraph("w")
    _add(g, "a", after=["nope"])
    assert _invalid(g) == {"step": "a", "reason": "unknown", "upstream": "nope"}


def test_a_step_of_another_workflow_is_unknown() -> None:
    other = WorkflowGraph("o")
    foreign = _add(other, "x")
    g = WorkflowGraph("w")
    _add(g, "x")
    _add(g, "a", after=[foreign])
    assert _invalid(g)["step"] == "a"


@pytest.mark.parametrize(
    "edges",
    [
        {"a": ["a"]},
        {"a": ["b"], "b": ["a"]},
        {"root": [], "a": ["root", "c"], "b": ["a"], "c": ["b"], "tail": ["c"]},
    ],
)
def test_a_cycle_is_invalid_and_names_a_step_on_it(edges: dict[str, list[str]]) -> None:
    g = WorkflowGraph("w")
    for name, after in edges.items():
        _add(g, name, after=after)
    params = _invalid(g)
    assert params["reason"] == "cycle"
    assert params["step"] in {"a", "b", "c"}


def test_an_empty_workflow_bad_names_and_bad_policies_are_invalid() -> None:
    assert _invalid(WorkflowGraph("w"))["reason"] == "empty"
    with pytest.raises(JobValidationError, match="JOB_WORKFLOW_INVALID"):
        WorkflowGraph("")
    g = WorkflowGraph("w")
    with pytest.raises(JobValidationError) as info:
        _add(g, "")
    assert info.value.params["reason"] == "name"
    with pytest.raises(JobValidationError) as info:
        _add(g, "a", policy="maybe")
    assert info.value.params == {"step": "a", "reason": "policy"}
