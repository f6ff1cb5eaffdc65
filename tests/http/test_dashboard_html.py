"""The server-rendered dashboard: content, escaping, filters (the browser tests do the JS)."""

from __future__ import annotations

import httpx

from tests.http.conftest import Populated


def test_overview_lists_queues_jobs_schedules_and_workers(
    base_url: str, populated: Populated
) -> None:
    page = httpx.get(f"{base_url}/", timeout=10)
    assert page.status_code == 200
    html = page.text
    for job_id in populated.ids.values():
        assert f'href="/jobs/{job_id}"' in html
    assert 'id="queues-table"' in html
    assert 'data-queue="fast"' in html
    assert "cron 0 0 1 1 *" in html
    assert 'id="workers-table"' in html
    assert "<script>alert" not in html  # payloads are not on the overview, and never raw

    failed = httpx.get(f"{base_url}/", params={"status": "failed"}, timeout=10).text
    assert populated.ids["failed"] in failed
    assert populated.ids["fast"] not in failed
    bad = httpx.get(f"{base_url}/", params={"limit": "0"}, timeout=10)
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

    failed = httpx.get(f"{base_url}/jobs/{populated.ids['failed']}", timeout=10).text
    assert "JOB_HANDLER_THREW" in failed
    assert 'id="error-section" hidden' not in failed

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


def test_the_schedules_table_shows_overlap_jitter_and_the_last_fires(
    base_url: str, populated: Populated
) -> None:
    html = httpx.get(f"{base_url}/", timeout=10).text
    table = html[html.index('id="schedules-table"') :]
    table = table[: table.index("</table>")]
    for heading in ("Overlap", "Jitter", "Last fires"):
        assert f">{heading}</th>" in table
    assert 'data-overlap="allow"' in table
    # The schedule's one job (a manual run), linked with its status.
    assert f'href="/jobs/{populated.ids["scheduled"]}"' in table
    assert 'data-status="completed"' in table
