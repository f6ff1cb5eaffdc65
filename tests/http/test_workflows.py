"""`GET /api/workflows`, `GET /api/workflows/{id}` and the dashboard's workflow pages,
against a real uvicorn server over a database with finished workflows."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis

from jobledger._observe import dashboard
from jobledger._observe.http import create_app
from jobledger._observe.openapi import openapi_schema
from tests.http.conftest import running_server
from tests.http.workflows import Workflows, build


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Workflows:
    return build(str(tmp_path_factory.mktemp("wf") / "jobs.db"), diamond_name="<b>dia</b>")


@pytest.fixture(scope="module")
def url(made: Workflows) -> Iterator[str]:
    app = create_app(made.path)
    with running_server(app) as base:
        yield base
    app.state.read_model.close()


def _get(url: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(url + path, params=params, timeout=10)


def test_the_list_pages_newest_first_with_counts(url: str, made: Workflows) -> None:
    body = _get(url, "/api/workflows").json()
    assert (body["total"], body["limit"], body["offset"]) == (2, 50, 0)
    fan, diamond = body["items"]
    assert (fan["id"], diamond["id"]) == (made.fan, made.diamond)
    assert (fan["name"], fan["status"], fan["total"]) == ("fan", "completed", 13)
    assert diamond["status"] == "failed"
    assert {k: n for k, n in diamond["counts"].items() if n} == {
        "completed": 4,
        "failed": 1,
        "cancelled": 1,
    }
    second = _get(url, "/api/workflows", limit=1, offset=1).json()
    assert [w["id"] for w in second["items"]] == [made.diamond]
    named = _get(url, "/api/workflows", name="fan").json()
    assert (named["total"], [w["id"] for w in named["items"]]) == (1, [made.fan])


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "x"}, {"offset": "-1"}])
def test_invalid_list_queries_get_400(url: str, params: dict[str, str]) -> None:
    r = _get(url, "/api/workflows", **params)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "INVALID_QUERY"


def test_one_workflow_with_its_jobs_edges_and_steps(url: str, made: Workflows) -> None:
    r = _get(url, f"/api/workflows/{made.diamond}")
    assert r.status_code == 200
    body = r.json()
    assert (body["id"], body["name"], body["status"]) == (made.diamond, "<b>dia</b>", "failed")
    assert [j["step"] for j in body["jobs"]] == ["top", "left", "right", "right", "right", "join"]
    assert {j["status"] for j in body["jobs"] if j["step"] == "join"} == {"cancelled"}
    top = made.steps["top"][0]
    assert {(e["upstream_id"], e["job_id"]) for e in body["edges"] if e["upstream_id"] == top} == {
        (top, j) for j in made.steps["left"] + made.steps["right"]
    }
    assert len(body["edges"]) == 1 + 3 + 1 + 3
    steps = {s["key"]: s for s in body["steps"]}
    assert list(steps) == ["top", "left", "right", "join"]
    assert steps["right"]["jobs"] == 3
    assert steps["right"]["counts"]["completed"] == 3
    assert steps["right"]["job_ids"] == made.steps["right"]
    assert steps["left"]["status"] == "failed"
    assert steps["join"]["status"] == "cancelled"
    assert steps["join"]["upstream"] == ["left", "right"]
    assert steps["top"]["upstream"] == []
    assert not any(s["outside"] for s in steps.values())


def test_an_unknown_workflow_is_a_404_in_the_api_and_on_the_page(url: str) -> None:
    r = _get(url, "/api/workflows/nope")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "JOB_WORKFLOW_NOT_FOUND"
    page = _get(url, "/workflows/nope")
    assert page.status_code == 404
    assert "No such workflow" in page.text


def test_jobs_filter_by_workflow(url: str, made: Workflows) -> None:
    body = _get(url, "/api/jobs", workflow_id=made.fan).json()
    assert body["total"] == 13
    assert {j["workflow_id"] for j in body["items"]} == {made.fan}


def test_the_pages_list_workflows_and_carry_the_graph(url: str, made: Workflows) -> None:
    listing = _get(url, "/workflows")
    assert listing.status_code == 200
    assert f'href="/workflows/{made.diamond}"' in listing.text
    # Names are user data: escaped on the page.
    assert "&lt;b&gt;dia&lt;/b&gt;" in listing.text
    assert "<b>dia</b>" not in listing.text
    page = _get(url, f"/workflows/{made.diamond}")
    assert page.status_code == 200
    assert 'id="workflow-graph"' in page.text
    assert "/static/vendor/dagre.min.js" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    vendor = _get(url, "/static/vendor/dagre.min.js")
    assert vendor.status_code == 200
    assert "dagre" in vendor.text[:2000]


@pytest.mark.parametrize(
    ("route", "path"),
    [
        ("/api/workflows", "/api/workflows"),
        ("/api/workflows/{workflow_id}", "/api/workflows/{diamond}"),
        ("/api/workflows/{workflow_id}", "/api/workflows/{fan}"),
        ("/api/workflows/{workflow_id}", "/api/workflows/nope"),
    ],
)
def test_answers_match_the_openapi_schema(url: str, made: Workflows, route: str, path: str) -> None:
    # The fuzz test's database has no workflow: a found one's answer is checked here.
    schema = schemathesis.openapi.from_dict(openapi_schema())
    r = _get(url, path.format(diamond=made.diamond, fan=made.fan))
    schema[route]["GET"].validate_response(r)


def test_the_routes_are_in_the_openapi_schema() -> None:
    paths = openapi_schema()["paths"]
    assert "get" in paths["/api/workflows"]
    assert "get" in paths["/api/workflows/{workflow_id}"]
    names = {p["name"] for p in paths["/api/jobs"]["get"]["parameters"]}
    assert "workflow_id" in names


def test_the_vendored_layout_library_is_the_published_file_with_its_licence() -> None:
    vendor = Path(dashboard.__file__).parent / "static" / "vendor"
    readme = (vendor / "README.md").read_text()
    digest = hashlib.sha256((vendor / "dagre.min.js").read_bytes()).hexdigest()
    assert f"sha256 `{digest}`" in readme
    assert "Permission is hereby granted" in (vendor / "dagre.LICENSE").read_text()
