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
    GET /api/throughput           completed/failed jobs per minute, oldest first, zeros
                                  included; minutes 1-1440 (60)
    GET /api/queues, /api/schedules, /api/workers, /api/health, /metrics, /openapi.json
    GET /, /jobs, /jobs/{id}, /schedules, /workflows, /workflows/{id}, /workers, /audit
                                  the dashboard (HTML + /static/app.js; `pages.py`)
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

from jobledger._core.audit import audit_target
from jobledger._core.search import Search, parse_search
from jobledger._observe import metrics, pages
from jobledger._observe.auth import (
    ANONYMOUS,
    SCOPE_KEY,
    ApiToken,
    can_act,
    check_tokens,
    match_secret,
    parse_token,
    principal_of,
)
from jobledger._observe.openapi import openapi_schema
from jobledger._observe.read_model import (
    MAX_THROUGHPUT_MINUTES,
    JobQuery,
    ReadModel,
    iso,
    parse_statuses,
)
from jobledger._runtime.manager import JobManager
from jobledger._scheduling.triggers import Cron, Interval
from jobledger._types import JobSnapshot, QueueLimits
from jobledger.errors import JobError, JobNotFound, JobValidationError, StorageError

__all__ = [
    "DEFAULT_LIMIT",
    "LOOPBACK_HOSTS",
    "MAX_LIMIT",
    "ApiToken",
    "check_tokens",
    "create_app",
    "parse_audit_query",
    "parse_job_query",
    "parse_token",
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


def _name_param(params: QueryParams, name: str) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > 500 or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in raw):
        raise InvalidQuery(f"{name} is at most 500 characters without control characters")
    return raw


def _no_nul(name: str, value: str | None) -> str | None:
    # PostgreSQL cannot bind a NUL in text (a 503 otherwise); no stored name holds one.
    if value is not None and "\x00" in value:
        raise InvalidQuery(f"{name} holds a NUL character")
    return value


def parse_job_query(params: QueryParams) -> tuple[JobQuery, int, int]:
    """The filters, limit and offset of `GET /api/jobs` (and the dashboard's list)."""
    try:
        statuses = parse_statuses(params.getlist("status"))
    except ValueError as exc:
        raise InvalidQuery(str(exc)) from None

    def text(name: str) -> str | None:
        value = params.get(name)
        return _no_nul(name, value) if value else None

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
    name = _no_nul("name", params.get("name")) or None
    limit = _int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(params, "offset", 0, 0, 10**18 - 1)
    return name, limit, offset


