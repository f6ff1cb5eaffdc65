"""Server-rendered dashboard pages: Jinja2 templates (`templates/`), no build step;
`static/app.js` adds live updates and the action buttons.

Pages: overview (`/`: queues, the throughput chart), jobs (`/jobs`: search, filters,
bulk actions behind a confirmation), a job (`/jobs/{id}`), schedules, workflows and a
workflow, workers, audit. Each `render_*` here turns read-model values into a template's
context (the geometry of the throughput chart and the attempt timeline included, so the
templates only place what is computed) and returns the page.

The workflow page carries its graph as JSON (`data-graph`, one node per step with its
jobs counted per status, never one per job) and `app.js` draws it as SVG; the node and
edge positions come from the vendored dagre (`static/vendor/`, MIT, see its README),
which lays out and draws nothing else. Without script the page's steps table says the
same. The throughput chart and the attempt timeline are SVG drawn here, on the server:
no charting library, and they show without script.

Invariants:

* Every value that comes from the database is written by the template engine with
  autoescaping on (`select_autoescape` for every `.html` template; nothing is marked
  safe), and by `textContent` in `app.js`: job payloads, outputs, errors, tracebacks,
  log lines, metadata, queue, type, schedule and audit fields are user data and may
  contain markup. Pages carry a strict Content-Security-Policy (set by `http.py`): no
  inline script or style, so even a missed escape could not run code.
* Buttons are rendered only when the request's principal may act (`actions=`); the
  server checks again on every POST, so a hidden button is a convenience, not the lock.
* A bulk action's confirmation states how many jobs the filter matches when the page is
  rendered; the POST acts on the rows matching then, and its answer says how many.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import jinja2

from jobledger._observe.read_model import (
    STATUSES,
    JobPage,
    JobQuery,
    ReadModel,
    WorkflowPage,
    WorkflowView,
    iso,
    progress_label,
    shown_progress,
)
from jobledger._types import AttemptSnapshot, Explanation, JobSnapshot

__all__ = [
    "BULK_RETRY_MAX",
    "UNFINISHED",
    "axis_top",
    "render_audit",
    "render_job",
    "render_jobs",
    "render_no_workflow",
    "render_not_found",
    "render_overview",
    "render_schedules",
    "render_workers",
    "render_workflow",
    "render_workflows",
    "throughput_chart",
]

# What `POST /api/jobs/retry` takes at most in one request (its `limit`).
BULK_RETRY_MAX = 1000
# The statuses `POST /api/jobs/cancel` acts on: every job that has not finished.
UNFINISHED = ("pending", "delayed", "waiting", "running")
_RETRYABLE = ("failed", "cancelled")
# How many of a schedule's newest jobs its row shows (one listing each, newest first).
_LAST_FIRES = 3
# The jobs a step's row lists on the workflow page; the rest are a link away.
_STEP_JOBS_SHOWN = 50

NAV = (
    ("/", "Overview", "overview"),
    ("/jobs", "Jobs", "jobs"),
    ("/schedules", "Schedules", "schedules"),
    ("/workflows", "Workflows", "workflows"),
    ("/workers", "Workers", "workers"),
    ("/audit", "Audit", "audit"),
)


# -- the template environment ----------------------------------------------------------


def _iso(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime | int):
        return iso(value)
    return str(value)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _job_href(job_id: str, prefix: str = "/jobs/", suffix: str = "") -> str:
    return f"{prefix}{quote(job_id, safe='')}{suffix}"


def _workflow_href(workflow_id: str) -> str:
    return f"/workflows/{quote(workflow_id, safe='')}"


def _schedule_href(schedule_id: str, action: str) -> str:
    return f"/api/schedules/{quote(schedule_id, safe='')}/{action}"


def _queue_url(queue: str, action: str) -> str:
    return f"/api/queues/{quote(queue, safe='')}/{action}"


def jobs_link(**params: Any) -> str:
    """`/jobs` with these filters (empty ones left out)."""
    clean = {k: v for k, v in params.items() if v is not None and v != "" and v != 0}
    return "/jobs?" + urlencode(clean) if clean else "/jobs"


def _progress_value(snap: JobSnapshot) -> str:
    return f"{shown_progress(snap) or 0.0:g}"


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("jobledger._observe.dashboard", "templates"),
    autoescape=jinja2.select_autoescape(["html"], default_for_string=True, default=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=False,
    lstrip_blocks=False,
    keep_trailing_newline=True,
)
_ENV.filters.update(
    iso=_iso,
    pretty=_pretty,
    tojson_compact=_compact,
    job_href=_job_href,
    workflow_href=_workflow_href,
    schedule_href=_schedule_href,
    progress_value=_progress_value,
    progress_label=progress_label,
)
_ENV.globals.update(statuses=STATUSES, jobs_link=jobs_link, queue_url=_queue_url, nav=NAV)


def _render(
    template: str,
    *,
    page: str,
    section: str | None = None,
    data: Mapping[str, str] | None = None,
    scripts: Sequence[str] = (),
    problem: str | None = None,
    actions: bool = False,
    principal: Any = None,
    **context: Any,
) -> str:
    return _ENV.get_template(template).render(
        page=page,
        section=section or page,
        data=dict(data or {}),
        scripts=list(scripts),
        problem=problem,
        actions=actions,
        principal=principal,
        **context,
    )


@dataclass(frozen=True, slots=True)
class _Pager:
    first: int
    last: int
    total: int | None
    newer: str | None
    older: str | None


def _pager(
    base: str, params: Mapping[str, Any], offset: int, limit: int, shown: int, total: int | None
) -> _Pager:
    """Links to the pages around this one; `total` None: unknown (then `older` appears
    when the page is full)."""

    def link(at: int) -> str:
        clean = {k: v for k, v in {**params, "offset": at}.items() if v not in (None, "", 0)}
        return f"{base}?{urlencode(clean)}" if clean else base

    last = offset + shown
    more = last < total if total is not None else shown >= limit
    return _Pager(
        offset + 1 if shown else 0,
        last,
        total,
        link(max(0, offset - limit)) if offset > 0 else None,
        link(offset + limit) if more else None,
    )


# -- overview --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Bar:
    iso: str
    label: str
    completed: int
    failed: int
    x: float
    w: float
    y_completed: float
    h_completed: float
    y_failed: float
    h_failed: float


@dataclass(frozen=True, slots=True)
class _Chart:
    width: int
    height: int
    left: int
    right: int
    top: int
    plot_h: int
    bars: list[_Bar]
    y_ticks: list[dict[str, Any]]
    x_ticks: list[dict[str, Any]]
    completed: int
    failed: int


def axis_top(n: int) -> int:
    """The axis top: 1, 2 or 5 times a power of ten, at least `n` (and at least 1)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= n:
                return max(1, m * step)
        step *= 10


