"""`jobs.workflow(name)`: the builder, its one-transaction enqueue, and `WorkflowHandle`.

```text
wf = jobs.workflow("ingest")                  nothing written yet
fetch = wf.add(FETCH, Fetch(url=u), name="fetch")
parts = wf.add_many(PARSE, [...], name="parse", after=[fetch])
wf.add(INDEX, Index(), name="index", after=[parts], on_upstream_failure="cancel")
h = wf.enqueue()                              one transaction: workflow row, jobs, edges
await h.finished                              -> WorkflowSnapshot(id, name, status, jobs)
```

Invariants:

* `enqueue()` checks the whole graph (`_core/workflow.py`) and every payload and option
  before it writes anything; then the workflow's row, every job and every edge go in
  one transaction (the caller's, with `enqueue_tx`). Any error writes nothing.
* A job with upstream steps is written `waiting` with `upstream_left` = its count of
  upstream jobs; a job without is `pending`. The database releases and cancels them
  (SQLite: `jobs_release_downstream` and `jobs_cancel_downstream`, migrations 11 and
  13; PostgreSQL: `jobs_release_downstream`, migration 8), in
  the transaction of the write that ended the upstream job; this module only writes
  the graph.
* Steps take `queue`, `priority`, `timeout`, `max_attempts` and `metadata`; not keys,
  parents, delays or `run_at` (a released job runs as soon as it is pending).
* A builder enqueues once; a second `enqueue()` is `JOB_WORKFLOW_INVALID`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jobledger._core.enqueue import EnqueueOptions, prepare_row
from jobledger._core.ids import new_id
from jobledger._core.registry import JobType
from jobledger._core.workflow import OnUpstreamFailure, Step, WorkflowGraph, invalid
from jobledger._runtime import tracing
from jobledger._runtime.handle import JobHandle
from jobledger._storage import layout as L
from jobledger._storage.interface import JobRow, NewWorkflow
from jobledger._types import WorkflowSnapshot
from jobledger.errors import JobValidationError

if TYPE_CHECKING:
    from jobledger._runtime.manager import JobManager, WriteTx

__all__ = ["Step", "Workflow", "WorkflowHandle"]

_UNSET: Any = object()


class Workflow:
    """A graph of jobs to enqueue together (`jobs.workflow(name)`); nothing is written
    until `enqueue()`."""

    def __init__(self, manager: JobManager, name: str) -> None:
        self._manager = manager
        self._graph = WorkflowGraph(name)
        self._enqueued = False

    @property
    def name(self) -> str:
        return self._graph.name

    def add(
        self,
        job_type: JobType[Any, Any] | str,
        payload: Any,
        *,
        name: str | None = None,
        after: Sequence[Step | str] | Step | str | None = None,
        on_upstream_failure: OnUpstreamFailure = "cancel",
        queue: str | None = None,
        priority: int = 0,
        timeout: float | None = _UNSET,
        max_attempts: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Step:
        """One job; `after` names the steps (or step names, maybe added later) whose jobs
        must all finish first. `on_upstream_failure`: when one of those fails or is
        cancelled, cancel this step (`"cancel"`) or run it anyway (`"run"`)."""
        options = _options(queue, priority, timeout, max_attempts, metadata)
        return self._graph.add_step(
            job_type,
            [payload],
            many=False,
            name=name,
            after=after,
            on_upstream_failure=on_upstream_failure,
            options=options,
        )

    def add_many(
        self,
        job_type: JobType[Any, Any] | str,
        payloads: Sequence[Any],
        *,
        name: str | None = None,
        after: Sequence[Step | str] | Step | str | None = None,
        on_upstream_failure: OnUpstreamFailure = "cancel",
        queue: str | None = None,
        priority: int = 0,
        timeout: float | None = _UNSET,
        max_attempts: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Step:
        """One job per payload, as one step: a step after it waits for all of them, and
        sees their outputs as a list, in this order (`ctx.upstream`)."""
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise invalid("add_many takes a sequence of payloads", name, "payloads")
        if not payloads:
            raise invalid("add_many takes at least one payload", name, "payloads")
        options = _options(queue, priority, timeout, max_attempts, metadata)
        return self._graph.add_step(
            job_type,
            payloads,
            many=True,
            name=name,
            after=after,
            on_upstream_failure=on_upstream_failure,
            options=options,
        )

    def enqueue(self) -> WorkflowHandle:
        """Check the graph, then write it in one transaction; its handle."""
        wf, handles = self._prepare()
        manager = self._manager
        _write(manager, wf, None)
        manager._after_workflow_enqueue(wf)
        return WorkflowHandle(manager, wf.id, wf.name, handles)

    def enqueue_tx(self, tx: WriteTx) -> WorkflowHandle:
        """`enqueue` inside `tx` (`jobs.write_tx()`): the graph commits or rolls back with
        the caller's writes."""
        manager = self._manager
        manager._check_tx(tx)
        wf, handles = self._prepare()
        _write(manager, wf, tx.conn)
        tx.after_commit(lambda: manager._after_workflow_enqueue(wf))
        return WorkflowHandle(manager, wf.id, wf.name, handles)

    def _enqueue_once(self, workflow_id: str) -> WorkflowHandle:
        """`enqueue` under `workflow_id`, unless a workflow with that id exists: then
        nothing is written and its handle is the stored one's (`workflow_handler`)."""
        wf, handles = self._prepare(workflow_id)
        manager = self._manager
        if _write(manager, replace(wf, exists_ok=True), None):
            manager._after_workflow_enqueue(wf)
            return WorkflowHandle(manager, wf.id, wf.name, handles)
        stored: dict[str, list[JobHandle[Any]]] = {}
        for row in manager._store.workflow_jobs(workflow_id):
            stored.setdefault(row[L.C_STEP], []).append(
                JobHandle(manager._waiter, row, manager._job_type_of(row))
            )
        return WorkflowHandle(manager, workflow_id, wf.name, stored)

    def _prepare(
        self, workflow_id: str | None = None
    ) -> tuple[NewWorkflow, dict[str, list[JobHandle[Any]]]]:
        if self._enqueued:
            raise invalid(f"workflow {self.name!r} was enqueued already", None, "enqueued")
        ordered, upstream = self._graph.check()
        manager = self._manager
        now_ms = manager._engine.now_ms()
        if workflow_id is None:
            workflow_id = new_id(now_ms)
        rows: list[JobRow] = []
        left: list[int] = []
        edges: list[tuple[str, str, str, bool]] = []
        ids_of: dict[str, list[str]] = {}
        many: dict[str, bool] = {}
        handles: dict[str, list[JobHandle[Any]]] = {}
        for step in ordered:
            jt, spec = manager._resolve(step.job_type)
            opts = EnqueueOptions(**step.options)
            ups = upstream[step.name]
            n_up = sum(len(ids_of[u]) for u in ups)
            step_ids: list[str] = []
            for index, payload in enumerate(step.payloads):
                try:
                    row = prepare_row(
                        jt,
                        spec,
                        payload,
                        opts,
                        now_ms=now_ms,
                        enqueued_by=manager.worker_id,
                        max_payload_bytes=manager.max_payload_bytes,
                    )
                except JobValidationError as exc:
                    raise invalid(
                        f"step {step.name!r}: {exc.message}",
                        step.name,
                        "entry",
                        index=index,
                        code=exc.code,
                    ) from exc
                status = "waiting" if ups else row[L.C_STATUS]
                row = (
                    *row[: L.C_STATUS],
                    status,
                    *row[L.C_STATUS + 1 : L.C_WORKFLOW],
                    workflow_id,
                    step.name,
                )
                rows.append(row)
                left.append(n_up)
                step_ids.append(row[L.C_ID])
                handles.setdefault(step.name, []).append(JobHandle(manager._waiter, row, jt))
                for u in ups:
                    edges.extend((up_id, row[L.C_ID], step.on_upstream_failure, many[u])
                                 for up_id in ids_of[u])  # fmt: skip
            ids_of[step.name] = step_ids
            many[step.name] = step.many
        self._enqueued = True
        wf = NewWorkflow(workflow_id, self.name, now_ms, rows, left, edges)
        return wf, handles

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, steps={len(self._graph.steps)})"