def parse_audit_query(params: QueryParams) -> tuple[int, int, str | None, str | None]:
    """The limit, offset, actor and action of `GET /api/audit` (and the audit page)."""
    limit = _int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(params, "offset", 0, 0, 2**62)
    actor, action = (_name_param(params, n) for n in ("actor", "action"))
    return limit, offset, actor, action


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
    """Pure ASGI middleware: origin rule, who is asking (`auth.py`), the role rule and
    security headers (streams pass untouched)."""

    def __init__(
        self, app: ASGIApp, tokens: Sequence[ApiToken] = (), allowed_origins: Sequence[str] = ()
    ) -> None:
        self.app = app
        self.tokens = tuple(tokens)
        self.allowed_origins = frozenset(
            o for o in (origin_of(url) for url in allowed_origins) if o is not None
        )

    def _authorised(self, request: Request) -> tuple[ApiToken, str] | None:
        """The token the request carries and how: "header", "cookie" or "query"."""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            found = match_secret(self.tokens, auth[7:].strip())
            if found is not None:
                return found, "header"
        cookie = request.cookies.get(_TOKEN_COOKIE)
        if cookie is not None:
            found = match_secret(self.tokens, cookie)
            if found is not None:
                return found, "cookie"
        query = request.query_params.get("token")
        if request.method in _SAFE_METHODS and query is not None:
            found = match_secret(self.tokens, query)
            if found is not None:
                return found, "query"
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
        request = Request(scope)
        found = self._authorised(request) if self.tokens else None
        token, via = found if found is not None else (None, None)
        safe = request.method in _SAFE_METHODS
        if not safe:
            refused = self._origin_refused(request, via)
            if refused is not None:
                await self._send_with_headers(
                    _error(403, "FORBIDDEN_ORIGIN", refused), scope, receive, send
                )
                return
        principal = ANONYMOUS
        if self.tokens and path != "/api/health":
            if token is None:
                await self._send_with_headers(
                    self._unauthorised(request, path), scope, receive, send
                )
                return
            principal = token.principal
            if not safe and principal.role != "operator":
                await self._send_with_headers(
                    _error(
                        403,
                        "FORBIDDEN_ROLE",
                        f"{principal.name!r} holds a viewer token; actions need an operator's",
                    ),
                    scope,
                    receive,
                    send,
                )
                return
        scope[SCOPE_KEY] = principal
        if "\x00" in path:
            # No id or name holds a NUL, and PostgreSQL cannot even bind one to compare.
            await self._send_with_headers(
                _error(404, "NOT_FOUND", "no route, id or name holds a NUL (%00)"),
                scope,
                receive,
                send,
            )
            return
        cookie = token.secret if token is not None and via == "query" else None

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for name, value in _security_headers(path):
                    if name.encode() not in names:
                        headers.append((name.encode(), value.encode()))
                if cookie is not None:
                    headers.append(
                        (
                            b"set-cookie",
                            f"{_TOKEN_COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict".encode(),
                        )
                    )
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapped)

    @staticmethod
    def _unauthorised(request: Request, path: str) -> Response:
        if request.method not in _SAFE_METHODS and "token" in request.query_params:
            return _error(
                401,
                "UNAUTHORIZED",
                f"{request.method} does not read the token from the query string; "
                "send it as Authorization: Bearer (or the cookie ?token= sets)",
            )
        if path.startswith(("/api/", "/metrics", "/openapi.json", "/static/")):
            return _error(401, "UNAUTHORIZED", "a valid token is required")
        return HTMLResponse(
            "<!doctype html><title>jobledger</title><p>A token is required: open "
            "this page with <code>?token=...</code>.</p>",
            status_code=401,
        )

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
    tokens: Sequence[ApiToken] = (),
    allow_actions: bool = False,
    poll_interval: float = 0.25,
    allowed_hosts: Sequence[str] | None = None,
    read_model: ReadModel | None = None,
    action_manager: JobManager | None = None,
    allowed_origins: Sequence[str] = (),
) -> Starlette:
    """The ASGI app over the database at `db_path` (opened read-only at once).

    `tokens` are operators' and viewers' (`auth.ApiToken`); `token` is one operator's
    secret, named "operator". With any token, every route but `/api/health` needs one.
    `allow_actions` adds POST routes (cancel, retry, queue and schedule actions), which
    only an operator may call, so it needs an operator token; each action is written to
    the audit log under the token's name. They use `action_manager` (never started; the
    caller closes it), else a bare `JobManager(db_path)` made on first use and kept in
    `app.state.action_managers`. `allowed_origins` are origins
    (`https://jobs.example.com`) besides the server's own that state-changing requests
    may come from: a reverse proxy's public address.
    """
    all_tokens = check_tokens(
        [*tokens, *([ApiToken("operator", token, "operator")] if token else [])]
    )
    if allow_actions and not any(t.role == "operator" for t in all_tokens):
        raise ValueError("allow_actions needs an operator token")
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

    async def api_throughput(request: Request) -> Response:
        try:
            minutes = _int_param(request.query_params, "minutes", 60, 1, MAX_THROUGHPUT_MINUTES)
        except InvalidQuery as exc:
            return _error(400, "INVALID_QUERY", str(exc))
        found = await read(rm.throughput, minutes)
        return JSONResponse(found.to_json())

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

    async def api_audit(request: Request) -> Response:
        params = request.query_params
        try:
            limit, offset, actor, action = parse_audit_query(params)
        except InvalidQuery as exc:
            return _error(400, "INVALID_QUERY", str(exc))
        entries = await read(rm.audit, limit=limit, offset=offset, actor=actor, action=action)
        return JSONResponse(
            {"items": [e.to_json() for e in entries], "limit": limit, "offset": offset}
        )

    async def api_whoami(request: Request) -> Response:
        who = principal_of(request)
        return JSONResponse({"name": who.name, "role": who.role, "can_act": can_act(request)})

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
        return JSONResponse(openapi_schema(actions=allow_actions, token=bool(all_tokens)))

    routes: list[Route | Mount] = [
        *pages.page_routes(
            rm,
            can_act=can_act,
            principal_of=principal_of,
            parse_job_query=parse_job_query,
            parse_workflow_query=parse_workflow_query,
            parse_audit_query=parse_audit_query,
            invalid=InvalidQuery,
            default_limit=DEFAULT_LIMIT,
        ),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{job_id:str}", api_job),
        Route("/api/jobs/{job_id:str}/attempts", api_job_attempts),
        Route("/api/jobs/{job_id:str}/explain", api_job_explain),
        Route("/api/jobs/{job_id:str}/events", api_job_events),
        Route("/api/workflows", api_workflows),
        Route("/api/workflows/{workflow_id:str}", api_workflow),
        Route("/api/queues", api_queues),
        Route("/api/throughput", api_throughput),
        Route("/api/schedules", api_schedules),
        Route("/api/workers", api_workers),
        Route("/api/audit", api_audit),
        Route("/api/whoami", api_whoami),
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

    middleware = [Middleware(_Guard, tokens=all_tokens, allowed_origins=list(allowed_origins))]
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
    app.state.allow_actions = allow_actions
    return app


def _json_object(raw: bytes, allowed: set[str], shape: str) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object with keys among `allowed` (empty body = {}), or the
    400 INVALID_BODY response that says `shape`."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # nested past the parser: still a 400
        return _error(400, "INVALID_BODY", f"the body is not JSON: {exc}")
    if not isinstance(body, dict) or set(body) - allowed:
        return _error(400, "INVALID_BODY", f"the body is a JSON object: {shape}")
    return body


def _text_fields(body: dict[str, Any], names: Sequence[str]) -> dict[str, str] | JSONResponse:
    out: dict[str, str] = {}
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value or "\x00" in value:
            return _error(400, "INVALID_BODY", f"{name!r} is a non-empty string without NUL")
        out[name] = value
    return out


def _filter_text(parts: dict[str, Any]) -> str:
    """A bulk action's filter as the audit log's target: `status=failed queue=emails`."""
    text = " ".join(
        f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in parts.items() if v
    )
    return (text or "all")[:500]


def _action_routes(manager: Callable[[], JobManager], rm: ReadModel) -> list[Route]:
    """POST routes, only with `allow_actions` (and so an operator token; the guard has
    refused viewers). They go through a never-started `JobManager`: it writes the
    request; the worker running a job acts on it. Running a schedule needs the handler
    of its type registered in that manager; a retry's payload is validated against it
    when it has one (else only as JSON). Each action that was carried out is written to
    the audit log under the caller's token name, after it took effect (so the log never
    names an action that did not happen)."""

    async def audit(request: Request, action: str, target: str, detail: dict[str, Any]) -> None:
        actor = principal_of(request).name
        await run_in_threadpool(
            lambda: manager().record_audit(actor, action, audit_target(target), detail)
        )

    async def cancel(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        if await run_in_threadpool(rm.get_job, job_id) is None:
            return _error(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
        reason = request.query_params.get("reason") or "cancelled from the dashboard"
        outcome = await manager().cancel(job_id, reason=reason[:500])
        await audit(request, "job.cancel", job_id, {"outcome": outcome, "reason": reason[:500]})
        return JSONResponse({"id": job_id, "outcome": outcome})

    async def retry(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        body = _json_object(await request.body(), {"payload"}, '{} or {"payload": ...}')
        if isinstance(body, JSONResponse):
            return body
        options: dict[str, Any] = {}
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
        await audit(
            request, "job.retry", job_id, {"new_job": handle.id, "payload": "payload" in body}
        )
        return JSONResponse(
            handle.snapshot.to_json(),
            status_code=201,
            headers={"location": f"/api/jobs/{quote(handle.id, safe='')}"},
        )

    async def retry_many(request: Request) -> Response:
        shape = (
            '{"status": "failed" or [...], "queue": ..., "type": ..., "q": ..., "limit": 1-1000}'
        )
        body = _json_object(await request.body(), {"status", "queue", "type", "q", "limit"}, shape)
        if isinstance(body, JSONResponse):
            return body
        texts = _text_fields(body, ("queue", "type", "q"))
        if isinstance(texts, JSONResponse):
            return texts
        status = body.get("status", "failed")
        if isinstance(status, str):
            status = [s for s in status.split(",") if s]
        if not isinstance(status, list) or not all(isinstance(s, str) for s in status):
            return _error(400, "INVALID_BODY", "'status' is a status or a list of them")
        limit = body.get("limit", 1000)
        try:
            handles = await run_in_threadpool(
                lambda: manager().retry_many(
                    status=status,
                    queue=texts.get("queue"),
                    type=texts.get("type"),
                    search=texts.get("q"),
                    limit=limit,
                )
            )
        except JobValidationError as exc:
            return _error(400, exc.code, exc.message)
        target = _filter_text({"status": status, **texts})
        await audit(
            request,
            "jobs.retry_many",
            target,
            {"retried": len(handles), "new_jobs": [h.id for h in handles[:20]]},
        )
        return JSONResponse(
            {"retried": len(handles), "items": [h.snapshot.to_json() for h in handles]}
        )

    async def cancel_many(request: Request) -> Response:
        body = _json_object(
            await request.body(), {"queue", "type", "reason"}, '{"queue": ..., "type": ...}'
        )
        if isinstance(body, JSONResponse):
            return body
        texts = _text_fields(body, ("queue", "type", "reason"))
        if isinstance(texts, JSONResponse):
            return texts
        reason = texts.get("reason", "cancelled from the dashboard")[:500]
        try:
            result = await run_in_threadpool(
                lambda: manager().cancel_many(
                    queue=texts.get("queue"), type=texts.get("type"), reason=reason
                )
            )
        except JobValidationError as exc:
            return _error(400, exc.code, exc.message)
        counts = {"cancelled": result.transitioned, "asked_to_stop": result.requested}
        target = _filter_text({k: v for k, v in texts.items() if k != "reason"})
        await audit(request, "jobs.cancel_many", target, {**counts, "reason": reason})
        return JSONResponse(counts)

    async def schedule_or_404(schedule_id: str) -> dict[str, Any] | JSONResponse:
        found = await run_in_threadpool(rm.schedule, schedule_id)
        if found is None:
            return _error(404, "JOB_SCHEDULE_NOT_FOUND", f"no schedule with id {schedule_id!r}")
        return found

    async def run_schedule(request: Request) -> Response:
        schedule_id = request.path_params["schedule_id"]
        found = await schedule_or_404(schedule_id)
        if isinstance(found, JSONResponse):
            return found
        written = await manager().trigger_job_schedule_now_by_id(schedule_id)
        await audit(request, "schedule.run_now", schedule_id, {"enqueued": bool(written)})
        return JSONResponse({"id": schedule_id, "enqueued": bool(written)})

    async def schedule_action(request: Request) -> Response:
        schedule_id, action = request.path_params["schedule_id"], request.path_params["action"]
        if action not in ("pause", "resume", "trigger"):
            return _error(404, "NOT_FOUND", "POST /api/schedules/{id}/pause|resume|trigger|run")
        found = await schedule_or_404(schedule_id)
        if isinstance(found, JSONResponse):
            return found
        patch: dict[str, Any]
        detail: dict[str, Any]
        if action == "trigger":
            shape = '{"cron": "*/5 * * * *", "timezone": "Europe/Berlin"} or {"every": 60}'
            body = _json_object(await request.body(), {"cron", "timezone", "every"}, shape)
            if isinstance(body, JSONResponse):
                return body
            trigger = _trigger_of(body, shape)
            if isinstance(trigger, JSONResponse):
                return trigger
            patch, detail = {"trigger": trigger}, {"from": found.get("trigger"), "to": body}
        else:
            patch, detail = {"enabled": action == "resume"}, {}
        try:
            changed = await run_in_threadpool(
                lambda: manager().update_job_schedule(schedule_id, **patch)
            )
        except JobError as exc:
            if exc.code == "JOB_SCHEDULE_NOT_FOUND":
                return _error(404, exc.code, exc.message)
            if isinstance(exc, JobValidationError) or exc.code.startswith("JOB_SCHEDULE"):
                return _error(400, exc.code, exc.message)
            raise
        if changed is None:
            return _error(404, "JOB_SCHEDULE_NOT_FOUND", f"no schedule with id {schedule_id!r}")
        await audit(request, f"schedule.{action}", schedule_id, detail)
        now = await schedule_or_404(schedule_id)
        return now if isinstance(now, JSONResponse) else JSONResponse(now)

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
        await audit(
            request,
            "schedule.backfill",
            schedule_id,
            {"from": iso(bounds[0]), "to": iso(bounds[1]), "written": written},
        )
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
        await audit(request, f"queue.{action}", queue, dict(options))
        return JSONResponse(limits.to_json())

    return [
        Route("/api/jobs/retry", retry_many, methods=["POST"]),
        Route("/api/jobs/cancel", cancel_many, methods=["POST"]),
        Route("/api/jobs/{job_id:str}/cancel", cancel, methods=["POST"]),
        Route("/api/jobs/{job_id:str}/retry", retry, methods=["POST"]),
        Route("/api/schedules/{schedule_id:str}/run", run_schedule, methods=["POST"]),
        Route("/api/schedules/{schedule_id:str}/backfill", backfill_schedule, methods=["POST"]),
        Route("/api/schedules/{schedule_id:str}/{action:str}", schedule_action, methods=["POST"]),
        Route("/api/queues/{rest:path}", queue_action, methods=["POST"]),
    ]


def _trigger_of(body: dict[str, Any], shape: str) -> Cron | Interval | JSONResponse:
    """The trigger a schedule edit asks for: a cron (with an optional zone) or an
    interval; the scheduler validates it further (JOB_SCHEDULE_TRIGGER_INVALID)."""
    if ("cron" in body) == ("every" in body):
        return _error(400, "INVALID_BODY", f"give one of cron or every: {shape}")
    if "every" in body:
        every = body["every"]
        if "timezone" in body:
            return _error(400, "INVALID_BODY", "timezone goes with cron, not every")
        if isinstance(every, bool) or not isinstance(every, int | float):
            return _error(400, "INVALID_BODY", "'every' is a number of seconds")
        return Interval(float(every))
    expr, zone = body["cron"], body.get("timezone")
    if not isinstance(expr, str) or not (zone is None or isinstance(zone, str)):
        return _error(400, "INVALID_BODY", "'cron' and 'timezone' are strings")
    return Cron(expr, timezone=zone or None)
