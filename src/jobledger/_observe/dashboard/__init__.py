"""Server-rendered dashboard pages (no build step; `static/app.js` adds live updates).

The workflow page carries its graph as JSON (`data-graph`, one node per step with its
jobs counted per status, never one per job) and `app.js` draws it as SVG; the node and
edge positions come from the vendored dagre (`static/vendor/`, MIT, see its README),
which lays out and draws nothing else. Without script the page's steps table says the
same.

Invariant: every value that comes from the database goes through `html.escape` here, and
through `textContent` in `app.js`; job payloads, outputs, errors and metadata are user
data and may contain markup. Pages carry a strict Content-Security-Policy (set by
`http.py`): no inline script or style, so even a missed escape could not run code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from jobledger._observe.read_model import (
    STATUSES,
    JobQuery,
    ReadModel,
    WorkflowPage,
    WorkflowStep,
    WorkflowView,
    iso,
    progress_label,
    shown_progress,
)
from jobledger._types import AttemptSnapshot, Explanation, JobSnapshot

__all__ = [
    "render_index",
    "render_job",
    "render_no_workflow",
    "render_not_found",
    "render_workflow",
    "render_workflows",
]


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _json(value: Any) -> str:
    return escape(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str))


def _time(value: Any) -> str:
    text = iso(value) if not isinstance(value, str) else value
    if text is None:
        return '<span class="muted">—</span>'
    return f'<time datetime="{_e(text)}">{_e(text.replace("T", " ").replace("Z", " UTC"))}</time>'


def _badge(status: str) -> str:
    return f'<span class="badge status-{_e(status)}" data-status="{_e(status)}">{_e(status)}</span>'


def _progress(snap: JobSnapshot) -> str:
    value = shown_progress(snap) or 0.0
    text = progress_label(snap)
    return (
        f'<progress class="p-{_e(snap.status)}" max="100" value="{value:g}" '
        f'title="{text or "0%"}">{text or "0%"}</progress> <span class="pct">{text}</span>'
    )


def _page(
    title: str,
    body: str,
    *,
    page: str,
    data: dict[str, str] | None = None,
    scripts: Sequence[str] = (),
) -> str:
    attrs = "".join(f' data-{_e(k)}="{_e(v)}"' for k, v in (data or {}).items())
    # `defer` runs scripts in document order: a page's own library before app.js.
    extra = "".join(f'<script src="{_e(src)}" defer></script>\n' for src in scripts)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<link rel="stylesheet" href="/static/style.css">
<link rel="icon" href="data:,">
</head>
<body data-page="{_e(page)}"{attrs}>
<header class="top">
  <a class="brand" href="/">jobledger</a>
  <nav><a href="/">Overview</a><a href="/#jobs">Jobs</a><a href="/workflows">Workflows</a>
  <a href="/#schedules">Schedules</a>
  <a href="/#workers">Workers</a><a href="/metrics">Metrics</a><a href="/openapi.json">API</a></nav>
  <span class="live" id="live" title="live updates">●</span>
</header>
<main>
{body}
</main>
{extra}<script src="/static/app.js" defer></script>
</body>
</html>
"""


def _link(params: dict[str, Any]) -> str:
    clean = {k: v for k, v in params.items() if v is not None and v != "" and v != 0}
    return "/?" + urlencode(clean) + "#jobs" if clean else "/#jobs"


