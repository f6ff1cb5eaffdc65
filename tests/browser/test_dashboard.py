"""The dashboard in a real browser: a live progress bar, and user data shown as text.

A worker in this process (its own thread and loop) moves a job one step at a time, each
step only after the page has shown the previous one, so what the test sees is the page
following the database through the server-sent events, not a lucky timing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger.testing import FakeClock, drain
from tests.http.conftest import WORK, BackgroundWorker, Item, running_server
from tests.http.workflows import OK, Part, Workflows, build

pytestmark = pytest.mark.browser

WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def _screenshot(page: Any, name: str) -> None:
    """Kept for people: JOBLEDGER_SCREENSHOTS=dir saves what the browser showed."""
    where = os.environ.get("JOBLEDGER_SCREENSHOTS")
    if where:
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=True)


def _stop(jobs: jl.JobManager) -> None:
    """`await jobs.stop()` from a thread: Playwright's sync API owns this thread's loop."""
    worker = threading.Thread(target=lambda: asyncio.run(jobs.stop()))
    worker.start()
    worker.join(30)


def _status(page: Any) -> str:
    return str(page.get_attribute("body", "data-status"))


def _progress(page: Any) -> float:
    return float(page.eval_on_selector("#progress", "el => el.value"))


def test_job_page_progress_bar_follows_the_job_to_its_final_state(
    page: Any, tmp_path: Path
) -> None:
    clock = FakeClock()
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db, clock=clock, startup_delay=0)
    gates = [asyncio.Event() for _ in range(5)]

    @jobs.handler(WORK, recovery="retry")
    async def stepper(ctx: jl.JobContext[Item]) -> dict[str, str]:
        for i, value in enumerate((20, 40, 60, 80)):
            await gates[i].wait()
            clock.advance(1.0)  # past the progress throttle: every report reaches the row
            await ctx.report_progress(value, f"chunk {i + 1} of 4")
        await gates[4].wait()
        return {"html": '<img src=x onerror="window.__pwned = 3">'}

    worker = BackgroundWorker(jobs)
    app = None
    try:
        job_id = worker.call(lambda: jobs.enqueue(WORK, Item(n=1, note=XSS)).id)
        app = create_app(db, poll_interval=0.02)
        with running_server(app) as url:
            page.goto(f"{url}/jobs/{job_id}")
            expect(page.locator("body")).to_have_attribute("data-status", "running")
            seen = [(_status(page), _progress(page))]
            for i, value in enumerate((20, 40, 60, 80)):
                worker.call(gates[i].set)
                expect(page.locator("#progress")).to_have_attribute("value", str(value))
                seen.append((_status(page), _progress(page)))
                assert page.text_content("#progress-detail") == f"chunk {i + 1} of 4"
                assert page.text_content("#progress-text") == f"{value}%"
            _screenshot(page, "job-running")
            worker.call(gates[4].set)
            expect(page.locator("body")).to_have_attribute("data-status", "completed")
            seen.append((_status(page), _progress(page)))
            _screenshot(page, "job-completed")

            assert seen == [
                ("running", 0.0),
                ("running", 20.0),
                ("running", 40.0),
                ("running", 60.0),
                ("running", 80.0),
                ("completed", 100.0),
            ]
            assert page.text_content("#status") == "completed"
            assert page.get_attribute("#live", "data-state") == "done"
            # The output arrived through the event stream and is shown as text.
            assert '<img src=x onerror=\\"window.__pwned = 3\\">' in str(
                page.text_content("#output")
            )
            assert page.evaluate("window.__pwned") is None
            assert page.locator("#output img").count() == 0
            page.goto("about:blank")
    finally:
        for gate in gates:
            worker.call(gate.set)
        worker.close()
        if app is not None:
            app.state.read_model.close()


def test_markup_in_payloads_is_shown_as_text(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db)
    job_id = jobs.enqueue(WORK, Item(n=2, note=XSS), metadata={"label": "<b>bold?</b>"}).id
    _stop(jobs)
    app = create_app(db, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/jobs/{job_id}")
            payload = str(page.text_content("#payload"))
            assert "<script>window.__pwned = 1</script>" in payload
            assert "<b>bold?</b>" in str(page.text_content("#metadata"))
            assert page.locator("#payload script, #payload img, #metadata b").count() == 0
            assert page.evaluate("document.scripts.length") == 1  # only /static/app.js
            assert page.evaluate("window.__pwned") is None

            page.goto(f"{url}/jobs?type={WORK.name}")
            assert page.locator(f'tr[data-job-id="{job_id}"]').count() == 1
            _screenshot(page, "overview")
            assert page.evaluate("window.__pwned") is None
            page.goto("about:blank")
    finally:
        app.state.read_model.close()


def test_overview_refreshes_itself(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db)
    first = jobs.enqueue(WORK, Item(n=1)).id
    app = create_app(db, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(url + "/jobs")
            assert page.locator(f'tr[data-job-id="{first}"]').count() == 1
            cell = page.locator('#queues-table tr[data-queue="http.work"] td.status-pending')
            second = jobs.enqueue(WORK, Item(n=2)).id
            page.wait_for_selector(f'tr[data-job-id="{second}"]', timeout=WAIT_MS)
            page.goto(url + "/")
            expect(cell).to_have_text("2")
            jobs.enqueue(WORK, Item(n=3))
            expect(cell).to_have_text("3")
            page.goto("about:blank")
    finally:
        _stop(jobs)
        app.state.read_model.close()


def test_cancel_button_with_actions_enabled(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db)
    job_id = jobs.enqueue(WORK, Item(n=1)).id
    _stop(jobs)
    app = create_app(db, token="tok", allow_actions=True, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/jobs/{job_id}?token=tok")  # sets the cookie the POST uses
            expect(page.locator("body")).to_have_attribute("data-status", "pending")
            page.click("button[data-action-url]")
            expect(page.locator("button[data-action-url]")).to_have_text("cancelled")
            # The event stream (authorised by the same cookie) brings the new state.
            expect(page.locator("body")).to_have_attribute("data-status", "cancelled")
            assert page.text_content("#error-code") == "JOB_CANCELLED"
            page.goto("about:blank")
    finally:
        for used in app.state.action_managers.values():
            _stop(used)
        app.state.read_model.close()


def test_a_failed_jobs_page_shows_its_attempts_and_tracebacks(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    failing = jl.JobType("ui.failing", Item)
    jobs = jl.JobManager(db, clock=FakeClock(), startup_delay=0)

    @jobs.handler(failing, recovery="retry", retry=jl.RetryPolicy(max_attempts=2))
    def fail(ctx: jl.JobContext[Item]) -> None:
        ctx.logger.warning("about to fail <b>%d</b>", ctx.attempt)
        raise KeyError("missing")

    async def run() -> str:
        async with jobs:
            job_id = jobs.enqueue(failing, Item(n=1)).id
            await drain(jobs)
            return job_id

    # In a thread of its own: Playwright's sync API owns this thread's loop.
    ids: list[str] = []
    worker = threading.Thread(target=lambda: ids.append(asyncio.run(run())))
    worker.start()
    worker.join(30)
    [job_id] = ids
    app = create_app(db, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/jobs/{job_id}")
            rows = page.locator("#attempts tr.attempt")
            expect(rows).to_have_count(2)
            assert [rows.nth(i).get_attribute("data-outcome") for i in range(2)] == [
                "retry",
                "failed",
            ]
            expect(rows.nth(1)).to_contain_text("JOB_HANDLER_THREW")
            # The newest attempt's traceback is open; the earlier one folds out.
            detail = page.locator("#attempts tr.attempt-detail details").nth(1)
            traceback = detail.locator("pre.traceback")
            expect(traceback).to_be_visible()
            expect(traceback).to_contain_text("KeyError: 'missing'")
            expect(traceback).to_contain_text('raise KeyError("missing")')
            # Log lines are text, never markup.
            expect(detail.locator("pre.logs")).to_contain_text("about to fail <b>1</b>")
            assert detail.locator("pre.logs b").count() == 0
            earlier = page.locator("#attempts tr.attempt-detail details").nth(0)
            expect(earlier.locator("pre.traceback")).to_be_hidden()
            earlier.locator("summary").click()
            expect(earlier.locator("pre.traceback")).to_contain_text("KeyError")
            expect(page.locator("#error-traceback")).to_contain_text("KeyError: 'missing'")
            expect(page.locator("#timeline g.span")).to_have_count(2)
            _screenshot(page, "attempts")
            page.goto("about:blank")
    finally:
        app.state.read_model.close()


def test_retry_button_on_a_failed_job_opens_the_new_job(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(WORK, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def work(ctx: jl.JobContext[Item]) -> None:
        raise RuntimeError("broken")

    async def fail_once() -> str:
        async with jobs:
            h = jobs.enqueue(WORK, Item(n=1))
            assert (await asyncio.wait_for(h.finished, 20)).status == "failed"
            return h.id

    ended: list[str] = []  # asyncio.run in a thread: Playwright owns this thread's loop
    runner = threading.Thread(target=lambda: ended.append(asyncio.run(fail_once())))
    runner.start()
    runner.join(30)
    (failed_id,) = ended
    app = create_app(db, token="tok", allow_actions=True, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/jobs/{failed_id}?token=tok")  # sets the cookie the POST uses
            expect(page.locator("body")).to_have_attribute("data-status", "failed")
            assert page.locator("#retry-of").count() == 0
            page.click(f'button[data-action-url="/api/jobs/{failed_id}/retry"]')
            # The answer is the new job; the browser opens its page.
            expect(page.locator("#retry-of a")).to_have_text(failed_id)
            new_id = str(page.get_attribute("body", "data-job-id"))
            assert new_id != failed_id
            assert page.url == f"{url}/jobs/{new_id}"
            snap = jobs.get(new_id)
            assert snap is not None
            assert (snap.retry_of, snap.status, snap.payload) == (
                failed_id, "pending", {"n": 1, "note": ""},
            )  # fmt: skip
            assert jobs.get(failed_id).status == "failed"  # type: ignore[union-attr]
            _screenshot(page, "retried")
            page.click("#retry-of a")
            expect(page.locator("body")).to_have_attribute("data-job-id", failed_id)
            page.goto("about:blank")
    finally:
        for used in app.state.action_managers.values():
            _stop(used)
        _stop(jobs)
        app.state.read_model.close()


def _built(path: str) -> Workflows:
    """`build` in a thread of its own: Playwright's sync API owns this thread's loop."""
    box: list[Workflows] = []
    worker = threading.Thread(target=lambda: box.append(build(path)))
    worker.start()
    worker.join(60)
    return box[0]


def test_a_workflow_page_draws_its_graph_with_each_steps_status(page: Any, tmp_path: Path) -> None:
    made = _built(str(tmp_path / "jobs.db"))
    app = create_app(made.path, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/workflows")
            page.click(f'tr[data-workflow-id="{made.diamond}"] a')
            expect(page.locator("body")).to_have_attribute("data-page", "workflow")
            svg = page.locator("#workflow-graph svg#workflow-svg")
            expect(svg).to_be_visible()
            nodes = svg.locator("g.node")
            expect(nodes).to_have_count(4)
            status = {
                key: page.get_attribute(f'g.node[data-key="{key}"]', "class")
                for key in ("top", "left", "right", "join")
            }
            assert status == {
                "top": "node status-completed",
                "left": "node status-failed",
                "right": "node status-completed",
                "join": "node status-cancelled",
            }
            right = svg.locator('g.node[data-key="right"]')
            assert right.get_attribute("data-jobs") == "3"
            assert right.locator("text.step-name").text_content() == "right \u00d73"
            assert right.locator("text.step-counts").text_content() == "3 completed"
            edges = page.eval_on_selector_all(
                "svg#workflow-svg path.edge", "els => els.map(e => [e.dataset.from, e.dataset.to])"
            )
            assert sorted(map(tuple, edges)) == [
                ("left", "join"),
                ("right", "join"),
                ("top", "left"),
                ("top", "right"),
            ]
            # Laid out left to right: every edge goes from a node to one further right.
            box = {k: svg.locator(f'g.node[data-key="{k}"] rect').bounding_box() for k in status}
            for up, down in edges:
                assert box[up]["x"] < box[down]["x"], (up, down)
            _screenshot(page, "workflow")
            # A one-job node opens its job; the failed one shows why.
            svg.locator('g.node[data-key="left"]').click()
            expect(page.locator("body")).to_have_attribute("data-page", "job")
            assert page.url.endswith(f"/jobs/{made.steps['left'][0]}")
            expect(page.locator("#error-message")).to_have_text("left fell over")
            page.goto("about:blank")
    finally:
        app.state.read_model.close()


def test_a_step_of_many_jobs_is_one_node_with_its_counts(page: Any, tmp_path: Path) -> None:
    made = _built(str(tmp_path / "jobs.db"))
    app = create_app(made.path, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/workflows/{made.fan}")
            split = page.locator('svg#workflow-svg g.node[data-key="split"]')
            expect(split).to_have_attribute("data-jobs", "12")
            assert split.locator("text.step-name").text_content() == "split \u00d712"
            assert split.locator("text.step-counts").text_content() == "12 completed"
            expect(page.locator("svg#workflow-svg g.node")).to_have_count(2)
            # The policy "run" edge is drawn dashed.
            edge = page.locator("svg#workflow-svg path.edge")
            expect(edge).to_have_class("edge policy-run")
            split.click()  # many jobs: their row on this page
            assert page.url.endswith("#step-0")
            page.goto("about:blank")
    finally:
        app.state.read_model.close()


def test_a_running_workflows_graph_follows_its_jobs(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(OK, recovery="retry")
    async def ok(ctx: jl.JobContext[Part]) -> int:
        return ctx.payload.n

    wf = jobs.workflow("live")
    first = wf.add(OK, Part(), name="first")
    wf.add(OK, Part(), name="second", after=[first])
    handle = wf.enqueue()  # nothing runs it yet
    app = create_app(db, poll_interval=0.02)
    try:
        with running_server(app) as url:
            page.goto(f"{url}/workflows/{handle.id}")
            node = 'svg#workflow-svg g.node[data-key="{}"]'.format
            expect(page.locator(node("first"))).to_have_class("node status-pending")
            expect(page.locator(node("second"))).to_have_class("node status-waiting")
            worker = BackgroundWorker(jobs)
            try:
                expect(page.locator(node("second"))).to_have_class("node status-completed")
                expect(page.locator(node("first"))).to_have_class("node status-completed")
                expect(page.locator("body")).to_have_attribute("data-status", "completed")
                expect(page.locator("#live")).to_have_attribute("data-state", "done")
            finally:
                worker.close()
            page.goto("about:blank")
    finally:
        app.state.read_model.close()


def test_the_throughput_chart_is_labelled_in_the_browsers_time_zone(
    browser: Any, tmp_path: Path
) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db)
    jobs.enqueue(WORK, Item(n=1))
    _stop(jobs)
    app = create_app(db, poll_interval=0.02)
    context = browser.new_context(timezone_id="Asia/Kolkata")  # UTC+05:30: no whole hour
    try:
        with running_server(app) as url:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{url}/")
            expect(page.locator("#chart-zone")).to_have_text("local")
            tick = page.locator("#throughput-chart text.tick[data-at]").first
            at = datetime.fromisoformat(str(tick.get_attribute("data-at")).replace("Z", "+00:00"))
            expect(tick).to_have_text(at.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%H:%M"))
            minute = page.locator("#throughput-chart g.minute").first
            at = datetime.fromisoformat(
                str(minute.get_attribute("data-minute")).replace("Z", "+00:00")
            )
            local = at.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%H:%M")
            expect(minute.locator("title")).to_have_text(f"{local}: 0 completed, 0 failed")
            assert errors == []
    finally:
        context.close()
        app.state.read_model.close()
