"""The drawn state machine is the coded one: the mermaid diagrams in
`docs/design/state-machine.md` and in `jobledger._core.states`'s docstring have exactly
the edges of `EDGES` (and `[*]` leads exactly to `INITIAL`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobledger._core import states
from jobledger._types import TERMINAL_STATUSES, JobStatus

DOC = Path(__file__).resolve().parents[2] / "docs" / "design" / "state-machine.md"
EDGE = re.compile(r"^\s*(\[\*\]|\w+)\s*-->\s*(\w+)\s*(?::.*)?$")


def mermaid_edges(text: str) -> tuple[set[tuple[str, str]], set[str]]:
    """(edges between states, states reached from [*]) of every mermaid block in `text`."""
    blocks = re.findall(r"```mermaid\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "no mermaid block found"
    edges: set[tuple[str, str]] = set()
    initial: set[str] = set()
    for block in blocks:
        lines = [line for line in block.splitlines() if "-->" in line]
        assert lines, "a mermaid block without edges"
        for line in lines:
            match = EDGE.match(line)
            assert match, f"unparsable edge: {line!r}"
            source, target = match.groups()
            if source == "[*]":
                initial.add(target)
            else:
                edges.add((source, target))
    return edges, initial


def coded() -> tuple[set[tuple[str, str]], set[str]]:
    return {(str(a), str(b)) for a, b in states.EDGES}, {str(s) for s in states.INITIAL}


@pytest.mark.parametrize("source", ["docs", "docstring"])
def test_diagram_edges_equal_the_coded_edges(source: str) -> None:
    text = DOC.read_text() if source == "docs" else (states.__doc__ or "")
    assert mermaid_edges(text) == coded()


def test_terminal_states_have_no_way_out() -> None:
    for source, target in states.EDGES:
        assert source not in TERMINAL_STATUSES, (source, target)
        assert states.can_transition(source, target)
    assert not states.can_transition(JobStatus.COMPLETED, JobStatus.PENDING)
    assert not states.can_transition(JobStatus.CANCELLED, JobStatus.RUNNING)
    assert all(states.is_terminal(s) for s in TERMINAL_STATUSES)
    # Every state is reachable from [*].
    reached = set(states.INITIAL)
    while True:
        grown = reached | {b for a, b in states.EDGES if a in reached}
        if grown == reached:
            break
        reached = grown
    assert reached == set(JobStatus)


def test_parser_notices_a_missing_or_extra_edge() -> None:
    doc = DOC.read_text()
    missing = doc.replace("    pending --> running: claim\n", "")
    assert mermaid_edges(missing) != coded()
    extra = doc.replace("```\n", "    completed --> pending: reopen\n```\n", 1)
    assert mermaid_edges(extra) != coded()