def throughput_chart(series: Sequence[tuple[datetime, int, int]]) -> _Chart:
    """Stacked bars, completed below failed, one per minute; geometry in SVG units."""
    width, height, left, right, top, bottom = 1180, 190, 44, 8, 10, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = axis_top(max((c + f for _, c, f in series), default=0))
    slot = plot_w / max(1, len(series))
    gap = min(3.0, slot / 4)
    base = top + plot_h
    bars: list[_Bar] = []
    x_ticks: list[dict[str, Any]] = []
    for i, (at, completed, failed) in enumerate(series):
        h_c = completed / top_value * plot_h
        h_f = failed / top_value * plot_h
        x = left + i * slot + gap / 2
        bars.append(
            _Bar(
                iso(at) or "",
                at.strftime("%H:%M UTC"),
                completed,
                failed,
                round(x, 1),
                round(slot - gap, 1),
                round(base - h_c, 1),
                round(h_c, 1),
                round(base - h_c - h_f, 1),
                round(h_f, 1),
            )
        )
        if at.minute % 10 == 0:
            x_ticks.append(
                {"x": round(x + (slot - gap) / 2, 1), "label": at.strftime("%H:%M"), "iso": iso(at)}
            )
    halfway = {top_value // 2} if top_value % 2 == 0 else set()
    y_ticks = [
        {"y": round(base - v / top_value * plot_h, 1), "label": str(v)}
        for v in sorted({0, top_value} | halfway)
    ]
    return _Chart(
        width,
        height,
        left,
        right,
        top,
        plot_h,
        bars,
        y_ticks,
        x_ticks,
        sum(c for _, c, _ in series),
        sum(f for _, _, f in series),
    )


def render_overview(
    rm: ReadModel,
    *,
    throughput: Sequence[tuple[datetime, int, int]],
    actions: bool = False,
    principal: Any = None,
) -> str:
    queues = rm.queue_stats()
    workers = rm.workers()
    leader = rm.leader(workers)
    schedules = rm.schedules()
    totals = {s: sum(q.counts.get(s, 0) for q in queues) for s in STATUSES}
    return _render(
        "overview.html",
        page="index",
        section="overview",
        actions=actions,
        principal=principal,
        db_name=rm.name,
        queues=queues,
        chart=throughput_chart(throughput),
        alive=sum(w.state == "alive" for w in workers),
        dead=sum(w.state == "dead" for w in workers),
        leader=leader,
        failed=totals["failed"],
        running=totals["running"],
        pending=totals["pending"],
        schedules=len(schedules),
        paused_schedules=sum(not s["enabled"] for s in schedules),
    )


# -- jobs ------------------------------------------------------------------------------


def _filter_params(query: JobQuery, limit: int) -> dict[str, Any]:
    return {
        "q": None if query.search is None else query.search.text(),
        "status": ",".join(query.status),
        "queue": query.queue,
        "type": query.type,
        "schedule_id": query.schedule_id,
        "workflow_id": query.workflow_id,
        "parent_id": query.parent_id,
        "limit": limit if limit != 50 else None,
    }


def _of_what(query: JobQuery) -> str:
    """`of queue "x", of type "t", matching "q"`: the filter in words."""
    parts = []
    if query.queue:
        parts.append(f"of queue {query.queue!r}")
    if query.type:
        parts.append(f"of type {query.type!r}")
    if query.search is not None:
        parts.append(f"matching {query.search.text()!r}")
    return (" " + " ".join(parts)) if parts else ""


def _jobs_word(n: int) -> str:
    return "job" if n == 1 else "jobs"


def _bulk(
    rm: ReadModel, query: JobQuery, page: JobPage, params: dict[str, Any], confirm: str | None
) -> dict[str, Any] | None:
    """The bulk actions this filter allows, or the confirmation of the one asked for."""
    total = page.total
    offers: dict[str, dict[str, Any]] = {}
    statuses = tuple(query.status)
    if statuses and set(statuses) <= set(_RETRYABLE) and total:
        n = min(total, BULK_RETRY_MAX)
        body: dict[str, Any] = {"status": list(statuses), "limit": n}
        if query.queue:
            body["queue"] = query.queue
        if query.type:
            body["type"] = query.type
        if query.search is not None:
            body["q"] = query.search.text()
        words = " or ".join(statuses)
        offers["retry"] = {
            "label": f"Retry {n} {words} {_jobs_word(n)}…",
            "question": f"Retry {n} {words} {_jobs_word(n)}{_of_what(query)}?",
            "note": (
                f"{page.total_text} match; one request retries at most {BULK_RETRY_MAX}."
                if total > BULK_RETRY_MAX
                else "Each gets a new job; the failed rows stay as they are."
            ),
            "button": f"Retry {n} {_jobs_word(n)}",
            "url": "/api/jobs/retry",
            "body": body,
            "count": n,
        }
    if (query.queue or query.type) and query.search is None:
        scope = JobQuery(status=UNFINISHED, queue=query.queue, type=query.type)
        n = rm.count_jobs(scope)
        if n or confirm == "cancel":
            body = {k: v for k, v in (("queue", query.queue), ("type", query.type)) if v}
            offers["cancel"] = {
                "label": f"Cancel {n} unfinished {_jobs_word(n)}…",
                "question": f"Cancel all {n} unfinished {_jobs_word(n)}{_of_what(scope)}?",
                "note": "Pending, delayed and waiting ones end now; running ones are asked "
                "to stop. The status filter does not narrow this.",
                "button": f"Cancel {n} {_jobs_word(n)}",
                "url": "/api/jobs/cancel",
                "body": body,
                "count": n,
            }
    if not offers:
        return None
    back = jobs_link(**params)
    if confirm in offers:
        return {"confirm": offers[confirm], "back": back, "offers": []}
    return {
        "confirm": None,
        "back": back,
        "offers": [
            {"kind": kind, "label": o["label"], "href": jobs_link(**params, confirm=kind)}
            for kind, o in offers.items()
        ],
    }


def render_jobs(
    rm: ReadModel,
    query: JobQuery,
    *,
    limit: int,
    offset: int,
    problem: str | None = None,
    actions: bool = False,
    confirm: str | None = None,
    principal: Any = None,
) -> str:
    page = rm.page(query, limit=limit, offset=offset)
    params = _filter_params(query, limit)
    field = None if query.search is None else query.search.field
    unindexed = None if field is None or field.name in rm.search_indexes() else field.name
    chosen = query.status[0] if len(query.status) == 1 else ",".join(query.status)
    return _render(
        "jobs.html",
        page="jobs",
        problem=problem,
        actions=actions,
        principal=principal,
        query=query,
        limit=limit,
        chosen=chosen,
        searched="" if query.search is None else query.search.text(),
        unindexed=unindexed,
        jobs=page.items,
        total_text=page.total_text,
        pager=_pager("/jobs", params, offset, limit, len(page.items), page.exact_total),
        bulk=_bulk(rm, query, page, params, confirm) if actions else None,
    )


# -- one job ---------------------------------------------------------------------------

_OUTCOME_STYLE = {
    "completed": "completed",
    "retry": "delayed",
    "failed": "failed",
    "cancelled": "cancelled",
    "interrupted": "pending",
    "lost": "failed",
}


def _took(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return str(timedelta(seconds=round(seconds)))


def _facts(snap: JobSnapshot) -> list[tuple[str, str, Any, str]]:
    return [
        ("Type", "type", snap.type, "text"),
        ("Queue", "queue", snap.queue, "text"),
        ("Attempt", "attempt", f"{snap.attempt + 1} of {snap.max_attempts}", "text"),
        ("Priority", "priority", snap.priority, "text"),
        ("Timeout", "timeout", f"{snap.timeout:g} s" if snap.timeout else "none", "text"),
        ("Idempotency key", "idempotency_key", snap.idempotency_key or "—", "text"),
        ("Worker", "worker_id", snap.worker_id or "—", "text"),
        ("Cancel requested", "cancel_requested", "yes" if snap.cancel_requested else "no", "text"),
        ("Enqueued by", "enqueued_by", snap.enqueued_by or "—", "text"),
        ("Scheduled", "scheduled_at", snap.scheduled_at, "time"),
        ("Started", "started_at", snap.started_at, "time"),
        ("Finished", "finished_at", snap.finished_at, "time"),
        ("Created", "created_at", snap.created_at, "time"),
        ("Updated", "updated_at", snap.updated_at, "time"),
    ]


def _attempt_rows(attempts: Sequence[AttemptSnapshot]) -> list[dict[str, Any]]:
    rows = []
    for i, a in enumerate(attempts):
        took = (
            _took((a.finished_at - a.started_at).total_seconds())
            if a.started_at is not None
            else "—"
        )
        logs = "\n".join(f"{iso(x.at)} {x.level:<8} {x.message}" for x in a.logs)
        traceback = a.error.traceback if a.error is not None else None
        rows.append(
            {
                "attempt": a.attempt,
                "outcome": a.outcome,
                "style": _OUTCOME_STYLE.get(a.outcome, "failed"),
                "worker_id": a.worker_id,
                "started_at": a.started_at,
                "took": took,
                "error": a.error,
                "traceback": traceback,
                "logs": logs,
                # The newest attempt's traceback is what the reader came for: open.
                "open": i == len(attempts) - 1 and a.error is not None,
            }
        )
    return rows


def _timeline(attempts: Sequence[AttemptSnapshot]) -> dict[str, Any] | None:
    """Each attempt as a span on one time axis, from the first start to the last end
    (so retry delays show as gaps); None without attempts."""
    if not attempts:
        return None
    width = 1180
    starts = [a.started_at or a.finished_at for a in attempts]
    t0, t1 = min(starts), max(a.finished_at for a in attempts)
    span = max((t1 - t0).total_seconds(), 1e-3)
    spans = []
    for a, start in zip(attempts, starts, strict=True):
        x = (start - t0).total_seconds() / span * (width - 4)
        w = max(4.0, (a.finished_at - start).total_seconds() / span * (width - 4))
        spans.append(
            {
                "attempt": a.attempt,
                "outcome": a.outcome,
                "style": _OUTCOME_STYLE.get(a.outcome, "failed"),
                "x": round(min(x, width - w), 1),
                "w": round(w, 1),
                "took": _took((a.finished_at - start).total_seconds()),
            }
        )
    return {
        "width": width,
        "height": 64,
        "mid": 28,
        "spans": spans,
        "start_label": t0.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "span": _took(span),
    }


def render_job(
    snap: JobSnapshot,
    attempts: Sequence[AttemptSnapshot] = (),
    *,
    actions: bool = False,
    explained: Explanation | None = None,
    children: int = 0,
    principal: Any = None,
) -> str:
    error = snap.error.to_json() if snap.error is not None else None
    return _render(
        "job.html",
        page="job",
        section="jobs",
        data={"job-id": snap.id, "status": str(snap.status)},
        actions=actions,
        principal=principal,
        snap=snap,
        facts=_facts(snap),
        explained=explained,
        error_json=_pretty(error),
        attempts=_attempt_rows(attempts),
        timeline=_timeline(attempts),
        metadata=dict(snap.metadata),
        children=children,
    )


def render_not_found(job_id: str) -> str:
    return _render(
        "missing.html", page="missing", section="jobs", what="job", ident=job_id, back="/jobs"
    )


# -- schedules -------------------------------------------------------------------------


def _edit_values(trigger: Any) -> dict[str, Any]:
    """The trigger form's starting values for a stored trigger."""
    if isinstance(trigger, dict) and trigger.get("kind") == "interval":
        return {"kind": "every", "cron": "", "timezone": "", "every": trigger.get("seconds", "")}
    if isinstance(trigger, dict) and trigger.get("kind") == "cron":
        return {
            "kind": "cron",
            "cron": trigger.get("expr") or "",
            "timezone": trigger.get("timezone") or "",
            "every": "",
        }
    return {"kind": "cron", "cron": "", "timezone": "", "every": ""}


def render_schedules(rm: ReadModel, *, actions: bool = False, principal: Any = None) -> str:
    items = []
    for s in rm.schedules():
        items.append(
            {
                **s,
                "jitter_text": f"{s['jitter']:g}s" if s["jitter"] else "—",
                "last_fires": rm.list_jobs(JobQuery(schedule_id=s["id"]), limit=_LAST_FIRES),
                "edit": _edit_values(s["trigger"]),
            }
        )
    return _render(
        "schedules.html", page="schedules", actions=actions, principal=principal, schedules=items
    )


# -- workers ---------------------------------------------------------------------------


def render_workers(rm: ReadModel, *, principal: Any = None) -> str:
    workers = rm.workers()
    return _render(
        "workers.html",
        page="workers",
        principal=principal,
        workers=workers,
        leader=rm.leader(workers),
    )


# -- audit -----------------------------------------------------------------------------


def _target_href(action: Any, target: Any) -> str | None:
    """A link for an audit entry's target, by the kind of action: a job's page, a
    queue's jobs, a schedule's row; none for a bulk action's filter."""
    if not isinstance(action, str) or not isinstance(target, str) or not target:
        return None
    kind = action.partition(".")[0]
    if kind == "job":
        return _job_href(target)
    if kind == "queue":
        return jobs_link(queue=target)
    if kind == "schedule":
        return f"/schedules#schedule-{target}"
    return None


def render_audit(
    items: Sequence[Mapping[str, Any]],
    *,
    limit: int,
    offset: int,
    actor: str | None = None,
    action: str | None = None,
    problem: str | None = None,
    principal: Any = None,
    actions: bool = False,
) -> str:
    """`items`: `AuditEntry.to_json()` of the entries shown, newest first."""
    rows = [
        {
            **e,
            "target_href": _target_href(e.get("action"), e.get("target")),
            "detail_text": e.get("detail")
            if isinstance(e.get("detail"), str)
            else _compact(e.get("detail")),
        }
        for e in items
    ]
    params = {"actor": actor, "action": action, "limit": limit if limit != 50 else None}
    return _render(
        "audit.html",
        page="audit",
        problem=problem,
        principal=principal,
        actions=actions,
        items=rows,
        actor=actor,
        action=action,
        pager=_pager("/audit", params, offset, limit, len(rows), None),
    )


# -- workflows ---------------------------------------------------------------------------


def render_workflows(
    page: WorkflowPage, *, name: str | None, problem: str | None = None, principal: Any = None
) -> str:
    params = {"name": name, "limit": page.limit if page.limit != 50 else None}
    return _render(
        "workflows.html",
        page="workflows",
        problem=problem,
        principal=principal,
        name=name,
        items=[{**_info(w), "counts": dict(w.counts)} for w in page.items],
        pager=_pager("/workflows", params, page.offset, page.limit, len(page.items), page.total),
    )


def _info(w: Any) -> dict[str, Any]:
    return {
        "id": w.id,
        "name": w.name,
        "status": w.status,
        "finished": w.finished,
        "total": w.total,
        "created_at": w.created_at,
    }


def _step_href(step: Any, index: int) -> str:
    """Where a node of the graph leads: a one-job step to its job, a step of another
    workflow to that workflow, a step of many jobs to its row on this page."""
    if step.outside and step.workflow_id:
        return _workflow_href(step.workflow_id)
    if len(step.job_ids) == 1:
        return _job_href(step.job_ids[0])
    return f"#step-{index}"


def _graph_json(view: WorkflowView) -> str:
    nodes = [
        {
            "key": s.key,
            "name": s.name,
            "outside": s.outside,
            "jobs": len(s.job_ids),
            "status": s.status,
            "counts": {k: n for k, n in s.counts.items() if n},
            "upstream": list(s.upstream),
            "policy": s.on_upstream_failure,
            "href": _step_href(s, i),
        }
        for i, s in enumerate(view.steps)
    ]
    return _compact(nodes)


def render_workflow(view: WorkflowView, *, principal: Any = None) -> str:
    snap = view.snapshot
    by_key = {s.key: s for s in view.steps}
    by_id = {j.id: j for j in snap.jobs}
    # Unfinished and failed jobs first: what an operator came to look at.
    order = {"failed": 0, "running": 1, "pending": 2, "delayed": 3, "waiting": 4}
    steps = []
    for s in view.steps:
        members = [by_id[j] for j in s.job_ids if j in by_id]
        members.sort(key=lambda j: order.get(str(j.status), 9))
        steps.append(
            {
                "key": s.key,
                "name": s.name,
                "outside": s.outside,
                "workflow_id": s.workflow_id,
                "types": s.types,
                "status": s.status,
                "counts": s.counts,
                "after": [
                    by_key[u].name + (" (other workflow)" if by_key[u].outside else "")
                    for u in s.upstream
                ],
                "on_upstream_failure": s.on_upstream_failure,
                "job_count": len(s.job_ids),
                "members": members[:_STEP_JOBS_SHOWN],
                "more": len(members) - _STEP_JOBS_SHOWN,
            }
        )
    return _render(
        "workflow.html",
        page="workflow",
        section="workflows",
        data={"workflow-id": snap.id, "status": snap.status},
        scripts=["/static/vendor/dagre.min.js"],
        principal=principal,
        snap=snap,
        counts=view.counts,
        graph=_graph_json(view),
        steps=steps,
    )


def render_no_workflow(workflow_id: str) -> str:
    return _render(
        "missing.html",
        page="missing",
        section="workflows",
        what="workflow",
        ident=workflow_id,
        back="/workflows",
    )
