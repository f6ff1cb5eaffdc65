"""The OpenAPI 3.0 description of the HTTP API, written by hand.

It is the contract the schema fuzz test (`tests/http/test_fuzz.py`) checks the server
against: every documented response must match its schema and nothing may answer 5xx.
Keep it in step with `http.py` and `JobSnapshot.to_json()`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_schema"]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_TIME = {"type": "string", "format": "date-time"}
_ANY: dict[str, Any] = {"nullable": True}
_OK = {"type": "string", "enum": ["ok"]}
_STATUS = {
    "type": "string",
    "enum": ["pending", "delayed", "running", "completed", "failed", "cancelled", "waiting"],
}

_WORKFLOW_STATUS = {"type": "string", "enum": ["running", "completed", "failed", "cancelled"]}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
    }


_SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {"error": _obj({"code": _STR, "message": _STR})},
    ),
    "JobError": _nullable(
        _obj(
            {
                "code": _STR,
                "message": _STR,
                "retryable": _BOOL,
                "params": {"type": "object"},
                "traceback": _nullable(_STR),
            }
        )
    ),
    "Attempt": _obj(
        {
            "attempt": {"type": "integer", "minimum": 1},
            "worker_id": _nullable(_STR),
            "started_at": _nullable(_TIME),
            "finished_at": _TIME,
            "outcome": {
                "type": "string",
                "enum": ["completed", "retry", "failed", "cancelled", "interrupted", "lost"],
            },
            "error": {"$ref": "#/components/schemas/JobError"},
            "logs": {
                "type": "array",
                "items": _obj({"at": _TIME, "level": _STR, "message": _STR}),
            },
        }
    ),
    "Explanation": _obj(
        {
            "job_id": _STR,
            "status": _STATUS,
            "reasons": {
                "type": "array",
                "items": _obj({"code": _STR, "message": _STR}),
            },
        }
    ),
    "AttemptList": _obj(
        {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Attempt"}}}
    ),
    "Job": _obj(
        {
            "id": _STR,
            "type": _STR,
            "status": _STATUS,
            "queue": _STR,
            "priority": _INT,
            "payload": _ANY,
            "output": _ANY,
            "error": {"$ref": "#/components/schemas/JobError"},
            "attempt": _INT,
            "max_attempts": _INT,
            "timeout": _nullable(_NUM),
            "idempotency_key": _nullable(_STR),
            "parent_id": _nullable(_STR),
            "schedule_id": _nullable(_STR),
            "metadata": {"type": "object"},
            "progress": _nullable(_NUM),
            "progress_detail": _nullable(_STR),
            "cancel_requested": _BOOL,
            "worker_id": _nullable(_STR),
            "scheduled_at": _TIME,
            "started_at": _nullable(_TIME),
            "finished_at": _nullable(_TIME),
            "created_at": _TIME,
            "updated_at": _TIME,
            "retry_of": _nullable(_STR),
            "workflow_id": _nullable(_STR),
            "step": _nullable(_STR),
        }
    ),
    "JobPage": _obj(
        {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}},
            "total": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 500},
            "offset": {"type": "integer", "minimum": 0},
        }
    ),
    "StatusCounts": {
        "type": "object",
        "description": "Jobs per status; every status is a key.",
        "properties": {status: {"type": "integer", "minimum": 0} for status in _STATUS["enum"]},
        "required": list(_STATUS["enum"]),
    },
    "Workflow": _obj(
        {
            "id": _STR,
            "name": _STR,
            "status": _WORKFLOW_STATUS,
            "created_at": _TIME,
            "counts": {"$ref": "#/components/schemas/StatusCounts"},
            "total": {"type": "integer", "minimum": 0},
        }
    ),
    "WorkflowPage": _obj(
        {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Workflow"}},
            "total": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 500},
            "offset": {"type": "integer", "minimum": 0},
        }
    ),
    "WorkflowEdge": _obj(
        {
            "upstream_id": _STR,
            "job_id": _STR,
            "on_upstream_failure": {"type": "string", "enum": ["cancel", "run"]},
            "many": _BOOL,
        }
    ),
    "WorkflowStep": _obj(
        {
            "key": _STR,
            "name": _STR,
            "workflow_id": _nullable(_STR),
            "outside": _BOOL,
            "types": {"type": "array", "items": _STR},
            "jobs": {"type": "integer", "minimum": 1},
            "job_ids": {"type": "array", "items": _STR},
            "counts": {"$ref": "#/components/schemas/StatusCounts"},
            "status": _STATUS,
            "upstream": {"type": "array", "items": _STR},
            "on_upstream_failure": _nullable({"type": "string", "enum": ["cancel", "run"]}),
        }
    ),
    "WorkflowDetail": _obj(
        {
            "id": _STR,
            "name": _STR,
            "status": _WORKFLOW_STATUS,
            "created_at": _TIME,
            "counts": {"$ref": "#/components/schemas/StatusCounts"},
            "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}},
            "edges": {"type": "array", "items": {"$ref": "#/components/schemas/WorkflowEdge"}},
            "steps": {"type": "array", "items": {"$ref": "#/components/schemas/WorkflowStep"}},
        }
    ),
    "RateLimit": _obj({"limit": _INT, "per": {"type": "number"}, "text": _STR}),
    "Queue": _obj(
        {
            "name": _STR,
            "type": _nullable(_STR),
            "counts": {"type": "object", "additionalProperties": _INT},
            "oldest_pending_at": _nullable(_TIME),
            "concurrency": _nullable(_INT),
            "rate_limit": _nullable({"$ref": "#/components/schemas/RateLimit"}),
            "paused": _BOOL,
        }
    ),
    "QueueLimits": _obj(
        {
            "queue": _STR,
            "concurrency": _nullable(_INT),
            "rate_limit": _nullable({"$ref": "#/components/schemas/RateLimit"}),
            "paused": _BOOL,
        }
    ),
    "Schedule": _obj(
        {
            "id": _STR,
            "type": _STR,
            "name": _nullable(_STR),
            "trigger": _ANY,
            "trigger_text": _STR,
            "payload": _ANY,
            "catch_up": _ANY,
            "enabled": _BOOL,
            "next_run": _nullable(_TIME),
            "last_run": _nullable(_TIME),
            "fire_count": _INT,
            "metadata": {"type": "object"},
            "created_at": _nullable(_TIME),
            "updated_at": _nullable(_TIME),
            "overlap": {"type": "string", "enum": ["allow", "skip", "buffer_one"]},
            "jitter": {"type": "number"},
            "skipped_fires": _INT,
        }
    ),
    "Worker": _obj(
        {
            "id": _STR,
            "hostname": _STR,
            "pid": _INT,
            "handlers": {"type": "array", "items": _STR},
            "started_at": _TIME,
            "heartbeat_at": _TIME,
            "stopped_at": _nullable(_TIME),
            "state": {"type": "string", "enum": ["alive", "dead", "stopped"]},
        }
    ),
    "Leader": _nullable(
        _obj({"worker_id": _STR, "term": _INT, "expires_at": _TIME, "valid": _BOOL})
    ),
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(description, _ref("Error"))


def _items(name: str) -> dict[str, Any]:
    return _obj({"items": {"type": "array", "items": _ref(name)}})


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_JOB_ID = {
    "name": "job_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1},
}


_ACTION_REFUSALS = {
    "401": _error("UNAUTHORIZED: no token (a query-string token is not read on POST)."),
    "403": _error(
        "FORBIDDEN_ORIGIN: Origin (or Referer) is not the server's own; a request "
        "authorised by the cookie must send one of them."
    ),
}


def openapi_schema(*, actions: bool = False) -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/api/jobs": {
            "get": {
                "summary": "List jobs, newest first",
                "operationId": "listJobs",
                "parameters": [
                    _query("status", _STR, "Comma list of statuses, e.g. pending,running."),
                    _query("queue", _STR, "Only this queue."),
                    _query("type", _STR, "Only this job type."),
                    _query("schedule_id", _STR, "Only jobs fired by this schedule."),
                    _query("parent_id", _STR, "Only children of this job."),
                    _query("workflow_id", _STR, "Only jobs of this workflow."),
                    _query(
                        "q",
                        _STR,
                        "A search: an id or id prefix (4 characters or more), "
                        "payload.FIELD:VALUE, metadata.FIELD:VALUE (FIELD may have dots), "
                        "or an error code (JOB_HANDLER_TIMEOUT).",
                    ),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                        "Page size.",
                    ),
                    _query(
                        "offset", {"type": "integer", "minimum": 0, "default": 0}, "Rows to skip."
                    ),
                ],
                "responses": {
                    "200": _json("A page of jobs.", _ref("JobPage")),
                    "400": _error("INVALID_QUERY: a filter, limit or offset is invalid."),
                },
            }
        },
        "/api/jobs/{job_id}": {
            "get": {
                "summary": "One job",
                "operationId": "getJob",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": _json("The job.", _ref("Job")),
                    "404": _error("JOB_NOT_FOUND"),
                },
            }
        },
        "/api/jobs/{job_id}/attempts": {
            "get": {
                "summary": "The job's ended attempts, oldest first",
                "description": "Each with its outcome, error (with the traceback of what the "
                "handler raised) and the lines it logged through ctx.logger.",
                "operationId": "getJobAttempts",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": _json("The attempts.", _ref("AttemptList")),
                    "404": _error("JOB_NOT_FOUND"),
                },
            }
        },
        "/api/jobs/{job_id}/explain": {
            "get": {
                "summary": "Why the job is not running now",
                "description": "Its status and each reason that holds now: RUN_AT_IN_FUTURE, "
                "QUEUE_FULL, GLOBAL_FULL, RATE_LIMITED, QUEUE_PAUSED, WAITING_UPSTREAM, "
                "NO_LIVE_WORKER, RECOVERY_PENDING (read from the table; a handler's own "
                "concurrency is only known to its process).",
                "operationId": "explainJob",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": _json("The explanation.", _ref("Explanation")),
                    "404": _error("JOB_NOT_FOUND"),
                },
            }
        },
        "/api/jobs/{job_id}/events": {
            "get": {
                "summary": "Server-sent events of one job until it ends",
                "description": (
                    "Events `snapshot` (a Job) and `progress` ({id, status, progress, "
                    "progress_detail, updated_at}); the stream ends after the terminal "
                    "snapshot. `gone` if the row is deleted meanwhile."
                ),
                "operationId": "jobEvents",
                "parameters": [_JOB_ID],
                "responses": {
                    "200": {
                        "description": "An event stream.",
                        "content": {"text/event-stream": {"schema": _STR}},
                    },
                    "404": _error("JOB_NOT_FOUND"),
                },
            }
        },
        "/api/workflows": {
            "get": {
                "summary": "List workflows, newest first, with their jobs counted per status",
                "operationId": "listWorkflows",
                "parameters": [
                    _query("name", _STR, "Only workflows of this name."),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                        "Page size.",
                    ),
                    _query(
                        "offset", {"type": "integer", "minimum": 0, "default": 0}, "Rows to skip."
                    ),
                ],
                "responses": {
                    "200": _json("A page of workflows.", _ref("WorkflowPage")),
                    "400": _error("INVALID_QUERY: limit or offset is invalid."),
                },
            }
        },
        "/api/workflows/{workflow_id}": {
            "get": {
                "summary": "One workflow: its jobs, the edges between them and its steps",
                "description": "`steps` is the graph one node per step (an add_many step "
                "is one node with its jobs counted per status); `upstream` lists the keys "
                "of the steps a step waits for. An edge may start at a job of another "
                "workflow; its step then appears with `outside: true`.",
                "operationId": "getWorkflow",
                "parameters": [{**_JOB_ID, "name": "workflow_id"}],
                "responses": {
                    "200": _json("The workflow.", _ref("WorkflowDetail")),
                    "404": _error("JOB_WORKFLOW_NOT_FOUND"),
                },
            }
        },
        "/api/queues": {
            "get": {
                "summary": "Queues with job counts by state",
                "operationId": "listQueues",
                "responses": {"200": _json("Every known queue.", _items("Queue"))},
            }
        },
        "/api/schedules": {
            "get": {
                "summary": "Persistent schedules",
                "operationId": "listSchedules",
                "responses": {"200": _json("Every schedule.", _items("Schedule"))},
            }
        },
        "/api/workers": {
            "get": {
                "summary": "Registered workers and the leader",
                "operationId": "listWorkers",
                "responses": {
                    "200": _json(
                        "Workers, alive first.",
                        _obj(
                            {
                                "items": {"type": "array", "items": _ref("Worker")},
                                "leader": _ref("Leader"),
                            }
                        ),
                    )
                },
            }
        },
        "/api/health": {
            "get": {
                "summary": "Liveness of the API and its database",
                "operationId": "health",
                "responses": {
                    "200": _json(
                        "The database is readable.",
                        _obj({"status": _OK, "schema_version": _INT}),
                    ),
                    "503": _json("The database cannot be read.", {"type": "object"}),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "operationId": "metrics",
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4.",
                        "content": {"text/plain": {"schema": _STR}},
                    }
                },
            }
        },
    }
    if actions:
        paths["/api/jobs/{job_id}/cancel"] = {
            "post": {
                "summary": "Cancel a job (needs --allow-actions and the token)",
                "operationId": "cancelJob",
                "parameters": [_JOB_ID, _query("reason", _STR, "Why (at most 500 characters).")],
                "responses": {
                    "200": _json(
                        "The cancel outcome.",
                        _obj(
                            {
                                "id": _STR,
                                "outcome": {
                                    "type": "string",
                                    "enum": ["cancelled", "timed-out", "not-cancellable"],
                                },
                            }
                        ),
                    ),
                    **_ACTION_REFUSALS,
                    "404": _error("JOB_NOT_FOUND"),
                },
            }
        }
        paths["/api/jobs/{job_id}/retry"] = {
            "post": {
                "summary": "Re-run a finished job as a new job (needs --allow-actions and "
                "the token)",
                "operationId": "retryJob",
                "parameters": [_JOB_ID],
                "requestBody": {
                    "required": False,
                    "description": "The new job's payload; without it, the old one's.",
                    "content": {"application/json": {"schema": _obj({"payload": _ANY}, [])}},
                },
                "responses": {
                    "201": _json("The new job (its `retry_of` is the old one's id).", _ref("Job")),
                    "400": _error(
                        "INVALID_BODY, or the payload's own code (JOB_PAYLOAD_INVALID, "
                        "JOB_PAYLOAD_TOO_LARGE)."
                    ),
                    **_ACTION_REFUSALS,
                    "404": _error("JOB_NOT_FOUND"),
                    "409": _error(
                        "JOB_NOT_RETRYABLE: the job is not completed, failed or cancelled."
                    ),
                },
            }
        }
        queue_param = {
            "name": "queue",
            "in": "path",
            "required": True,
            "schema": _STR,
            "description": "The queue's name (it may contain '/').",
        }
        for action, summary in (
            ("pause", "Stop claims on a queue in every worker"),
            ("resume", "Let workers claim from a paused queue again"),
        ):
            paths[f"/api/queues/{{queue}}/{action}"] = {
                "post": {
                    "summary": f"{summary} (needs --allow-actions and the token)",
                    "operationId": f"{action}Queue",
                    "parameters": [queue_param],
                    "responses": {
                        "200": _json("What is set for the queue now.", _ref("QueueLimits")),
                        "400": _error("JOB_INVALID_OPTION: not a queue name."),
                        **_ACTION_REFUSALS,
                    },
                }
            }
        paths["/api/queues/{queue}/limits"] = {
            "post": {
                "summary": "Set a queue's cap and rate limit for every worker (needs "
                "--allow-actions and the token); a field left out or null is cleared",
                "operationId": "setQueueLimits",
                "parameters": [queue_param],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _obj(
                                {
                                    "concurrency": _nullable(_INT),
                                    "rate_limit": _nullable(_STR),
                                },
                                [],
                            )
                        }
                    },
                },
                "responses": {
                    "200": _json("What is set for the queue now.", _ref("QueueLimits")),
                    "400": _error("INVALID_BODY, or JOB_INVALID_OPTION (a limit out of range)."),
                    **_ACTION_REFUSALS,
                },
            }
        }
        paths["/api/schedules/{schedule_id}/run"] = {
            "post": {
                "summary": "Run a schedule now (needs --allow-actions and the token)",
                "operationId": "runSchedule",
                "parameters": [{**_JOB_ID, "name": "schedule_id"}],
                "responses": {
                    "200": _json(
                        "Whether a job row was written.", _obj({"id": _STR, "enqueued": _BOOL})
                    ),
                    "400": _error(
                        "The schedule cannot run here (e.g. JOB_UNKNOWN_TYPE: serve without "
                        "--app has no handler for its type)."
                    ),
                    **_ACTION_REFUSALS,
                    "404": _error("JOB_SCHEDULE_NOT_FOUND"),
                },
            }
        }
        paths["/api/schedules/{schedule_id}/backfill"] = {
            "post": {
                "summary": "Enqueue every fire of a schedule in [from, to) not written yet "
                "(needs --allow-actions and the token)",
                "operationId": "backfillSchedule",
                "parameters": [{**_JOB_ID, "name": "schedule_id"}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _obj({"from": _STR, "to": _STR}),
                        }
                    },
                },
                "responses": {
                    "200": _json(
                        "How many jobs were written.", _obj({"id": _STR, "written": _INT})
                    ),
                    "400": _error(
                        "INVALID_BODY, or JOB_INVALID_OPTION (a bad or future range, more "
                        "than 1000 fires, a one-shot schedule)."
                    ),
                    **_ACTION_REFUSALS,
                    "404": _error("JOB_SCHEDULE_NOT_FOUND"),
                },
            }
        }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "jobledger",
            "version": "1",
            "description": "Read-only API over a jobledger database.",
        },
        "paths": paths,
        "components": {"schemas": _SCHEMAS},
    }
