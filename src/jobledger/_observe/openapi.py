"""The OpenAPI 3.1 document of the HTTP API, built from the models of `api_models.py`.

`OPERATIONS` is the route table: one `Operation` per method and path, naming the model
of its answer, of its query parameters and of its body, and the errors it may answer.
Adding a route to `http.py` is adding one entry here; `tests/http/test_api_models.py`
fails while an API route of the app has no entry, or an entry has no route, and it
validates a real answer of every entry against its models.

Invariants:

* No JSON Schema is written here: every schema is pydantic's
  (`models_json_schema`, references as `#/components/schemas/{Model}`), and the only
  hand-written parts are OpenAPI's own structure (paths, parameters, media types).
* Every error answer is the envelope `ErrorEnvelope` (`{"error": {"code", "message"}}`),
  listed per status with the codes that status carries. Besides an entry's own errors,
  every operation documents 500 INTERNAL and 503 (a database that cannot be read), one
  that needs the token 401, one with a path parameter 404 NOT_FOUND (an id holding a
  "/", sent as %2F, reaches another route or none), and every POST 403.
* The action entries (`actions=True`) are in the document only when the server has
  them (`allow_actions`), and the security scheme only when it has a token. The
  dashboard's pages are entries too (`text/html`; their errors are pages or, from
  before the page, the envelope), so the fuzz test reaches them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from jobledger._observe import api_models as m

__all__ = ["OPERATIONS", "Operation", "openapi_schema"]

_REF = "#/components/schemas/{model}"
_PARAM = re.compile(r"\{(\w+)\}")
Method = Literal["GET", "POST"]


@dataclass(frozen=True)
class Operation:
    """One method on one path of the API, as the document describes it.

    `response` is the model of the success answer (`status`), or None for an answer
    that is not JSON (`media_type`: the event stream, the metrics text); `stream` is the
    model of each event of an event stream (before OpenAPI 3.2, a stream's `schema`
    describes one event). `errors` maps a status to the codes it carries, or to
    (description, model) when that answer is not the error envelope. `route` is the
    Starlette path when it is not `path` with `:str` converters (one route may serve
    several documented paths)."""

    method: Method
    path: str
    operation_id: str
    summary: str
    response: type[BaseModel] | None
    status: int = 200
    media_type: str = "application/json"
    description: str = ""
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    body_required: bool = False
    errors: Mapping[int, str | tuple[str, type[BaseModel]]] = field(default_factory=dict)
    actions: bool = False
    needs_token: bool = True
    route: str | None = None
    path_descriptions: Mapping[str, str] = field(default_factory=dict)
    stream: type[BaseModel] | None = None

    @property
    def starlette_path(self) -> str:
        return self.route or _PARAM.sub(r"{\1:str}", self.path)

    def models(self) -> list[type[BaseModel]]:
        """The models the document's components must hold for this operation."""
        # The query model is not one: its fields are inlined as parameters.
        found = [self.response, self.body, self.stream]
        found += [e[1] for e in self.errors.values() if isinstance(e, tuple)]
        return [model for model in found if model is not None]


