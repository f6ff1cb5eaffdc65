"""The dashboard's page routes (HTML; `dashboard/` renders them, `http.py` mounts them).

    GET /                     overview: queues (counts, cap, rate limit, paused) and the
                              throughput chart; `/?status=...` (the old job list's
                              links) is redirected to `/jobs?status=...`
    GET /jobs                 the job list: `q` search, filters, paging (the parameters
                              of `GET /api/jobs`), `confirm=retry|cancel` for a bulk
                              action's confirmation
    GET /jobs/{id}            one job; 404 page for an unknown id
    GET /schedules            schedules, with their edit forms for an operator
    GET /workflows, /workflows/{id}
    GET /workers              workers and the leader lease
    GET /audit                the audit log, newest first (`actor`, `action`, paging)

Invariants: pages only read (through the `ReadModel`, in the thread pool); the buttons
they carry post to the API routes, which check the principal again. `can_act(request)`
decides whether buttons are rendered at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from jobledger._observe import dashboard
from jobledger._observe.auth import ANONYMOUS, Principal
from jobledger._observe.read_model import JobQuery, ReadModel
from jobledger.clock import from_ms

__all__ = ["THROUGHPUT_MINUTES", "page_routes"]

THROUGHPUT_MINUTES = 60
_JOB_PARAMS = frozenset(
    {"status", "queue", "type", "q", "schedule_id", "parent_id", "workflow_id", "limit", "offset"}
)


def page_routes(
    rm: ReadModel,
    *,
    can_act: Callable[[Request], bool],
    principal_of: Callable[[Request], Principal],
    parse_job_query: Callable[[Any], tuple[JobQuery, int, int]],
    parse_workflow_query: Callable[[Any], tuple[str | None, int, int]],
    parse_audit_query: Callable[[Any], tuple[int, int, str | None, str | None]],
    invalid: type[Exception],
    default_limit: int,
) -> list[Route]:
    async def read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(fn, *args, **kwargs)

    def shown(request: Request) -> Principal | None:
        """Whom the header names: nobody on a server without tokens."""
        who = principal_of(request)
        return None if who == ANONYMOUS else who

    async def overview(request: Request) -> Response:
        if _JOB_PARAMS & set(request.query_params):
            # The job list lived on `/` before: its links (and bookmarks) still work.
            return RedirectResponse(f"/jobs?{request.url.query}", status_code=303)
        found = await read(rm.throughput, THROUGHPUT_MINUTES)
        series = [(from_ms(at), done, failed) for at, done, failed in found.items]
        html = await read(
            dashboard.render_overview,
            rm,
            throughput=series,
            actions=can_act(request),
            principal=shown(request),
        )
        return HTMLResponse(html)

    async def jobs_page(request: Request) -> Response:
        try:
            query, limit, offset = parse_job_query(request.query_params)
            problem = None
        except invalid as exc:
            query, limit, offset, problem = JobQuery(), default_limit, 0, str(exc)
        confirm = request.query_params.get("confirm")
        html = await read(
            dashboard.render_jobs,
            rm,
            query,
            limit=limit,
            offset=offset,
            problem=problem,
            actions=can_act(request),
            confirm=confirm if confirm in ("retry", "cancel") else None,
            principal=shown(request),
        )
        return HTMLResponse(html, status_code=400 if problem else 200)

    async def job_page(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        snap = await read(rm.get_job, job_id)
        if snap is None:
            return HTMLResponse(dashboard.render_not_found(job_id), status_code=404)
        attempts = await read(rm.attempts, job_id)
        explained = None if snap.is_terminal else await read(rm.explain, job_id)
        children = await read(rm.count_jobs, JobQuery(parent_id=job_id))
        return HTMLResponse(
            dashboard.render_job(
                snap,
                attempts,
                actions=can_act(request),
                explained=explained,
                children=children,
                principal=shown(request),
            )
        )

    async def schedules_page(request: Request) -> Response:
        html = await read(
            dashboard.render_schedules,
            rm,
            actions=can_act(request),
            principal=shown(request),
        )
        return HTMLResponse(html)

    async def workers_page(request: Request) -> Response:
        html = await read(dashboard.render_workers, rm, principal=shown(request))
        return HTMLResponse(html)

    async def audit_page(request: Request) -> Response:
        try:
            limit, offset, actor, action = parse_audit_query(request.query_params)
            problem = None
        except invalid as exc:
            limit, offset, actor, action, problem = default_limit, 0, None, None, str(exc)
        entries = await read(rm.audit, limit=limit, offset=offset, actor=actor, action=action)
        html = dashboard.render_audit(
            [e.to_json() for e in entries],
            limit=limit,
            offset=offset,
            actor=actor,
            action=action,
            problem=problem,
            principal=shown(request),
            actions=can_act(request),
        )
        return HTMLResponse(html, status_code=400 if problem else 200)

    async def workflows_page(request: Request) -> Response:
        try:
            name, limit, offset = parse_workflow_query(request.query_params)
            problem = None
        except invalid as exc:
            name, limit, offset, problem = None, default_limit, 0, str(exc)
        page = await read(rm.workflow_page, limit=limit, offset=offset, name=name)
        html = dashboard.render_workflows(
            page, name=name, problem=problem, principal=shown(request)
        )
        return HTMLResponse(html, status_code=400 if problem else 200)

    async def workflow_page(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        view = await read(rm.workflow, workflow_id)
        if view is None:
            return HTMLResponse(dashboard.render_no_workflow(workflow_id), status_code=404)
        return HTMLResponse(dashboard.render_workflow(view, principal=shown(request)))

    return [
        Route("/", overview),
        Route("/jobs", jobs_page),
        Route("/jobs/{job_id:str}", job_page),
        Route("/schedules", schedules_page),
        Route("/workers", workers_page),
        Route("/audit", audit_page),
        Route("/workflows", workflows_page),
        Route("/workflows/{workflow_id:str}", workflow_page),
    ]
