"""The server-rendered dashboard: content, escaping, filters (the browser tests do the JS)."""

from __future__ import annotations

import re

import httpx

from jobledger._observe import dashboard
from jobledger._observe.http import create_app
from tests.http.conftest import Populated, running_server

PAGES = ("/", "/jobs", "/schedules", "/workflows", "/workers", "/audit")


def test_overview_lists_queues_with_their_settings_and_the_chart(
    base_url: str, populated: Populated
) -> None:
    page = httpx.get(f"{base_url}/", timeout=10)
    assert page.status_code == 200
    html = page.text
    assert 'id="queues-table"' in html
    assert 'data-queue="fast"' in html
    # Counts link to the job list filtered by queue and status.
    assert 'href="/jobs?queue=fast&amp;status=completed"' in html
    chart = html[html.index('id="throughput-chart"') :]
    chart = chart[: chart.index("</figure>")]
    # Every job of the populated database ended within the hour: all on the chart.
    assert 'data-completed="5"' in chart
    assert 'data-failed="1"' in chart
    assert chart.count('class="minute"') == 60
    assert "<script>alert" not in html  # payloads are not on the overview, and never raw
    # Without actions there are no buttons.
    assert "data-action-url" not in html


def test_the_old_job_list_links_on_the_overview_lead_to_the_jobs_page(base_url: str) -> None:
    old = httpx.get(f"{base_url}/", params={"status": "failed", "queue": "x"}, timeout=10)
    assert old.status_code == 303
    assert old.headers["location"] == "/jobs?status=failed&queue=x"


def test_the_jobs_page_lists_filters_and_pages(base_url: str, populated: Populated) -> None:
    html = httpx.get(f"{base_url}/jobs", timeout=10).text
    for job_id in populated.ids.values():
        assert f'href="/jobs/{job_id}"' in html
    failed = httpx.get(f"{base_url}/jobs", params={"status": "failed"}, timeout=10).text
    assert populated.ids["failed"] in failed
    assert populated.ids["fast"] not in failed
    assert '<option value="failed" selected>' in failed
    assert '<span class="mono" title="failure 1">JOB_HANDLER_THREW</span>' in failed
    first = httpx.get(f"{base_url}/jobs", params={"limit": "2"}, timeout=10).text
    assert first.count("<tr data-job-id=") == 2
    assert 'href="/jobs?limit=2&amp;offset=2" rel="next"' in first
    bad = httpx.get(f"{base_url}/jobs", params={"limit": "0"}, timeout=10)
    assert bad.status_code == 400
    assert "limit must be between 1 and 500" in bad.text


def test_job_page_escapes_the_payload(base_url: str, populated: Populated) -> None:
    page = httpx.get(f"{base_url}/jobs/{populated.ids['parent']}", timeout=10)
    assert page.status_code == 200
    html = page.text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'data-job-id="' + populated.ids["parent"] + '"' in html
    assert 'id="progress" class="p-completed" max="100" value="100"' in html
    # Lineage: the parent's page links to its child jobs.
    assert f'href="/jobs?parent_id={populated.ids["parent"]}"' in html
    child = httpx.get(f"{base_url}/jobs/{populated.ids['child']}", timeout=10).text
    assert f'id="parent-link" href="/jobs/{populated.ids["parent"]}"' in child

    failed = httpx.get(f"{base_url}/jobs/{populated.ids['failed']}", timeout=10).text
    assert "JOB_HANDLER_THREW" in failed
    assert 'id="error-section" hidden' not in failed
    # The traceback is shown as text, the newest attempt's folded open.
    assert 'id="error-traceback" class="error traceback">Traceback' in failed
    assert failed.count('class="attempt"') == 2
    assert "<details open><summary>traceback and logs" in failed
    assert len(re.findall(r'<g class="span outcome-(delayed|failed)"', failed)) == 2

    missing = httpx.get(f"{base_url}/jobs/%3Cb%3Enope", timeout=10)
    assert missing.status_code == 404
    assert "&lt;b&gt;nope" in missing.text
    assert "<b>nope" not in missing.text