_NOT_FOUND = "JOB_NOT_FOUND: no job with this id."
_JOB_ID = {"job_id": "The job's id."}
_SCHEDULE_ID = {"schedule_id": "The schedule's id."}
_QUEUE = {"queue": "The queue's name (it may contain '/', sent as is or as %2F)."}
_ACTIONS = " (needs --allow-actions and an operator's token)"
_HTML = "text/html"
_SCHEDULE_ACTION = "/api/schedules/{schedule_id:str}/{action:str}"

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/api/jobs",
        "listJobs",
        "List jobs, newest first",
        m.JobPage,
        query=m.JobListQuery,
        errors={400: "INVALID_QUERY: a filter, the search, limit or offset is invalid."},
    ),
    Operation(
        "GET",
        "/api/jobs/{job_id}",
        "getJob",
        "One job",
        m.Job,
        errors={404: _NOT_FOUND},
        path_descriptions=_JOB_ID,
    ),
    Operation(
        "GET",
        "/api/jobs/{job_id}/attempts",
        "getJobAttempts",
        "The job's ended attempts, oldest first",
        m.AttemptList,
        description="Each with its outcome, error (with the traceback of what the handler "
        "raised) and the lines it logged through ctx.logger.",
        errors={404: _NOT_FOUND},
        path_descriptions=_JOB_ID,
    ),
    Operation(
        "GET",
        "/api/jobs/{job_id}/explain",
        "explainJob",
        "Why the job is not running now",
        m.Explanation,
        description="Its status and each reason that holds now (`jobs.explain`): "
        "RUN_AT_IN_FUTURE, QUEUE_FULL, GLOBAL_FULL, RATE_LIMITED, QUEUE_PAUSED, "
        "WAITING_UPSTREAM, NO_LIVE_WORKER, RECOVERY_PENDING, read from the table.",
        errors={404: _NOT_FOUND},
        path_descriptions=_JOB_ID,
    ),
    Operation(
        "GET",
        "/api/jobs/{job_id}/events",
        "jobEvents",
        "Server-sent events of one job until it ends",
        None,
        media_type="text/event-stream",
        description="Events `snapshot` (data: a Job) first and whenever anything but "
        "progress changes, `progress` (data: a ProgressEvent) when progress changes, "
        "`gone` (data: a Gone) if the row is deleted meanwhile; each with an increasing "
        "`id`. A `: ping` comment every 5 s. The stream ends after the snapshot of a "
        "terminal state.",
        errors={404: _NOT_FOUND},
        path_descriptions=_JOB_ID,
        stream=m.JobEvent,
    ),
    Operation(
        "GET",
        "/api/workflows",
        "listWorkflows",
        "List workflows, newest first, with their jobs counted per status",
        m.WorkflowPage,
        query=m.WorkflowListQuery,
        errors={400: "INVALID_QUERY: limit or offset is invalid."},
    ),
    Operation(
        "GET",
        "/api/workflows/{workflow_id}",
        "getWorkflow",
        "One workflow: its jobs, the edges between them and its steps",
        m.WorkflowDetail,
        description="`steps` is the graph one node per step (an add_many step is one node "
        "with its jobs counted per status). An edge may start at a job of another "
        "workflow; its step then appears with `outside: true`.",
        errors={404: "JOB_WORKFLOW_NOT_FOUND"},
        path_descriptions={"workflow_id": "The workflow's id."},
    ),
    Operation("GET", "/api/queues", "listQueues", "Queues with job counts by state", m.QueueList),
    Operation(
        "GET",
        "/api/throughput",
        "throughput",
        "Jobs completed and failed per minute, the last `minutes` minutes",
        m.Throughput,
        query=m.ThroughputQuery,
        errors={400: "INVALID_QUERY: minutes is not an integer in range."},
    ),
    Operation("GET", "/api/schedules", "listSchedules", "Persistent schedules", m.ScheduleList),
    Operation(
        "GET", "/api/workers", "listWorkers", "Registered workers and the leader", m.WorkerList
    ),
    Operation(
        "GET",
        "/api/health",
        "health",
        "Liveness of the API and its database (never needs the token)",
        m.Health,
        errors={503: ("The database cannot be read.", m.HealthError)},
        needs_token=False,
    ),
    Operation(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics",
        None,
        media_type="text/plain",
        description="Prometheus text format 0.0.4.",
    ),
    Operation(
        "GET",
        "/api/audit",
        "listAudit",
        "The audit log, newest first: every action a person took",
        m.AuditPage,
        query=m.AuditQuery,
        errors={400: "INVALID_QUERY: limit, offset, actor or action is invalid."},
    ),
    Operation("GET", "/api/whoami", "whoami", "The caller's token name and role", m.WhoAmI),
    Operation("GET", "/openapi.json", "openapi", "This document", m.OpenAPIDocument),
    Operation(
        "POST",
        "/api/jobs/retry",
        "retryJobs",
        "Re-run the finished jobs a filter selects, each as a new job" + _ACTIONS,
        m.RetryManyResult,
        body=m.RetryManyBody,
        errors={
            400: "INVALID_BODY, or JOB_INVALID_OPTION (a status that is not terminal, a "
            "limit out of range, a bad search)."
        },
        actions=True,
    ),
    Operation(
        "POST",
        "/api/jobs/cancel",
        "cancelJobs",
        "Cancel every unfinished job of a queue or a type" + _ACTIONS,
        m.CancelManyResult,
        body=m.CancelManyBody,
        body_required=True,
        errors={400: "INVALID_BODY, or JOB_FILTER_REQUIRED (neither queue nor type)."},
        actions=True,
    ),
    Operation(
        "POST",
        "/api/jobs/{job_id}/cancel",
        "cancelJob",
        "Cancel a job" + _ACTIONS,
        m.CancelResult,
        query=m.CancelQuery,
        errors={404: _NOT_FOUND},
        actions=True,
        path_descriptions=_JOB_ID,
    ),
    Operation(
        "POST",
        "/api/jobs/{job_id}/retry",
        "retryJob",
        "Re-run a finished job as a new job" + _ACTIONS,
        m.Job,
        status=201,
        description="The answer is the new job (its `retry_of` is the old one's id), with "
        "`Location: /api/jobs/{new id}`.",
        body=m.RetryBody,
        errors={
            400: "INVALID_BODY, or the payload's own code (JOB_PAYLOAD_INVALID, "
            "JOB_PAYLOAD_TOO_LARGE).",
            404: _NOT_FOUND,
            409: "JOB_NOT_RETRYABLE: the job is not completed, failed or cancelled.",
        },
        actions=True,
        path_descriptions=_JOB_ID,
    ),
    Operation(
        "POST",
        "/api/schedules/{schedule_id}/run",
        "runSchedule",
        "Run a schedule now" + _ACTIONS,
        m.RunResult,
        errors={
            400: "The schedule cannot run here (JOB_UNKNOWN_TYPE: serve without --app has "
            "no handler for its type).",
            404: "JOB_SCHEDULE_NOT_FOUND",
        },
        actions=True,
        path_descriptions=_SCHEDULE_ID,
    ),
    Operation(
        "POST",
        "/api/schedules/{schedule_id}/backfill",
        "backfillSchedule",
        "Enqueue every fire of a schedule in [from, to) not written yet" + _ACTIONS,
        m.BackfillResult,
        body=m.BackfillBody,
        body_required=True,
        errors={
            400: "INVALID_BODY, or JOB_INVALID_OPTION (a bad or future range, more than "
            "1000 fires, a one-shot schedule).",
            404: "JOB_SCHEDULE_NOT_FOUND",
        },
        actions=True,
        path_descriptions=_SCHEDULE_ID,
    ),
    Operation(
        "POST",
        "/api/schedules/{schedule_id}/pause",
        "pauseSchedule",
        "Stop a schedule's fires (it stays stored)" + _ACTIONS,
        m.Schedule,
        errors={404: "JOB_SCHEDULE_NOT_FOUND"},
        actions=True,
        route=_SCHEDULE_ACTION,
        path_descriptions=_SCHEDULE_ID,
    ),
    Operation(
        "POST",
        "/api/schedules/{schedule_id}/resume",
        "resumeSchedule",
        "Let a paused schedule fire again" + _ACTIONS,
        m.Schedule,
        errors={404: "JOB_SCHEDULE_NOT_FOUND"},
        actions=True,
        route=_SCHEDULE_ACTION,
        path_descriptions=_SCHEDULE_ID,
    ),
    Operation(
        "POST",
        "/api/schedules/{schedule_id}/trigger",
        "setScheduleTrigger",
        "Give a schedule a new trigger: a cron (with a zone) or an interval" + _ACTIONS,
        m.Schedule,
        body=m.TriggerBody,
        body_required=True,
        errors={
            400: "INVALID_BODY, or JOB_SCHEDULE_TRIGGER_INVALID (a cron or zone that does "
            "not parse, an interval out of range).",
            404: "JOB_SCHEDULE_NOT_FOUND",
        },
        actions=True,
        route=_SCHEDULE_ACTION,
        path_descriptions=_SCHEDULE_ID,
    ),
    Operation(
        "POST",
        "/api/queues/{queue}/pause",
        "pauseQueue",
        "Stop claims on a queue in every worker" + _ACTIONS,
        m.QueueLimits,
        errors={400: "JOB_INVALID_OPTION: not a queue name."},
        actions=True,
        route="/api/queues/{rest:path}",
        path_descriptions=_QUEUE,
    ),
    Operation(
        "POST",
        "/api/queues/{queue}/resume",
        "resumeQueue",
        "Let workers claim from a paused queue again" + _ACTIONS,
        m.QueueLimits,
        errors={400: "JOB_INVALID_OPTION: not a queue name."},
        actions=True,
        route="/api/queues/{rest:path}",
        path_descriptions=_QUEUE,
    ),
    Operation(
        "POST",
        "/api/queues/{queue}/limits",
        "setQueueLimits",
        "Set a queue's cap and rate limit for every worker" + _ACTIONS,
        m.QueueLimits,
        body=m.LimitsBody,
        body_required=True,
        errors={400: "INVALID_BODY, or JOB_INVALID_OPTION (a limit out of range)."},
        actions=True,
        route="/api/queues/{rest:path}",
        path_descriptions=_QUEUE,
    ),
    # The dashboard's pages: HTML, described so the fuzz test reaches them too.
    Operation(
        "GET",
        "/",
        "overviewPage",
        "The dashboard's overview: queues (counts, cap, rate limit, paused state) and the "
        "jobs completed and failed per minute over the last hour",
        None,
        media_type=_HTML,
    ),
    Operation(
        "GET",
        "/jobs",
        "jobsPage",
        "The job list: search, filters and paging (those of /api/jobs), and an operator's "
        "bulk actions behind a confirmation",
        None,
        media_type=_HTML,
        query=m.JobsPageQuery,
        errors={400: "A bad filter (the page says which)."},
    ),
    Operation(
        "GET",
        "/schedules",
        "schedulesPage",
        "The schedules, with an operator's pause, resume, run now and trigger editor",
        None,
        media_type=_HTML,
    ),
    Operation(
        "GET",
        "/workers",
        "workersPage",
        "The workers and the leader lease",
        None,
        media_type=_HTML,
    ),
    Operation(
        "GET",
        "/audit",
        "auditPage",
        "The audit log, newest first (the filters of /api/audit)",
        None,
        media_type=_HTML,
        query=m.AuditQuery,
        errors={400: "A bad filter (the page says which)."},
    ),
    Operation(
        "GET",
        "/jobs/{job_id}",
        "jobPage",
        "One job's page",
        None,
        media_type=_HTML,
        errors={404: "No job with this id."},
        path_descriptions=_JOB_ID,
    ),
    Operation(
        "GET",
        "/workflows",
        "workflowsPage",
        "The workflows page (the filters of /api/workflows)",
        None,
        media_type=_HTML,
        query=m.WorkflowListQuery,
        errors={400: "A bad filter (the page says which)."},
    ),
    Operation(
        "GET",
        "/workflows/{workflow_id}",
        "workflowPage",
        "One workflow's page and graph",
        None,
        media_type=_HTML,
        errors={404: "No workflow with this id."},
        path_descriptions={"workflow_id": "The workflow's id."},
    ),
)


