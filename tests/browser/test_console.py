"""The operator's console in a real browser (Debian's chromium), doing what a person on
call does (DESIGN.md §8.9): find a failed job by a payload field, read its traceback,
retry it and watch the new job complete; bulk-retry the failed jobs of a queue after a
confirmation; pause a queue and see its jobs stay pending in another process; edit a
schedule's cron; find all of it on the audit page; a viewer who sees no buttons and whose
forced POST is refused; and user data in every field shown as text.

The jobs run in a `jobledger worker` process of its own (`consoleapp.py`), on a SQLite
file or a PostgreSQL schema (`db`); the test only enqueues, serves and clicks. Waits are
polls with a deadline on what the table or the page says, never sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

import jobledger as jl
from jobledger._observe.auth import ApiToken
from jobledger._observe.http import create_app
from jobledger._observe.read_model import ReadModel
from tests.browser.consoleapp import CHARGE, Order, register
from tests.http.conftest import running_server

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0
expect.set_options(timeout=int(WAIT * 1000))
OPERATOR = "op-secret"  # the operator named "operator" (`token=`)
ALICE = ApiToken("alice", "alice-secret", "operator")
VICTOR = ApiToken("victor", "victor-secret", "viewer")
XSS = '<script>window.__pwned=1;alert(1)</script>"><img src=x onerror="window.__pwned=2;alert(2)">'


def wait_for(check: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@contextmanager
def worker_process(db: str, state: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`jobledger worker tests.browser.consoleapp:jobs` until the block ends (SIGTERM,
    then a clean exit expected); yields once the worker has registered alive."""
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_DB"}
    env.update(
        PYTHONUNBUFFERED="1",
        CONSOLE_DIR=str(state),
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    err = state / "worker.err"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "jobledger.cli", "--db", db, "worker"),
                *("tests.browser.consoleapp:jobs", "--log-level", "warning"),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        with ReadModel(db) as rm:

            def alive() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"the worker exited: {err.read_text()}")
                return any(w.state == "alive" and w.pid == proc.pid for w in rm.workers())

            wait_for(alive, "the worker process to register")
        yield proc
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)


@contextmanager
def console(db: str) -> Iterator[str]:
    """The dashboard with actions for the operators ("operator", alice) and a viewer
    (victor); yields its base URL."""
    app = create_app(
        db, token=OPERATOR, tokens=[ALICE, VICTOR], allow_actions=True, poll_interval=0.05
    )
    try:
        with running_server(app) as url:
            yield url
    finally:
        app.state.read_model.close()
        for used in app.state.action_managers.values():
            _stop(used)


def _stop(jobs: jl.JobManager) -> None:
    """`await jobs.stop()` from a thread: Playwright's sync API owns this thread's loop."""
    stopper = threading.Thread(target=lambda: asyncio.run(jobs.stop()))
    stopper.start()
    stopper.join(WAIT)


def _producer(db: str) -> jl.JobManager:
    """The app's manager as a web process has it: its handlers registered (so an enqueue
    routes to the handler's queue with its retry policy), never started."""
    return register(jl.JobManager(db))


def _status(jobs: jl.JobManager, job_id: str) -> str:
    snap = jobs.get(job_id)
    assert snap is not None
    return str(snap.status)