def _write(manager: JobManager, wf: NewWorkflow, conn: Any) -> bool:
    """`Store.enqueue_workflow`, inside a `send` span when tracing is on."""
    store = manager._store
    inst = tracing.instruments()
    if inst is None:
        return store.enqueue_workflow(wf, conn=conn)
    written: bool = tracing.traced_send(
        inst, wf.rows, lambda rows: store.enqueue_workflow(replace(wf, rows=rows), conn=conn)
    )
    return written


def _options(
    queue: str | None,
    priority: int,
    timeout: float | None,
    max_attempts: int | None,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    options: dict[str, Any] = {"queue": queue, "priority": priority}
    if timeout is not _UNSET:
        options["timeout"] = timeout
    if max_attempts is not None:
        options["max_attempts"] = max_attempts
    if metadata is not None:
        options["metadata"] = metadata
    return options


class WorkflowHandle:
    """What `Workflow.enqueue()` returns: the workflow's id and its jobs' handles."""

    __slots__ = ("_manager", "id", "jobs", "name")

    def __init__(
        self,
        manager: JobManager,
        workflow_id: str,
        name: str,
        jobs: dict[str, list[JobHandle[Any]]],
    ) -> None:
        self._manager = manager
        self.id = workflow_id
        self.name = name
        # Step name -> the handles of its jobs (one for `add`, in order for `add_many`).
        self.jobs = jobs

    @property
    def finished(self) -> Awaitable[WorkflowSnapshot]:
        """The workflow's snapshot once every job of it is terminal (awaitable)."""
        return self._finished()

    async def _finished(self) -> WorkflowSnapshot:
        await asyncio.gather(*(h.finished for hs in self.jobs.values() for h in hs))
        snap = self._manager.get_workflow(self.id)
        assert snap is not None  # written before the handle existed; never deleted here
        return snap

    def __repr__(self) -> str:
        return f"WorkflowHandle(id={self.id!r}, name={self.name!r})"
