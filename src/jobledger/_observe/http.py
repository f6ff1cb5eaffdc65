"""The read-only HTTP API and the dashboard (Starlette; the `web` extra).

Routes (`openapi.py` holds their table and builds `/openapi.json` from the models of
`api_models.py`):

    GET /api/jobs                 filters status (comma list), queue, type, schedule_id,
                                  parent_id, workflow_id; limit 1-500 (50); offset >= 0
    GET /api/jobs/{id}            404 JOB_NOT_FOUND
    GET /api/jobs/{id}/explain    why it is not running now (`jobs.explain`'s reasons)
    GET /api/jobs/{id}/events     server-sent events: `snapshot` and `progress`, ends after
                                  the terminal snapshot
    GET /api/workflows            filter name; limit 1-500 (50); offset >= 0
    GET /api/workflows/{id}       its jobs, edges and steps; 404 JOB_WORKFLOW_NOT_FOUND
    GET /api/queues, /api/schedules, /api/workers, /api/health, /metrics, /openapi.json
    GET /, /jobs/{id}, /workflows, /workflows/{id}
                                  the dashboard (HTML + /static/app.js)
    POST /api/jobs/{id}/cancel, /api/jobs/{id}/retry, /api/schedules/{id}/run,
         /api/schedules/{id}/backfill, /api/queues/{queue}/pause|resume|limits
                                  the actions (with `allow_actions` and the token)

Invariants:

* Read-only: every route reads through one `ReadModel` (a store opened read-only, on a
  SQLite file or a PostgreSQL URL alike). The only
  writes are the optional actions (`allow_actions=True`, which needs a token): cancel a
  job, retry a finished one and run a schedule now, done through a never-started
  `JobManager`.
* Errors are one JSON envelope, `{"error": {"code", "message"}}`: 400 INVALID_QUERY /
  INVALID_BODY, 401 UNAUTHORIZED, 403 FORBIDDEN_ORIGIN, 404 JOB_NOT_FOUND /
  JOB_WORKFLOW_NOT_FOUND / NOT_FOUND, 405
  METHOD_NOT_ALLOWED, 409 JOB_NOT_RETRYABLE, 503 for a database that cannot be read, 500
  INTERNAL (never a traceback).
* Without a token the app is meant for loopback: `allowed_hosts` (set by the CLI) refuses
  other Host headers, which defeats DNS rebinding. With a token every route except
  `/api/health` needs it (`Authorization: Bearer`, the `jobledger_token` cookie, or
  `?token=` once, which sets the cookie). A token in the query string is read on GET and
  HEAD only: on a state-changing request it would sit in logs and browser history next
  to the action it authorised, so there it counts as no token.
* Every state-changing request (anything but GET, HEAD, OPTIONS) passes the origin rule
  before it reaches a route: its `Origin` (else the origin of its `Referer`) must be the
  server's own (`scheme://Host` of the request) or one of `allowed_origins`, else 403
  FORBIDDEN_ORIGIN. A request with neither header is let through only when it
  authenticates with the `Authorization` header, which no other site can make a browser
  send; one that rides on the cookie must say where it comes from (every browser sends
  `Origin` on a POST). The SameSite=Strict cookie already keeps other sites out; this is
  the second lock, and it also holds against a sibling subdomain, which SameSite counts
  as the same site.
* Server-sent events (sse-starlette) come from polling the row (`poll_interval`), so
  progress written by any process shows up; a stream sends a `: ping` comment every
  `PING_SECONDS` so a gone client is noticed.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobledger._core.search import Search, parse_search
from jobledger._observe import dashboard, metrics
from jobledger._observe.openapi import openapi_schema
from jobledger._observe.read_model import JobQuery, ReadModel, iso, parse_statuses
from jobledger._runtime.manager import JobManager
from jobledger._types import JobSnapshot, QueueLimits
from jobledger.errors import JobError, JobNotFound, JobValidationError, StorageError

__all__ = [
    "DEFAULT_LIMIT",
    "LOOPBACK_HOSTS",
    "MAX_LIMIT",
    "create_app",
    "parse_job_query",
    "parse_workflow_query",
]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
PING_SECONDS = 5.0
_INT_RE = re.compile(r"-?[0-9]{1,18}")
_STATIC = Path(__file__).parent / "dashboard" / "static"
_TOKEN_COOKIE = "jobledger_token"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


class InvalidQuery(ValueError):
    pass


def _int_param(params: QueryParams, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if not _INT_RE.fullmatch(raw):
        raise InvalidQuery(f"{name} must be an integer, not {raw[:40]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidQuery(f"{name} must be between {low} and {high}, not {value}")
    return value


def parse_job_query(params: QueryParams) -> tuple[JobQuery, int, int]:
    """The filters, limit and offset of `GET /api/jobs` (and the dashboard's list)."""
    try:
        statuses = parse_statuses(params.getlist("status"))
    except ValueError as exc:
        raise InvalidQuery(str(exc)) from None

    def text(name: str) -> str | None:
        value = params.get(name)
        return value if value else None

    query = JobQuery(
        status=statuses,
        queue=text("queue"),
        type=text("type"),
        schedule_id=text("schedule_id"),
        parent_id=text("parent_id"),
        workflow_id=text("workflow_id"),
        search=_search_param(text("q")),
    )
    limit = _int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(params, "offset", 0, 0, 10**18 - 1)
    return query, limit, offset


def _search_param(q: str | None) -> Search | None:
    """`q=`, the console's search (`_core/search.py`); a bad one is `INVALID_QUERY`."""
    if q is None:
        return None
    try:
        return parse_search(q)
    except JobValidationError as exc:
        raise InvalidQuery(exc.message) from None


def parse_workflow_query(params: QueryParams) -> tuple[str | None, int, int]:
    """The name filter, limit and offset of `GET /api/workflows` (and its page)."""
    name = params.get("name") or None
    limit = _int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(params, "offset", 0, 0, 10**18 - 1)
    return name, limit, offset


def _no_workflow(workflow_id: str) -> JSONResponse:
    return _error(404, "JOB_WORKFLOW_NOT_FOUND", f"no workflow with id {workflow_id!r}")


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _sse(event: str, data: Any, event_id: int) -> ServerSentEvent:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(body, event=event, id=str(event_id), sep="\n")


def _progress_json(snap: JobSnapshot) -> dict[str, Any]:
    return {
        "id": snap.id,
        "status": str(snap.status),
        "progress": snap.progress,
        "progress_detail": snap.progress_detail,
        "updated_at": iso(snap.updated_at),
    }


def _state_key(snap: JobSnapshot) -> str:
    """Everything but progress: a change here is a `snapshot` event."""
    data = snap.to_json()
    for k in ("progress", "progress_detail", "updated_at"):
        data.pop(k, None)
    return json.dumps(data, sort_keys=True, default=str)


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of an absolute http(s) URL, normalised (lower case, no
    default port), or None for anything else (including the opaque origin `null`)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return (
        f"{scheme}://{host}"
        if port in (None, _DEFAULT_PORTS[scheme])
        else f"{scheme}://{host}:{port}"
    )


class _Guard:
    """Pure ASGI middleware: origin rule, token check and security headers (streams pass
    untouched)."""

    def __init__(
        self, app: ASGIApp, token: str | None, allowed_origins: Sequence[str] = ()
    ) -> None:
        self.app = app
        self.token = token
        self.allowed_origins = frozenset(
            o for o in (origin_of(url) for url in allowed_origins) if o is not None
        )

    def _authorised(self, request: Request) -> str | None:
        """How the request carries the token: "header", "cookie", "query", or None."""
        assert self.token is not None
        expected = self.token.encode()
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and hmac.compare_digest(
            auth[7:].strip().encode(), expected
        ):
            return "header"
        cookie = request.cookies.get(_TOKEN_COOKIE)
        if cookie is not None and hmac.compare_digest(cookie.encode(), expected):
            return "cookie"
        query = request.query_params.get("token")
        if (
            request.method in _SAFE_METHODS
            and query is not None
            and hmac.compare_digest(query.encode(), expected)
        ):
            return "query"
        return None

    def _origin_refused(self, request: Request, via: str | None) -> str | None:
        """Why a state-changing request is refused by the origin rule, or None."""
        claimed = request.headers.get("origin")
        source = "Origin"
        if claimed is None:
            claimed = request.headers.get("referer")
            source = "Referer"
        if claimed is None:
            if via == "cookie":
                return "a request authorised by the cookie must send Origin or Referer"
            return None
        origin = origin_of(claimed)
        host = request.headers.get("host")
        own = origin_of(f"{request.scope.get('scheme', 'http')}://{host}") if host else None
        if origin is not None and (origin == own or origin in self.allowed_origins):
            return None
        return (
            f"{source} {claimed[:100]!r} is not this server's origin"
            f"{f' ({own})' if own else ''}; see --origin"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        set_cookie = False
        request = Request(scope)
        via = self._authorised(request) if self.token is not None else None
        if request.method not in _SAFE_METHODS:
            refused = self._origin_refused(request, via)
            if refused is not None:
                await self._send_with_headers(
                    _error(403, "FORBIDDEN_ORIGIN", refused), scope, receive, send
                )
                return
        if self.token is not None and path != "/api/health":
            ok, from_query = via is not None, via == "query"
            if not ok:
                response: Response
                if request.method not in _SAFE_METHODS and "token" in request.query_params:
                    response = _error(
                        401,
                        "UNAUTHORIZED",
                        f"{request.method} does not read the token from the query string; "
                        "send it as Authorization: Bearer (or the cookie ?token= sets)",
                    )
                elif path.startswith(("/api/", "/metrics", "/openapi.json", "/static/")):
                    response = _error(401, "UNAUTHORIZED", "a valid token is required")
                else:
                    response = HTMLResponse(
                        "<!doctype html><title>jobledger</title><p>A token is required: open "
                        "this page with <code>?token=...</code>.</p>",
                        status_code=401,
                    )
                await self._send_with_headers(response, scope, receive, send)
                return
            set_cookie = from_query

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for name, value in _security_headers(path):
                    if name.encode() not in names:
                        headers.append((name.encode(), value.encode()))
                if set_cookie and self.token is not None:
                    headers.append(
                        (
                            b"set-cookie",
                            f"{_TOKEN_COOKIE}={self.token}; Path=/; HttpOnly; "
                            "SameSite=Strict".encode(),
                        )
                    )
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapped)

    @staticmethod
    async def _send_with_headers(
        response: Response, scope: Scope, receive: Receive, send: Send
    ) -> None:
        for name, value in _security_headers(scope.get("path", "")):
            response.headers.setdefault(name, value)
        await response(scope, receive, send)


def _security_headers(path: str) -> list[tuple[str, str]]:
    headers = [
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
    ]
    if not path.startswith(("/api/", "/metrics", "/openapi.json", "/static/")):
        headers.append(("content-security-policy", CSP))
    return headers


def create_app(
    db_path: str,
    *,
    token: str | None = None,
    allow_actions: bool = False,
    poll_interval: float = 0.25,
    allowed_hosts: Sequence[str] | None = None,
    read_model: ReadModel | None = None,
    action_manager: JobManager | None = None,
    allowed_origins: Sequence[str] = (),
) -> Starlette:
    """The ASGI app over the database at `db_path` (opened read-only at once).

    `allow_actions` adds POST routes (cancel a job, run a schedule now) and needs `token`.
    They use `action_manager` (never started; the caller closes it), else a bare
    `JobManager(db_path)` made on first use and kept in `app.state.action_manager`.
    `allowed_origins` are origins (`https://jobs.example.com`) besides the server's own
    that state-changing requests may come from: a reverse proxy's public address.
    """
    if allow_actions and not token:
        raise ValueError("allow_actions needs a token")
    rm = read_model if read_model is not None else ReadModel(db_path)

    async def read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(fn, *args, **kwargs)

    async def api_jobs(request: Request) -> Response:
        try:
            query, limit, offset = parse_job_query(request.query_params)
        except InvalidQuery as exc:
            return _error(400, "INVALID_QUERY", str(exc))
        page = await read(rm.page, query, limit=limit, offset=offset)
        return JSONResponse(page.to_json())

    async def api_job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        snap = await read(rm.get_job, job_id)
        if snap is None:
            return _error(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
        return JSONResponse(snap.to_json())

    async def api_job_attempts(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        snap = await read(rm.get_job, job_id)
        if snap is None:
            return _error(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
        attempts = await read(rm.attempts, job_id)
        return JSONResponse({"items": [a.to_json() for a in attempts]})

    async def api_job_explain(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        explained = await read(rm.explain, job_id)
        if explained is None:
            return _error(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
        return JSONResponse(explained.to_json())

    async def api_job_events(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        first = await read(rm.get_job, job_id)
        if first is None:
            return _error(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")

        async def stream() -> AsyncIterator[ServerSentEvent]:
            seq = 0
            snap: JobSnapshot | None = first
            last_state: str | None = None
            last_progress: tuple[Any, Any] | None = None
            yield ServerSentEvent(retry=2000, sep="\n")
            while True:
                if snap is None:
                    seq += 1
                    yield _sse("gone", {"id": job_id}, seq)
                    return
                state = _state_key(snap)
                progress = (snap.progress, snap.progress_detail)
                if progress != last_progress and last_state is not None:
                    seq += 1
                    last_progress = progress
                    yield _sse("progress", _progress_json(snap), seq)
                if state != last_state:
                    seq += 1
                    last_state = state
                    last_progress = progress
                    yield _sse("snapshot", snap.to_json(), seq)
                if snap.is_terminal:
                    return
                # sse-starlette cancels this generator when the client disconnects.
                await asyncio.sleep(poll_interval)
                snap = await read(rm.get_job, job_id)

        # The ping (a comment every PING_SECONDS) is what notices a client that went
        # away without a FIN: writing to its socket fails and the stream is cancelled.
        return EventSourceResponse(
            stream(),
            ping=PING_SECONDS,
            sep="\n",
            ping_message_factory=lambda: ServerSentEvent(comment="ping", sep="\n"),
        )

    async def api_workflows(request: Request) -> Response:
        try:
            name, limit, offset = parse_workflow_query(request.query_params)
        except InvalidQuery as exc:
            return _error(400, "INVALID_QUERY", str(exc))
        page = await read(rm.workflow_page, limit=limit, offset=offset, name=name)
        return JSONResponse(page.to_json())

    async def api_workflow(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        view = await read(rm.workflow, workflow_id)
        if view is None:
            return _no_workflow(workflow_id)
        return JSONResponse(view.to_json())

    async def api_queues(request: Request) -> Response:
        stats = await read(rm.queue_stats)
        return JSONResponse({"items": [s.to_json() for s in stats]})

    async def api_schedules(request: Request) -> Response:
        return JSONResponse({"items": await read(rm.schedules)})

    async def api_workers(request: Request) -> Response:
        workers = await read(rm.workers)
        leader = await read(rm.leader, workers)
        return JSONResponse(
            {
                "items": [w.to_json() for w in workers],
                "leader": None if leader is None else leader.to_json(),
            }
        )

    async def api_health(request: Request) -> Response:
        try:
            version = await read(rm.schema_version)
        except JobError as exc:
            return JSONResponse(
                {"status": "error", "error": {"code": exc.code, "message": exc.message}},
                status_code=503,
            )
        return JSONResponse({"status": "ok", "schema_version": version})

    async def metrics_route(request: Request) -> Response:
        data = await read(rm.metrics)
        return PlainTextResponse(metrics.render(data), media_type=metrics.CONTENT_TYPE)

    async def openapi_route(request: Request) -> Response:
        return JSONResponse(openapi_schema(actions=allow_actions, token=token is not None))

    async def index(request: Request) -> Response:
        try:
            query, limit, offset = parse_job_query(request.query_params)
            problem = None
        except InvalidQuery as exc:
            query, limit, offset, problem = JobQuery(), DEFAULT_LIMIT, 0, str(exc)
        html = await read(
            dashboard.render_index,
            rm,
            query,
            limit=limit,
            offset=offset,
            problem=problem,
            actions=allow_actions,
        )
        return HTMLResponse(html, status_code=400 if problem else 200)

    async def job_page(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        snap = await read(rm.get_job, job_id)
        if snap is None:
            return HTMLResponse(dashboard.render_not_found(job_id), status_code=404)
        attempts = await read(rm.attempts, job_id)
        explained = None if snap.is_terminal else await read(rm.explain, job_id)
        return HTMLResponse(
            dashboard.render_job(snap, attempts, actions=allow_actions, explained=explained)
        )

    async def workflows_page(request: Request) -> Response:
        try:
            name, limit, offset = parse_workflow_query(request.query_params)
            problem = None
        except InvalidQuery as exc:
            name, limit, offset, problem = None, DEFAULT_LIMIT, 0, str(exc)
        page = await read(rm.workflow_page, limit=limit, offset=offset, name=name)
        html = dashboard.render_workflows(page, name=name, problem=problem)
        return HTMLResponse(html, status_code=400 if problem else 200)

    async def workflow_page(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        view = await read(rm.workflow, workflow_id)
        if view is None:
            return HTMLResponse(dashboard.render_no_workflow(workflow_id), status_code=404)
        return HTMLResponse(dashboard.render_workflow(view))

    routes: list[Route | Mount] = [
        Route("/", index),
        Route("/jobs/{job_id:str}", job_page),
        Route("/workflows", workflows_page),
        Route("/workflows/{workflow_id:str}", workflow_page),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{job_id:str}", api_job),
        Route("/api/jobs/{job_id:str}/attempts", api_job_attempts),
        Route("/api/jobs/{job_id:str}/explain", api_job_explain),
        Route("/api/jobs/{job_id:str}/events", api_job_events),
        Route("/api/workflows", api_workflows),
        Route("/api/workflows/{workflow_id:str}", api_workflow),
        Route("/api/queues", api_queues),
        Route("/api/schedules", api_schedules),
        Route("/api/workers", api_workers),
        Route("/api/health", api_health),
        Route("/metrics", metrics_route),
        Route("/openapi.json", openapi_route),
        Mount("/static", app=StaticFiles(directory=_STATIC), name="static"),
    ]
    holder: dict[str, JobManager] = {}
    if action_manager is not None:
        holder["m"] = action_manager

    def manager() -> JobManager:
        if "m" not in holder:
            holder["m"] = JobManager(db_path)
        return holder["m"]

    if allow_actions:
        routes.extend(_action_routes(manager, rm))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return _error(404, "NOT_FOUND", f"no route for {request.url.path}")
        if exc.status_code == 405:
            return _error(405, "METHOD_NOT_ALLOWED", f"{request.method} is not allowed here")
        return _error(exc.status_code, "HTTP_ERROR", str(exc.detail))

    async def storage_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, JobError)
        status = 503 if isinstance(exc, StorageError) else 400
        return _error(status, exc.code, exc.message)

    async def internal_error(request: Request, exc: Exception) -> Response:
        return _error(500, "INTERNAL", "internal error; see the server log")

    middleware = [Middleware(_Guard, token=token, allowed_origins=list(allowed_origins))]
    if allowed_hosts is not None:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            HTTPException: http_error,
            JobError: storage_error,
            Exception: internal_error,
        },
    )
    # "/api/jobs/" is not "/api/jobs": answer 404 instead of a redirect nobody documents.
    app.router.redirect_slashes = False
    app.state.read_model = rm
    app.state.action_managers = holder
    return app


def _action_routes(manager: Callable[[], JobManager], rm: ReadModel) -> list[Route]:
    """POST routes, only with `allow_actions` (and so a token). They go through a
    never-started `JobManager`: it writes the request; the worker running a job acts on
    it. Running a schedule needs the handler of its type registered in that manager; a
    retry's payload is validated against it when it has one (else only as JSON)."""

    async def cancel(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        if await run_in_threadpool(rm.get_job, job_id) is None:
            return _error(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
        reason = request.query_params.get("reason") or "cancelled from the dashboard"
        outcome = await manager().cancel(job_id, reason=reason[:500])
        return JSONResponse({"id": job_id, "outcome": outcome})

    async def retry(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        raw = await request.body()
        options: dict[str, Any] = {}
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                return _error(400, "INVALID_BODY", f"the body is not JSON: {exc}")
            if not isinstance(body, dict) or set(body) - {"payload"}:
                return _error(
                    400, "INVALID_BODY", 'the body is a JSON object: {} or {"payload": ...}'
                )
            if "payload" in body:
                options["payload"] = body["payload"]
        try:
            handle = await run_in_threadpool(lambda: manager().retry(job_id, **options))
        except JobNotFound as exc:
            return _error(404, exc.code, exc.message)
        except JobValidationError as exc:
            return _error(400, exc.code, exc.message)
        except JobError as exc:
            if exc.code != "JOB_NOT_RETRYABLE":
                raise
            return _error(409, exc.code, exc.message)
        return JSONResponse(
            handle.snapshot.to_json(),
            status_code=201,
            headers={"location": f"/api/jobs/{quote(handle.id, safe='')}"},
        )

    async def run_schedule(request: Request) -> Response:
        schedule_id = request.path_params["schedule_id"]
        if await run_in_threadpool(rm.schedule, schedule_id) is None:
            return _error(404, "JOB_SCHEDULE_NOT_FOUND", f"no schedule with id {schedule_id!r}")
        written = await manager().trigger_job_schedule_now_by_id(schedule_id)
        return JSONResponse({"id": schedule_id, "enqueued": bool(written)})

    async def backfill_schedule(request: Request) -> Response:
        schedule_id = request.path_params["schedule_id"]
        try:
            body = json.loads(await request.body() or b"null")
        except (ValueError, RecursionError) as exc:
            return _error(400, "INVALID_BODY", f"the body is not JSON: {exc}")
        if not isinstance(body, dict) or set(body) != {"from", "to"}:
            return _error(
                400, "INVALID_BODY", 'the body is a JSON object: {"from": ISO-8601, "to": ISO-8601}'
            )
        bounds: list[datetime] = []
        for field in ("from", "to"):
            try:
                at = datetime.fromisoformat(str(body[field]))
            except ValueError:
                return _error(400, "JOB_INVALID_OPTION", f"{field!r} is not an ISO 8601 time")
            bounds.append(at.replace(tzinfo=UTC) if at.tzinfo is None else at)
        try:
            written = await run_in_threadpool(
                lambda: manager().backfill_job_schedule(schedule_id, bounds[0], bounds[1])
            )
        except JobError as exc:
            if exc.code == "JOB_SCHEDULE_NOT_FOUND":
                return _error(404, exc.code, exc.message)
            if isinstance(exc, JobValidationError):
                return _error(400, exc.code, exc.message)
            raise
        return JSONResponse({"id": schedule_id, "written": written})

    async def queue_action(request: Request) -> Response:
        # `{rest:path}`: a queue's name may contain "/", so the action is the last part.
        queue, _, action = request.path_params["rest"].rpartition("/")
        if action not in ("pause", "resume", "limits") or not queue:
            return _error(404, "NOT_FOUND", "POST /api/queues/{queue}/pause|resume|limits")
        options: dict[str, Any] = {}
        if action == "limits":
            try:
                body = json.loads(await request.body() or b"null")
            except (ValueError, RecursionError) as exc:
                return _error(400, "INVALID_BODY", f"the body is not JSON: {exc}")
            if not isinstance(body, dict) or set(body) - {"concurrency", "rate_limit"}:
                return _error(
                    400,
                    "INVALID_BODY",
                    'the body is a JSON object: {"concurrency": 5, "rate_limit": "10/s"}',
                )
            options = body
        m = manager()
        act: Callable[[], QueueLimits] = {
            "pause": lambda: m.pause_queue(queue),
            "resume": lambda: m.resume_queue(queue),
            "limits": lambda: m.set_queue_limits(queue, **options),
        }[action]
        try:
            limits = await run_in_threadpool(act)
        except JobValidationError as exc:
            return _error(400, exc.code, exc.message)
        return JSONResponse(limits.to_json())

    return [
        Route("/api/jobs/{job_id:str}/cancel", cancel, methods=["POST"]),
        Route("/api/jobs/{job_id:str}/retry", retry, methods=["POST"]),
        Route("/api/schedules/{schedule_id:str}/run", run_schedule, methods=["POST"]),
        Route("/api/schedules/{schedule_id:str}/backfill", backfill_schedule, methods=["POST"]),
        Route("/api/queues/{rest:path}", queue_action, methods=["POST"]),
    ]