def test_find_a_failed_charge_by_its_order_read_the_traceback_and_retry_it(
    page: Any, db: str, tmp_path: Path
) -> None:
    (tmp_path / "declined.txt").write_text("B-1002\n")
    producer = _producer(db)
    ids = {
        order: producer.enqueue(CHARGE, Order(order=order, note=f"customer of {order}")).id
        for order in ("A-1001", "B-1002", "C-1003")
    }
    with worker_process(db, tmp_path), console(db) as url:
        wait_for(
            lambda: {_status(producer, i) for i in ids.values()} <= {"completed", "failed"},
            "the three charges to end",
        )
        page.goto(f"{url}/?token={OPERATOR}")  # sets the cookie the buttons' POSTs use
        chart = page.locator("#throughput-chart")
        expect(chart).to_have_attribute("data-completed", "2")
        expect(chart).to_have_attribute("data-failed", "1")

        page.click("nav >> text=Jobs")
        page.fill("#search", "payload.order:B-1002")
        page.press("#search", "Enter")
        rows = page.locator("#jobs-table tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-job-id", ids["B-1002"])
        rows.first.locator("a").click()

        expect(page.locator("body")).to_have_attribute("data-status", "failed")
        expect(page.locator("#error-message")).to_contain_text("card declined for order B-1002")
        expect(page.locator("#error-traceback")).to_be_visible()
        expect(page.locator("#error-traceback")).to_contain_text("CardDeclined")
        attempts = page.locator("#attempts tr.attempt")
        expect(attempts).to_have_count(2)
        last = page.locator("#attempts tr.attempt-detail details").last
        expect(last.locator("pre.logs")).to_contain_text("charging order B-1002")
        expect(page.locator("#timeline g.span")).to_have_count(2)

        (tmp_path / "declined.txt").write_text("")  # the customer updated the card
        page.click(f'button[data-action-url="/api/jobs/{ids["B-1002"]}/retry"]')
        expect(page.locator("#retry-of a")).to_have_text(ids["B-1002"])
        # The worker process runs the new job; the page follows it through its events.
        expect(page.locator("body")).to_have_attribute("data-status", "completed")
        expect(page.locator("#output")).to_contain_text("R-B-1002")
        # The attempt that ended was fetched in, on its timeline and in the table.
        expect(page.locator("#attempts tr.attempt")).to_have_attribute("data-outcome", "completed")
        expect(page.locator("#timeline g.span")).to_have_count(1)
        new_id = str(page.get_attribute("body", "data-job-id"))
        assert new_id != ids["B-1002"]
        assert _status(producer, new_id) == "completed"
        assert _status(producer, ids["B-1002"]) == "failed"  # terminal rows stay terminal
        page.goto("about:blank")
    _stop(producer)


def test_a_paused_queue_keeps_its_jobs_pending_in_the_worker_process(
    page: Any, db: str, tmp_path: Path
) -> None:
    producer = _producer(db)
    first = producer.enqueue(CHARGE, Order(order="U-1", shop="us")).id
    with worker_process(db, tmp_path), console(db) as url:
        wait_for(lambda: _status(producer, first) == "completed", "the first US charge")
        page.goto(f"{url}/?token={OPERATOR}")
        row = page.locator('#queues-table tr[data-queue="payments.us"]')
        row.locator("button", has_text="Pause").click()
        expect(row).to_have_attribute("data-paused", "yes")
        expect(row.locator("td.state")).to_have_text("paused")

        held = [producer.enqueue(CHARGE, Order(order=f"U-{n}", shop="us")).id for n in (2, 3, 4)]
        # A charge of another queue enqueued after them completes: the worker is claiming.
        control = producer.enqueue(CHARGE, Order(order="E-1", shop="eu")).id
        wait_for(lambda: _status(producer, control) == "completed", "the EU charge")
        assert [_status(producer, i) for i in held] == ["pending"] * 3
        # The overview refreshes itself and says the same.
        expect(row.locator("td.status-pending")).to_have_text("3")

        page.goto(f"{url}/jobs/{held[0]}")
        expect(page.locator("#why")).to_contain_text("QUEUE_PAUSED")
        page.goto(f"{url}/")
        row.locator("button", has_text="Resume").click()
        expect(row).to_have_attribute("data-paused", "no")
        wait_for(lambda: all(_status(producer, i) == "completed" for i in held), "the held charges")
        expect(row.locator("td.status-completed")).to_have_text("4")
        page.goto("about:blank")
    _stop(producer)


def _no_markup_ran(page: Any, dialogs: list[str], where: str) -> None:
    assert dialogs == [], (where, dialogs)
    assert page.evaluate("window.__pwned") is None, where
    assert page.locator('img[src="x"]').count() == 0, where
    # Only the dashboard's own files: no script element from the data.
    assert page.evaluate("[...document.scripts].every(s => s.src.includes('/static/'))"), where