def test_static_assets_are_served(base_url: str) -> None:
    js = httpx.get(f"{base_url}/static/app.js", timeout=10)
    assert js.status_code == 200
    assert "EventSource" in js.text
    assert "innerHTML" not in js.text.replace("never innerHTML", "")
    css = httpx.get(f"{base_url}/static/style.css", timeout=10)
    assert css.status_code == 200


def test_the_schedules_page_shows_overlap_jitter_and_the_last_fires(
    base_url: str, populated: Populated
) -> None:
    html = httpx.get(f"{base_url}/schedules", timeout=10).text
    table = html[html.index('id="schedules-table"') :]
    table = table[: table.index("</table>")]
    for heading in ("Overlap", "Jitter", "Last fires"):
        assert f">{heading}</th>" in table
    assert "cron 0 0 1 1 *" in table
    assert 'data-overlap="allow"' in table
    # The schedule's one job (a manual run), linked with its status.
    assert f'href="/jobs/{populated.ids["scheduled"]}"' in table
    assert 'data-status="completed"' in table
    assert "trigger-form" not in table  # no editing without actions


def test_every_page_has_the_navigation_and_the_strict_policy(base_url: str) -> None:
    for path in PAGES:
        r = httpx.get(f"{base_url}{path}", timeout=10)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
        nav = r.text[r.text.index("<nav>") : r.text.index("</nav>")]
        for href, label, _ in dashboard.NAV:
            assert f'href="{href}"' in nav, (path, href)
            assert label in nav, (path, label)
        assert 'aria-current="page"' in nav, path
        assert "<script>" not in r.text, path  # only <script src=...>
        assert " style=" not in r.text, path


def test_workers_page_and_the_audit_page_without_a_log(base_url: str) -> None:
    workers = httpx.get(f"{base_url}/workers", timeout=10).text
    assert 'id="workers-table"' in workers
    assert 'data-state="stopped"' in workers
    assert 'id="leader"' in workers
    audit = httpx.get(f"{base_url}/audit", timeout=10)
    assert audit.status_code == 200
    assert 'id="audit-table"' in audit.text
    assert httpx.get(f"{base_url}/audit", params={"limit": "x"}, timeout=10).status_code == 400


def test_an_operator_sees_buttons_and_the_bulk_confirmations(populated: Populated) -> None:
    app = create_app(populated.path, token="tok", allow_actions=True)
    auth = {"authorization": "Bearer tok"}
    try:
        with running_server(app) as url, httpx.Client(base_url=url, headers=auth) as client:
            overview = client.get("/").text
            assert 'data-action-url="/api/queues/fast/pause"' in overview
            offer = client.get("/jobs", params={"status": "failed"}).text
            assert 'id="bulk-retry" href="/jobs?status=failed&amp;confirm=retry"' in offer
            assert "data-action-url" not in offer  # nothing posts before the confirmation
            confirm = client.get("/jobs", params={"status": "failed", "confirm": "retry"}).text
            assert "Retry 1 failed job?" in confirm
            assert 'data-action-url="/api/jobs/retry"' in confirm
            assert 'data-action-body="{&#34;status&#34;:[&#34;failed&#34;],&#34;limit&#34;:1}"' in (
                confirm
            )
            cancel = client.get("/jobs", params={"queue": "http.nobody", "confirm": "cancel"}).text
            assert "Cancel all 1 unfinished job of queue &#39;http.nobody&#39;?" in cancel
            assert 'data-action-body="{&#34;queue&#34;:&#34;http.nobody&#34;}"' in cancel
            schedules = client.get("/schedules").text
            sid = populated.schedule_id
            assert f'data-action-url="/api/schedules/{sid}/trigger"' in schedules
            assert f'data-action-url="/api/schedules/{sid}/pause"' in schedules
            assert 'name="cron" value="0 0 1 1 *"' in schedules
    finally:
        app.state.read_model.close()