def _all_models() -> list[type[BaseModel]]:
    seen: dict[str, type[BaseModel]] = {"ErrorEnvelope": m.ErrorEnvelope}
    for op in OPERATIONS:
        for model in op.models():
            seen.setdefault(model.__name__, model)
    return list(seen.values())


@cache
def _components() -> dict[str, Any]:
    _, top = models_json_schema(
        [(model, "validation") for model in _all_models()], ref_template=_REF
    )
    schemas: dict[str, Any] = top.get("$defs", {})
    return schemas


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(description: str, model: type[BaseModel]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _parameters(op: Operation) -> list[dict[str, Any]]:
    segment = TypeAdapter(m.PathSegment).json_schema()
    out: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": segment,
            **({"description": op.path_descriptions[name]} if name in op.path_descriptions else {}),
        }
        for name in _PARAM.findall(op.path)
    ]
    if op.query is not None:
        schema = op.query.model_json_schema(ref_template=_REF)
        required = set(schema.get("required", ()))
        for name, prop in schema["properties"].items():
            prop = dict(prop)
            description = prop.pop("description", None)
            prop.pop("title", None)
            param = {"name": name, "in": "query", "required": name in required, "schema": prop}
            if description:
                param["description"] = description
            out.append(param)
    return out


def _responses(op: Operation, *, token: bool) -> dict[str, Any]:
    if op.response is not None:
        ok = _json("Success.", op.response)
    else:
        body = _ref(op.stream) if op.stream is not None else TypeAdapter(str).json_schema()
        ok = {"description": "Success.", "content": {op.media_type: {"schema": body}}}
    errors: dict[int, str | tuple[str, type[BaseModel]]] = {
        500: "INTERNAL: a bug (the message never carries a traceback).",
        503: "The database cannot be read (DB_* codes).",
    }
    if op.needs_token and token:
        errors[401] = "UNAUTHORIZED: no valid token (a query-string token is not read on POST)."
    if op.method == "POST":
        errors[403] = (
            "FORBIDDEN_ROLE: a viewer's token. FORBIDDEN_ORIGIN: Origin (or Referer) is not "
            "the server's own; a request authorised by the cookie must send one of them."
        )
    errors.update(op.errors)
    if _PARAM.search(op.path):
        own = errors.get(404)
        not_routed = "NOT_FOUND: a '/' in a path parameter (sent as %2F) reaches no route."
        errors[404] = not_routed if not isinstance(own, str) else f"{own} {not_routed}"
    out = {str(op.status): ok}
    for status in sorted(errors):
        what = errors[status]
        out[str(status)] = (
            _json(what[0], what[1]) if isinstance(what, tuple) else _json(what, m.ErrorEnvelope)
        )
        if op.media_type == _HTML:
            # A page refuses with a page; what fails before the page (the guard, a
            # database that cannot be read, a bug) answers with the envelope.
            out[str(status)]["content"][_HTML] = {"schema": TypeAdapter(str).json_schema()}
    return out


def _operation(op: Operation, *, token: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"summary": op.summary, "operationId": op.operation_id}
    if op.description:
        doc["description"] = op.description
    params = _parameters(op)
    if params:
        doc["parameters"] = params
    if op.body is not None:
        doc["requestBody"] = {
            "required": op.body_required,
            "description": (op.body.__doc__ or "").strip(),
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    doc["responses"] = _responses(op, token=token)
    if token:
        doc["security"] = [{"bearer": []}] if op.needs_token else []
    return doc


def openapi_schema(*, actions: bool = False, token: bool = False) -> dict[str, Any]:
    """The document a server with (or without) the actions and a token serves."""
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        if op.actions and not actions:
            continue
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, token=token)
    components: dict[str, Any] = {"schemas": copy.deepcopy(_components())}
    if token:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jobledger",
            "version": "1",
            "description": "The API over a jobledger database: read-only, plus the "
            "operator's actions when the server allows them.",
        },
        "paths": paths,
        "components": components,
    }