def test_markup_in_every_field_is_shown_as_text(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    (tmp_path / "declined.txt").write_text("X-1\n")
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    producer = _producer(db)
    failing = producer.enqueue(CHARGE, Order(order="X-1", note=XSS), metadata={"label": XSS}).id
    passing = producer.enqueue(CHARGE, Order(order="X-2", note=XSS)).id
    odd_type = jl.JobType(f"odd{XSS}", dict)
    odd = producer.enqueue(odd_type, {"k": XSS}, queue=f"q{XSS}").id
    producer.register_job_schedule(
        CHARGE, Order(order="S-1", note=XSS), trigger=jl.Cron("0 0 1 1 *"), name=f"s{XSS}"
    )
    with worker_process(db, tmp_path), console(db) as url:
        wait_for(
            lambda: (
                {_status(producer, failing), _status(producer, passing)} == {"failed", "completed"}
            ),
            "the two charges to end",
        )
        page.goto(f"{url}/jobs/{failing}?token={OPERATOR}")
        for field in ("#payload", "#metadata", "#error-message", "#error-traceback"):
            expect(page.locator(field)).to_contain_text("<script>window.__pwned=1;")
            # (JSON fields show the quotes escaped, so the check stops before them.)
            expect(page.locator(field)).to_contain_text("<img src=x onerror=")
        expect(page.locator("#attempts pre.logs").last).to_contain_text(XSS)
        expect(page.locator("#attempts td").filter(has_text="card declined").last).to_contain_text(
            XSS
        )
        _no_markup_ran(page, dialogs, "failed job")

        page.goto(f"{url}/jobs/{passing}")
        expect(page.locator("#output")).to_contain_text("<script>window.__pwned=1;")
        _no_markup_ran(page, dialogs, "completed job")

        page.goto(f"{url}/jobs/{odd}")
        expect(page.locator('[data-field="type"]')).to_have_text(odd_type.name)
        expect(page.locator('[data-field="queue"]')).to_have_text(f"q{XSS}")
        _no_markup_ran(page, dialogs, "odd job")

        page.goto(f"{url}/jobs")
        expect(page.locator(f'tr[data-job-id="{odd}"]')).to_contain_text(odd_type.name)
        _no_markup_ran(page, dialogs, "jobs")
        page.goto(f"{url}/")
        expect(page.locator("#queues-table")).to_contain_text(f"q{XSS}")
        _no_markup_ran(page, dialogs, "overview")
        page.goto(f"{url}/schedules")
        expect(page.locator("#schedules-table td.name")).to_have_text(f"s{XSS}")
        _no_markup_ran(page, dialogs, "schedules")
        # An operator's actions carry the markup into the confirmation and the audit log.
        page.goto(f"{url}/jobs")
        _fill_filters(page, status="failed", q=f"payload.note:{XSS}")
        expect(page.locator("#search")).to_have_value(f"payload.note:{XSS}")
        expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
        page.click("#bulk-retry")
        expect(page.locator("#confirm-text")).to_contain_text(XSS)
        page.click("#confirm button[data-action-url]")
        expect(page.locator("#action-result")).to_have_text("Retried 1 job.")
        _no_markup_ran(page, dialogs, "bulk retry")
        cancel = page.request.post(
            f"{url}/api/jobs/{odd}/cancel?reason=r{XSS}", headers={"origin": url}
        )
        assert cancel.status == 200
        page.goto(f"{url}/audit")
        expect(page.locator("#audit-table tbody tr")).to_have_count(2)
        expect(page.locator("#audit-table td.target").nth(1)).to_contain_text(XSS)
        expect(page.locator("#audit-table td.detail").first).to_contain_text("r<script>")
        _no_markup_ran(page, dialogs, "audit")
        page.goto(f"{url}/jobs/{odd}")
        expect(page.locator("#error-message")).to_contain_text(f"r{XSS}")
        _no_markup_ran(page, dialogs, "cancelled odd job")
        for path in ("/workers", "/workflows"):
            page.goto(f"{url}{path}")
            _no_markup_ran(page, dialogs, path)
        page.goto("about:blank")
    _stop(producer)


def _fill_filters(page: Any, *, status: str = "", queue: str = "", q: str = "") -> None:
    page.select_option("#status-filter", status)
    page.fill("#queue-filter", queue)
    page.fill("#search", q)
    page.click("#job-filters button[type=submit]")


def test_bulk_retry_edit_a_schedule_and_find_it_all_on_the_audit_page(
    refusing_page: Any, tmp_path: Path
) -> None:
    page = refusing_page
    db = str(tmp_path / "jobs.db")
    (tmp_path / "declined.txt").write_text("E-1 E-2 E-3 U-9\n")
    producer = _producer(db)
    for order, shop in (("E-1", "eu"), ("E-2", "eu"), ("E-3", "eu"), ("E-4", "eu"), ("U-9", "us")):
        producer.enqueue(CHARGE, Order(order=order, shop=shop))
    sid = producer.register_job_schedule(
        CHARGE, Order(order="NIGHTLY"), trigger=jl.Cron("0 2 * * *"), name="nightly run"
    )

    def count(**filters: Any) -> int:
        return producer.count(**filters)

    with worker_process(db, tmp_path), console(db) as url:
        wait_for(lambda: count(status="failed") == 4, "four declined charges")
        (tmp_path / "declined.txt").write_text("U-9\n")  # the EU gateway is back

        page.goto(f"{url}/jobs?token={ALICE.secret}")
        expect(page.locator("#who")).to_have_text("alice · operator")
        _fill_filters(page, status="failed", queue="payments.eu")
        expect(page.locator("#jobs-table tbody tr")).to_have_count(3)
        page.click("#bulk-retry")
        expect(page.locator("#confirm-text")).to_contain_text(
            "Retry 3 failed jobs of queue 'payments.eu'?"
        )
        assert count(queue="payments.eu") == 4  # nothing happened before the confirmation
        page.click("#confirm button[data-action-url='/api/jobs/retry']")
        expect(page.locator("#action-result")).to_have_text("Retried 3 jobs.")
        # The worker process runs the three new jobs; the US failure was not touched.
        wait_for(lambda: count(queue="payments.eu", status="completed") == 4, "the retried charges")
        assert count(queue="payments.eu") == 7
        assert count(queue="payments.us", status="failed") == 1
        assert count(queue="payments.us") == 1

        # The US charge alone, from its page, while its queue is held on the overview.
        page.goto(f"{url}/")
        us = page.locator('#queues-table tr[data-queue="payments.us"]')
        us.locator("button", has_text="Pause").click()
        expect(us).to_have_attribute("data-paused", "yes")
        page.goto(f"{url}/jobs?q=payload.order:U-9")
        page.locator("#jobs-table tbody tr a").first.click()
        page.click("button[data-action-url$='/retry']")
        expect(page.locator("#why")).to_contain_text("QUEUE_PAUSED")
        retried_us = str(page.get_attribute("body", "data-job-id"))
        page.goto(f"{url}/")
        us.locator("button", has_text="Resume").click()
        expect(us).to_have_attribute("data-paused", "no")
        wait_for(lambda: _status(producer, retried_us) == "failed", "the US retry (still declined)")

        page.goto(f"{url}/schedules")
        row = page.locator(f'tr.schedule-edit[data-schedule-id="{sid}"]')
        row.locator("summary").click()
        # A cron the scheduler refuses: the form shows the error envelope, nothing changes.
        row.locator('input[name="cron"]').fill("61 * * * *")
        row.locator("button[type=submit]").click()
        expect(row.locator(".action-result.error")).to_contain_text(
            "JOB_SCHEDULE_TRIGGER_INVALID: "
        )
        row.locator('input[name="cron"]').fill("30 3 * * 1")
        row.locator('input[name="timezone"]').fill("Europe/Paris")
        row.locator("button[type=submit]").click()
        trigger = page.locator(f'tr[data-schedule-id="{sid}"] td.trigger')
        expect(trigger).to_have_text("cron 30 3 * * 1 (Europe/Paris)")
        page.locator(f'tr[data-schedule-id="{sid}"] button', has_text="Pause").click()
        expect(page.locator(f"tr#schedule-{sid}")).to_have_attribute("data-enabled", "no")
        with ReadModel(db) as rm:
            stored = rm.schedule(sid)
        assert stored is not None
        assert (stored["trigger"]["expr"], stored["enabled"]) == ("30 3 * * 1", False)

        page.click("nav >> text=Audit")
        rows = page.locator("#audit-table tbody tr")
        expect(rows).to_have_count(6)
        actions = [rows.nth(i).get_attribute("data-action") for i in range(6)]
        assert actions == [  # newest first
            "schedule.pause",
            "schedule.trigger",
            "queue.resume",
            "job.retry",
            "queue.pause",
            "jobs.retry_many",
        ]
        expect(page.locator("#audit-table td.actor")).to_have_text(["alice"] * 6)
        expect(rows.nth(1).locator("td.detail")).to_contain_text("30 3 * * 1")
        expect(rows.nth(3).locator("td.detail")).to_contain_text(retried_us)
        expect(rows.nth(4).locator("td.target")).to_have_text("payments.us")
        expect(rows.nth(5).locator("td.target")).to_contain_text("payments.eu")
        expect(rows.nth(5).locator("td.detail")).to_contain_text('"retried":3')
        # A schedule's entry links to its row.
        rows.nth(0).locator("td.target a").click()
        expect(page.locator(f"tr#schedule-{sid}")).to_be_visible()
        page.goto(f"{url}/audit?action=schedule.trigger")
        expect(page.locator("#audit-table tbody tr")).to_have_count(1)
        page.goto("about:blank")
    _stop(producer)


def test_a_viewer_sees_no_buttons_and_a_forced_post_is_refused(page: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    (tmp_path / "declined.txt").write_text("V-1\n")
    producer = _producer(db)
    failed = producer.enqueue(CHARGE, Order(order="V-1")).id
    pending = producer.enqueue(CHARGE, Order(order="V-2"), delay=3600).id
    producer.register_job_schedule(
        CHARGE, Order(order="S"), trigger=jl.Cron("0 2 * * *"), name="nightly run"
    )
    with worker_process(db, tmp_path), console(db) as url:
        wait_for(lambda: _status(producer, failed) == "failed", "the declined charge")
        page.goto(f"{url}/?token={VICTOR.secret}")
        expect(page.locator("#who")).to_have_text("victor · viewer")
        for path in (
            "/",
            "/jobs?status=failed",
            "/jobs?status=failed&confirm=retry",
            "/jobs?queue=payments.eu&confirm=cancel",
            f"/jobs/{failed}",
            f"/jobs/{pending}",
            "/schedules",
        ):
            page.goto(url + path)
            expect(page.locator("#who")).to_be_visible()
            assert page.locator("button[data-action-url], form[data-action-url]").count() == 0
            assert page.locator("#bulk, #confirm").count() == 0, path

        # Forced POSTs with the viewer's cookie, from this origin (page.request shares the
        # page's cookies; a fetch in the page would do the same, and log the 403).
        origin = {"origin": url}
        refused = page.request.post(f"{url}/api/jobs/{failed}/retry", headers=origin)
        assert (refused.status, refused.json()["error"]["code"]) == (403, "FORBIDDEN_ROLE")
        bulk = page.request.post(f"{url}/api/jobs/retry", headers=origin, data={"status": "failed"})
        assert (bulk.status, bulk.json()["error"]["code"]) == (403, "FORBIDDEN_ROLE")
        pause = page.request.post(f"{url}/api/queues/payments.eu/pause", headers=origin)
        assert pause.status == 403
        assert producer.count() == 2  # nothing was retried
        page.goto(f"{url}/audit")
        expect(page.locator("#audit-table")).to_have_text("No action has been taken.")
        page.goto("about:blank")
    _stop(producer)
