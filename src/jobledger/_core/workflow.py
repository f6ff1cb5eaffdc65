"""Workflow graphs, the pure part: steps, their edges and the check of the whole graph.

A workflow is a set of named steps; a step is one job (`add`) or an ordered list of
jobs (`add_many`) of one job type, and `after=` names the steps whose jobs must all
finish before its jobs may run. Nothing here does I/O: the runtime turns a checked
graph into rows written in one transaction.

Invariants of a graph that `check` accepts:

* every step name is a non-empty string of at most 200 characters, unique in the graph;
* every `after=` reference names a step of this graph (by name, or by a `Step` this
  graph made), possibly one added later;
* the edges have no cycle (a step after itself included);
* `check` answers the steps in a dependency order (every step after all of its
  upstream steps; among independent steps, in the order they were added).

A graph that breaks one of these raises `JobValidationError` with code
`JOB_WORKFLOW_INVALID` and the offending step's name in `params["step"]` (and a
`params["reason"]` of `"duplicate"`, `"unknown"`, `"cycle"`, `"name"` or `"empty"`),
before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jobledger.errors import JobValidationError

__all__ = ["INVALID", "OnUpstreamFailure", "Step", "WorkflowGraph", "invalid"]

INVALID = "JOB_WORKFLOW_INVALID"
OnUpstreamFailure = Literal["cancel", "run"]
_POLICIES = ("cancel", "run")
_MAX_NAME = 200


def invalid(message: str, step: object, reason: str, **extra: Any) -> JobValidationError:
    """The `JOB_WORKFLOW_INVALID` error about `step`."""
    return JobValidationError(
        message, code=INVALID, params={"step": step, "reason": reason, **extra}
    )


@dataclass(frozen=True, slots=True, eq=False)
class Step:
    """One step of a workflow: what `add`/`add_many` return, to pass to `after=`.

    `payloads` holds one entry for `add`, the list's entries for `add_many` (`many`).
    `options` are the enqueue options given for the step (queue, priority, ...)."""

    name: str
    job_type: Any
    payloads: tuple[Any, ...]
    many: bool
    after: tuple[str | Step, ...]
    on_upstream_failure: OnUpstreamFailure
    options: dict[str, Any] = field(default_factory=dict)
    graph: object = None  # the WorkflowGraph that made the step

    def __repr__(self) -> str:
        return f"Step({self.name!r})"


class WorkflowGraph:
    """Steps as added, with `check` to validate and order them."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name or len(name) > _MAX_NAME:
            raise invalid(
                f"a workflow name is a non-empty string of at most {_MAX_NAME} characters",
                name,
                "name",
            )
        self.name = name
        self.steps: list[Step] = []

    def add_step(
        self,
        job_type: Any,
        payloads: Sequence[Any],
        *,
        many: bool,
        name: str | None,
        after: Sequence[str | Step] | str | Step | None,
        on_upstream_failure: str,
        options: dict[str, Any],
    ) -> Step:
        if name is None:
            type_name = job_type if isinstance(job_type, str) else getattr(job_type, "name", "")
            name = f"{type_name}-{len(self.steps)}"
        if not isinstance(name, str) or not name or len(name) > _MAX_NAME:
            raise invalid(
                f"a step name is a non-empty string of at most {_MAX_NAME} characters",
                name,
                "name",
            )
        if on_upstream_failure not in _POLICIES:
            raise invalid(
                f"on_upstream_failure is 'cancel' or 'run', not {on_upstream_failure!r}",
                name,
                "policy",
            )
        if after is None:
            refs: tuple[str | Step, ...] = ()
        elif isinstance(after, str | Step):
            refs = (after,)
        else:
            refs = tuple(after)
        step = Step(
            name,
            job_type,
            tuple(payloads),
            many,
            refs,
            on_upstream_failure,  # type: ignore[arg-type]
            dict(options),
            self,
        )
        self.steps.append(step)
        return step

    def check(self) -> tuple[list[Step], dict[str, tuple[str, ...]]]:
        """The steps in dependency order and each step's upstream step names (unique,
        in the order given), or `JOB_WORKFLOW_INVALID`."""
        if not self.steps:
            raise invalid("a workflow has at least one step", None, "empty")
        by_name: dict[str, Step] = {}
        for step in self.steps:
            if step.name in by_name:
                raise invalid(f"two steps are named {step.name!r}", step.name, "duplicate")
            by_name[step.name] = step
        upstream: dict[str, tuple[str, ...]] = {}
        for step in self.steps:
            names: dict[str, None] = {}
            for ref in step.after:
                if isinstance(ref, Step):
                    if ref.graph is not self or by_name.get(ref.name) is not ref:
                        raise invalid(
                            f"step {step.name!r} is after {ref.name!r}, a step of another workflow",
                            step.name,
                            "unknown",
                            upstream=ref.name,
                        )
                    names[ref.name] = None
                elif isinstance(ref, str) and ref in by_name:
                    names[ref] = None
                else:
                    raise invalid(
                        f"step {step.name!r} is after {ref!r}, which is no step of this workflow",
                        step.name,
                        "unknown",
                        upstream=ref if isinstance(ref, str) else repr(ref),
                    )
            upstream[step.name] = tuple(names)
        return _order(self.steps, upstream), upstream


def _order(steps: list[Step], upstream: dict[str, tuple[str, ...]]) -> list[Step]:
    """Kahn's algorithm, taking ready steps in the order they were added; a step left
    over sits on a cycle (or after one), and the first such on a cycle is reported."""
    left = {s.name: len(upstream[s.name]) for s in steps}
    downstream: dict[str, list[str]] = {s.name: [] for s in steps}
    for s in steps:
        for up in upstream[s.name]:
            downstream[up].append(s.name)
    by_name = {s.name: s for s in steps}
    position = {s.name: i for i, s in enumerate(steps)}
    ready = [s.name for s in steps if left[s.name] == 0]
    ordered: list[Step] = []
    while ready:
        ready.sort(key=position.__getitem__)
        name = ready.pop(0)
        ordered.append(by_name[name])
        for down in downstream[name]:
            left[down] -= 1
            if left[down] == 0:
                ready.append(down)
    if len(ordered) < len(steps):
        stuck = next(s.name for s in steps if left[s.name] > 0 and _on_cycle(s.name, upstream))
        raise invalid(f"step {stuck!r} depends on itself", stuck, "cycle")
    return ordered


def _on_cycle(start: str, upstream: dict[str, tuple[str, ...]]) -> bool:
    seen: set[str] = set()
    todo = list(upstream[start])
    while todo:
        name = todo.pop()
        if name == start:
            return True
        if name not in seen:
            seen.add(name)
            todo.extend(upstream[name])
    return False