def _queues_table(rm: ReadModel) -> str:
    stats = rm.queue_stats()
    if not stats:
        return '<p class="empty">No queues yet: enqueue a job.</p>'
    head = "".join(f"<th class=num>{_e(s)}</th>" for s in STATUSES)
    rows = []
    for qs in stats:
        cells = []
        for s in STATUSES:
            n = qs.counts.get(s, 0)
            link = _link({"queue": qs.name, "status": s})
            cls = f"num count status-{s}" + (" zero" if n == 0 else "")
            cells.append(f'<td class="{cls}"><a href="{_e(link)}">{n}</a></td>')
        rows.append(
            f'<tr data-queue="{_e(qs.name)}"><td><a href="{_e(_link({"queue": qs.name}))}">'
            f"{_e(qs.name)}</a></td><td class=muted>{_e(qs.type or '')}</td>{''.join(cells)}"
            f"<td>{_time(qs.oldest_pending_at)}</td></tr>"
        )
    return (
        '<table class="grid" id="queues-table"><thead><tr><th>Queue</th><th>Type</th>'
        f"{head}<th>Oldest pending</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _job_row(s: JobSnapshot) -> str:
    return (
        f'<tr data-job-id="{_e(s.id)}">'
        f'<td class="mono id"><a href="/jobs/{_e(quote(s.id, safe=""))}">{_e(s.id)}</a></td>'
        f"<td>{_e(s.type)}</td><td>{_badge(str(s.status))}</td><td>{_e(s.queue)}</td>"
        f"<td class=num>{s.attempt + 1}/{s.max_attempts}</td>"
        f'<td class="nowrap">{_progress(s)}</td><td>{_time(s.created_at)}</td>'
        f"<td>{_time(s.finished_at or s.started_at)}</td></tr>"
    )


def _filters(query: JobQuery, limit: int) -> str:
    chosen = query.status[0] if len(query.status) == 1 else ",".join(query.status)
    options = ['<option value="">any status</option>']
    for s in STATUSES:
        sel = " selected" if chosen == s else ""
        options.append(f'<option value="{s}"{sel}>{s}</option>')
    if chosen and chosen not in STATUSES:
        options.append(f'<option value="{_e(chosen)}" selected>{_e(chosen)}</option>')
    searched = "" if query.search is None else query.search.text()
    return f"""<form class="filters" method="get" action="/#jobs" id="job-filters">
  <label>Status <select name="status">{"".join(options)}</select></label>
  <label>Queue <input name="queue" value="{_e(query.queue or "")}" placeholder="any"></label>
  <label>Type <input name="type" value="{_e(query.type or "")}" placeholder="any"></label>
  <label>Search <input name="q" id="search" value="{_e(searched)}"
   placeholder="id, payload.FIELD:VALUE, metadata.FIELD:VALUE, ERROR_CODE"></label>
  <label>Rows <input name="limit" type="number" min="1" max="500" value="{limit}"></label>
  <button type="submit">Filter</button> <a class="button-link" href="/#jobs">Clear</a>
</form>"""


def _jobs_section(rm: ReadModel, query: JobQuery, limit: int, offset: int) -> str:
    page = rm.page(query, limit=limit, offset=offset)
    base = {
        "status": ",".join(query.status),
        "queue": query.queue,
        "type": query.type,
        "q": None if query.search is None else query.search.text(),
        "limit": limit if limit != 50 else None,
    }
    first = offset + 1 if page.items else 0
    pager = [f'<span class="muted">{first} to {offset + len(page.items)} of {page.total}</span>']
    if offset > 0:
        newer = _link({**base, "offset": max(0, offset - limit)})
        pager.append(f'<a href="{_e(newer)}">← newer</a>')
    if offset + len(page.items) < page.total:
        pager.append(f'<a href="{_e(_link({**base, "offset": offset + limit}))}">older →</a>')
    if page.items:
        table = (
            '<table class="grid" id="jobs-table"><thead><tr><th>ID</th><th>Type</th>'
            "<th>Status</th><th>Queue</th><th class=num>Attempt</th><th>Progress</th>"
            "<th>Created</th><th>Started / finished</th></tr></thead><tbody>"
            + "".join(_job_row(s) for s in page.items)
            + "</tbody></table>"
        )
    else:
        table = '<p class="empty" id="jobs-table">No jobs match.</p>'
    return f"{_filters(query, limit)}{table}<p class=pager>{' '.join(pager)}</p>"


def _action(url: str, label: str, *, opens_job: bool = False) -> str:
    """A button `app.js` turns into a POST (only rendered with `--allow-actions`);
    `opens_job`: the answer is a job, whose page the browser then opens."""
    follow = ' data-action-opens="job"' if opens_job else ""
    return (
        f'<button type="button" class="action" data-action-url="{_e(url)}"{follow}>'
        f"{_e(label)}</button>"
    )


# How many of a schedule's newest jobs its row shows (one listing each, newest first).
_LAST_FIRES = 3


def _overlap_cell(s: dict[str, Any]) -> str:
    text = _e(s["overlap"])
    if s["skipped_fires"]:
        text += f' <span class="muted">({_e(s["skipped_fires"])} skipped)</span>'
    return f'<td data-overlap="{_e(s["overlap"])}">{text}</td>'


def _last_fires(rm: ReadModel, schedule_id: str) -> str:
    jobs = rm.list_jobs(JobQuery(schedule_id=schedule_id), limit=_LAST_FIRES)
    if not jobs:
        return '<td class="last-fires">—</td>'
    links = [
        f'<a href="/jobs/{quote(j.id, safe="")}" title="{_e(j.created_at.isoformat())}">'
        f"{_badge(str(j.status))}</a>"
        for j in jobs
    ]
    return f'<td class="last-fires">{" ".join(links)}</td>'


def _schedules_table(rm: ReadModel, actions: bool) -> str:
    items = rm.schedules()
    if not items:
        return '<p class="empty">No schedules.</p>'
    rows = []
    for s in items:
        state = "enabled" if s["enabled"] else "paused"
        run_url = f"/api/schedules/{quote(str(s['id']), safe='')}/run"
        run_now = f"<td>{_action(run_url, 'Run now')}</td>" if actions else ""
        jitter = f"{s['jitter']:g}s" if s["jitter"] else "—"
        rows.append(
            f'<tr data-schedule-id="{_e(s["id"])}"><td>{_e(s["type"])}</td>'
            f"<td>{_e(s['name'] or '(singleton)')}</td><td class=mono>{_e(s['trigger_text'])}</td>"
            f'<td><span class="badge sched-{state}">{state}</span></td>'
            f"{_overlap_cell(s)}<td class=num>{_e(jitter)}</td>"
            f"<td>{_time(s['next_run'])}</td><td>{_time(s['last_run'])}</td>"
            f"<td class=num>{_e(s['fire_count'])}</td>{_last_fires(rm, str(s['id']))}"
            f'<td><a href="{_e(_link({"schedule_id": s["id"]}))}">jobs</a></td>'
            f"{run_now}</tr>"
        )
    return (
        '<table class="grid" id="schedules-table"><thead><tr><th>Type</th><th>Name</th>'
        "<th>Trigger</th><th>State</th><th>Overlap</th><th class=num>Jitter</th>"
        "<th>Next run</th><th>Last run</th><th class=num>Fires</th>"
        f"<th>Last fires</th><th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _workers_section(rm: ReadModel) -> str:
    workers = rm.workers()
    leader = rm.leader(workers)
    if leader is None:
        lead = '<p class="muted" id="leader">No leader lease has been taken.</p>'
    else:
        ok = "valid" if leader.valid else "expired"
        # A leader that stopped cleanly resigns by setting its expiry to 0.
        when = "resigned" if leader.expires_at == 0 else f"expires {_time(leader.expires_at)}"
        lead = (
            f'<p id="leader">Leader: <span class="mono">{_e(leader.worker_id)}</span> '
            f'(term {leader.term}, <span class="badge lease-{ok}">{ok}</span>, {when})</p>'
        )
    if not workers:
        return lead + '<p class="empty">No worker has registered.</p>'
    rows = []
    for w in workers:
        rows.append(
            f'<tr><td class="mono">{_e(w.id)}</td><td>{_e(w.hostname)}</td>'
            f'<td class=num>{w.pid}</td><td><span class="badge worker-{_e(w.state)}">'
            f"{_e(w.state)}</span></td><td>{_e(', '.join(sorted(w.handlers)))}</td>"
            f"<td>{_time(w.heartbeat_at)}</td><td>{_time(w.started_at)}</td></tr>"
        )
    return (
        lead + '<table class="grid" id="workers-table"><thead><tr><th>Worker</th><th>Host</th>'
        "<th class=num>PID</th><th>State</th><th>Handles</th><th>Heartbeat</th><th>Started</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render_index(
    rm: ReadModel,
    query: JobQuery,
    *,
    limit: int,
    offset: int,
    problem: str | None = None,
    actions: bool = False,
) -> str:
    notice = f'<p class="notice error">{_e(problem)}</p>' if problem else ""
    body = f"""{notice}
<section id="overview">
<h1>Queues <span class="muted small">{_e(rm.name)}</span></h1>
{_queues_table(rm)}</section>
<section id="jobs"><h2>Jobs</h2>{_jobs_section(rm, query, limit, offset)}</section>
<section id="schedules"><h2>Schedules</h2>{_schedules_table(rm, actions)}</section>
<section id="workers"><h2>Workers</h2>{_workers_section(rm)}</section>"""
    return _page("jobledger", body, page="index")


def _dl(snap: JobSnapshot) -> str:
    def row(label: str, value: str, key: str) -> str:
        return f'<dt>{_e(label)}</dt><dd data-field="{_e(key)}">{value}</dd>'

    parent = (
        f'<a class="mono" href="/jobs/{_e(snap.parent_id)}">{_e(snap.parent_id)}</a>'
        if snap.parent_id
        else '<span class="muted">—</span>'
    )
    return (
        "<dl class=facts>"
        + "".join(
            [
                row("Type", _e(snap.type), "type"),
                row("Queue", _e(snap.queue), "queue"),
                row("Attempt", f"{snap.attempt + 1} of {snap.max_attempts}", "attempt"),
                row("Priority", _e(snap.priority), "priority"),
                row("Timeout", _e(f"{snap.timeout:g} s" if snap.timeout else "none"), "timeout"),
                row("Idempotency key", _e(snap.idempotency_key or "—"), "idempotency_key"),
                row("Parent", parent, "parent_id"),
                row("Schedule", _e(snap.schedule_id or "—"), "schedule_id"),
                row("Worker", _e(snap.worker_id or "—"), "worker_id"),
                row(
                    "Cancel requested", "yes" if snap.cancel_requested else "no", "cancel_requested"
                ),
                row("Scheduled", _time(snap.scheduled_at), "scheduled_at"),
                row("Started", _time(snap.started_at), "started_at"),
                row("Finished", _time(snap.finished_at), "finished_at"),
                row("Created", _time(snap.created_at), "created_at"),
                row("Updated", _time(snap.updated_at), "updated_at"),
            ]
        )
        + "</dl>"
    )


_OUTCOME_STYLE = {
    "completed": "completed",
    "retry": "delayed",
    "failed": "failed",
    "cancelled": "cancelled",
    "interrupted": "pending",
    "lost": "failed",
}


def _attempts(attempts: Sequence[AttemptSnapshot]) -> str:
    """One row per ended attempt; its error, traceback and log lines fold out below it."""
    if not attempts:
        return '<p class="muted" id="no-attempts">No attempt has ended yet.</p>'
    rows = []
    for a in attempts:
        took = (
            f"{(a.finished_at - a.started_at).total_seconds():.3f} s"
            if a.started_at is not None
            else "—"
        )
        err = a.error
        summary = f"<strong>{_e(err.code)}</strong> {_e(err.message)}" if err else ""
        detail = ""
        if err is not None and err.traceback:
            detail += f'<pre class="error traceback">{_e(err.traceback)}</pre>'
        if a.logs:
            lines = "\n".join(f"{_e(iso(x.at))} {_e(x.level):<8} {_e(x.message)}" for x in a.logs)
            detail += f'<pre class="logs">{lines}</pre>'
        folded = (
            f'<tr class="attempt-detail"><td colspan="6"><details><summary>traceback and '
            f"logs</summary>{detail}</details></td></tr>"
            if detail
            else ""
        )
        badge = f'<span class="badge status-{_OUTCOME_STYLE[a.outcome]}">{_e(a.outcome)}</span>'
        rows.append(
            f'<tr class="attempt" data-outcome="{_e(a.outcome)}"><td>{a.attempt}</td>'
            f"<td>{badge}</td>"
            f'<td class="mono">{_e(a.worker_id or "—")}</td><td>{_time(a.started_at)}</td>'
            f"<td>{_e(took)}</td><td>{summary}</td></tr>{folded}"
        )
    return (
        '<table id="attempts"><thead><tr><th>#</th><th>Outcome</th><th>Worker</th>'
        "<th>Started</th><th>Took</th><th>Error</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _why(explained: Explanation | None) -> str:
    """`jobs.explain`'s reasons, for a job that has not started or whose worker died."""
    if explained is None or not explained.reasons:
        return ""
    items = "".join(
        f'<li><strong class="mono">{_e(r.code)}</strong> {_e(r.message)}</li>'
        for r in explained.reasons
    )
    return (
        '<section id="why-section"><h2>Why it is not running</h2>'
        f'<ul id="why">{items}</ul></section>'
    )


def render_job(
    snap: JobSnapshot,
    attempts: Sequence[AttemptSnapshot] = (),
    *,
    actions: bool = False,
    explained: Explanation | None = None,
) -> str:
    value = shown_progress(snap) or 0.0
    error = snap.error.to_json() if snap.error is not None else None
    hidden_error = "" if error else " hidden"
    code, message = (snap.error.code, snap.error.message) if snap.error else ("", "")
    cancel = ""
    if actions and not snap.is_terminal:
        cancel = _action(f"/api/jobs/{quote(snap.id, safe='')}/cancel", "Cancel job")
    elif actions:
        cancel = _action(f"/api/jobs/{quote(snap.id, safe='')}/retry", "Retry", opens_job=True)
    retry_of = ""
    if snap.retry_of:
        retry_of = (
            f'<p id="retry-of" class="muted">retry of <a class="mono" '
            f'href="/jobs/{_e(quote(snap.retry_of, safe=""))}">{_e(snap.retry_of)}</a></p>'
        )
    body = f"""<p><a href="/#jobs">← all jobs</a></p>
<h1>Job <span class="mono">{_e(snap.id)}</span>
<span id="status">{_badge(str(snap.status))}</span></h1>
{retry_of}
<div class="progress-row">
  <progress id="progress" class="p-{_e(snap.status)}" max="100" value="{value:g}"
   aria-label="Progress"></progress>
  <span id="progress-text">{progress_label(snap) or "0%"}</span>
  <span id="progress-detail" class="muted">{_e(snap.progress_detail or "")}</span>
  {cancel}
</div>
{_dl(snap)}
{_why(explained)}
<section id="error-section"{hidden_error}><h2>Error</h2>
<p class="error-summary"><strong id="error-code">{_e(code)}</strong>
<span id="error-message">{_e(message)}</span></p>
<pre id="error" class="error">{_json(error)}</pre></section>
<section id="attempts-section"><h2>Attempts</h2>{_attempts(attempts)}</section>
<section><h2>Output</h2><pre id="output">{_json(snap.output)}</pre></section>
<section><h2>Payload</h2><pre id="payload">{_json(snap.payload)}</pre></section>
<section><h2>Metadata</h2><pre id="metadata">{_json(dict(snap.metadata))}</pre></section>"""
    return _page(
        f"job {snap.id} · jobledger",
        body,
        page="job",
        data={"job-id": snap.id, "status": str(snap.status)},
    )


def render_not_found(job_id: str) -> str:
    body = f"""<p><a href="/#jobs">← all jobs</a></p>
<h1>No such job</h1><p>There is no job <span class="mono">{_e(job_id)}</span> (it may have been
garbage-collected).</p>"""
    return _page("job not found · jobledger", body, page="missing")


# -- workflows ---------------------------------------------------------------------------


def _workflow_href(workflow_id: str) -> str:
    return f"/workflows/{quote(workflow_id, safe='')}"


def _counts_text(counts: dict[str, int]) -> str:
    """`98 completed, 2 failed`: the statuses that have jobs, in `STATUSES` order."""
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s))


def _count_badges(counts: dict[str, int]) -> str:
    return " ".join(
        f'<span class="count-badge status-{_e(s)}" data-status="{_e(s)}">{counts[s]} {_e(s)}</span>'
        for s in STATUSES
        if counts.get(s)
    )


def render_workflows(page: WorkflowPage, *, name: str | None, problem: str | None = None) -> str:
    notice = f'<p class="notice error">{_e(problem)}</p>' if problem else ""
    base = {"name": name, "limit": page.limit if page.limit != 50 else None}

    def link(params: dict[str, Any]) -> str:
        clean = {k: v for k, v in params.items() if v is not None and v != "" and v != 0}
        return "/workflows?" + urlencode(clean) if clean else "/workflows"

    first = page.offset + 1 if page.items else 0
    last = page.offset + len(page.items)
    pager = [f'<span class="muted">{first} to {last} of {page.total}</span>']
    if page.offset > 0:
        newer = link({**base, "offset": max(0, page.offset - page.limit)})
        pager.append(f'<a href="{_e(newer)}">← newer</a>')
    if last < page.total:
        pager.append(
            f'<a href="{_e(link({**base, "offset": page.offset + page.limit}))}">older →</a>'
        )
    if page.items:
        rows = "".join(
            f'<tr data-workflow-id="{_e(w.id)}">'
            f'<td class="mono id"><a href="{_e(_workflow_href(w.id))}">{_e(w.id)}</a></td>'
            f"<td>{_e(w.name)}</td><td>{_badge(w.status)}</td>"
            f'<td class="num">{w.finished}/{w.total}</td>'
            f"<td>{_count_badges(dict(w.counts))}</td><td>{_time(w.created_at)}</td></tr>"
            for w in page.items
        )
        table = (
            '<table class="grid" id="workflows-table"><thead><tr><th>ID</th><th>Name</th>'
            "<th>Status</th><th class=num>Finished</th><th>Jobs</th><th>Created</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>"
        )
    else:
        table = '<p class="empty" id="workflows-table">No workflows.</p>'
    form = f"""<form class="filters" method="get" action="/workflows">
  <label>Name <input name="name" value="{_e(name or "")}" placeholder="any"></label>
  <button type="submit">Filter</button> <a class="button-link" href="/workflows">Clear</a>
</form>"""
    body = f"""{notice}<section id="workflows"><h1>Workflows</h1>{form}{table}
<p class=pager>{" ".join(pager)}</p></section>"""
    return _page("workflows · jobledger", body, page="workflows")


# The jobs a step's row lists on the workflow page; the rest are a link away.
_STEP_JOBS_SHOWN = 50


def _step_href(step: WorkflowStep, index: int) -> str:
    """Where a node of the graph leads: a one-job step to its job, a step of another
    workflow to that workflow, a step of many jobs to its row on this page."""
    if step.outside and step.workflow_id:
        return _workflow_href(step.workflow_id)
    if len(step.job_ids) == 1:
        return f"/jobs/{quote(step.job_ids[0], safe='')}"
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
    return json.dumps(nodes, ensure_ascii=False, separators=(",", ":"))


def _step_rows(view: WorkflowView) -> str:
    key_names = {s.key: s for s in view.steps}
    by_id = {j.id: j for j in view.snapshot.jobs}
    rows = []
    for i, s in enumerate(view.steps):
        ups = ", ".join(
            _e(key_names[u].name + (" (other workflow)" if key_names[u].outside else ""))
            for u in s.upstream
        )
        policy = (
            f' <span class="muted">on failure: {_e(s.on_upstream_failure)}</span>'
            if (s.on_upstream_failure == "run")
            else ""
        )
        # Unfinished and failed jobs first: what an operator came to look at.
        order = {"failed": 0, "running": 1, "pending": 2, "delayed": 3, "waiting": 4}
        members = [by_id[j] for j in s.job_ids if j in by_id]
        members.sort(key=lambda j: order.get(str(j.status), 9))
        links = "".join(
            f'<li><a class="mono" href="/jobs/{_e(quote(j.id, safe=""))}">{_e(j.id)}</a> '
            f"{_badge(str(j.status))}</li>"
            for j in members[:_STEP_JOBS_SHOWN]
        )
        more = len(members) - _STEP_JOBS_SHOWN
        if more > 0:
            href = f"/?{urlencode({'workflow_id': view.snapshot.id})}#jobs"
            links += f'<li class="muted"><a href="{_e(href)}">{more} more</a></li>'
        name = _e(s.name)
        if s.outside and s.workflow_id:
            name += (
                f' <a class="muted" href="{_e(_workflow_href(s.workflow_id))}">(other workflow)</a>'
            )
        jobs = f"<details><summary>{len(s.job_ids)}</summary><ul class=jobs>{links}</ul></details>"
        rows.append(
            f'<tr id="step-{i}" data-step="{_e(s.key)}"><td>{name}</td>'
            f"<td class=muted>{_e(', '.join(s.types))}</td>"
            f"<td>{_badge(s.status)}</td><td>{_count_badges(s.counts)}</td>"
            f"<td>{ups or '<span class=muted>—</span>'}{policy}</td><td>{jobs}</td></tr>"
        )
    return (
        '<table class="grid" id="steps-table"><thead><tr><th>Step</th><th>Type</th>'
        "<th>Status</th><th>Jobs by status</th><th>After</th><th>Jobs</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def render_workflow(view: WorkflowView) -> str:
    snap = view.snapshot
    body = f"""<p><a href="/workflows">← all workflows</a></p>
<h1>Workflow {_e(snap.name)} <span class="mono small">{_e(snap.id)}</span>
<span id="status">{_badge(snap.status)}</span></h1>
<p id="workflow-counts">{_count_badges(view.counts)}
<span class="muted">· created {_time(snap.created_at)} ·
<a href="{_e("/?" + urlencode({"workflow_id": snap.id}) + "#jobs")}">its jobs</a></span></p>
<section id="graph-section"><h2>Graph</h2>
<figure id="workflow-graph" class="graph" data-graph="{_e(_graph_json(view))}"></figure>
</section>
<section id="steps-section"><h2>Steps</h2>{_step_rows(view)}</section>"""
    return _page(
        f"workflow {snap.name} · jobledger",
        body,
        page="workflow",
        data={"workflow-id": snap.id, "status": snap.status},
        scripts=["/static/vendor/dagre.min.js"],
    )


def render_no_workflow(workflow_id: str) -> str:
    body = f"""<p><a href="/workflows">← all workflows</a></p>
<h1>No such workflow</h1><p>There is no workflow <span class="mono">{_e(workflow_id)}</span>
(it may have been garbage-collected).</p>"""
    return _page("workflow not found · jobledger", body, page="missing")
