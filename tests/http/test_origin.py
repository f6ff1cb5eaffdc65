"""State-changing requests: the origin rule (403 FORBIDDEN_ORIGIN) and no token from the
query string. Real uvicorn, real database; every refused request is checked to have
changed nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import jobledger as jl
from jobledger._observe.http import create_app
from tests.http.conftest import WORK, Item, running_server

TOKEN = "t0ken"
BEARER = {"authorization": f"Bearer {TOKEN}"}
COOKIE = {"cookie": f"jobledger_token={TOKEN}"}
PUBLIC = "https://jobs.example.com"


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT, the server's own origin
    job_id: str
    client: httpx.Client

    def status(self) -> str:
        status: str = self.client.get(f"/api/jobs/{self.job_id}", headers=BEARER).json()["status"]
        return status

    def cancel(self, headers: dict[str, str], query: str = "") -> httpx.Response:
        return self.client.post(f"/api/jobs/{self.job_id}/cancel{query}", headers=headers)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db)
    job_id = jobs.enqueue(WORK, Item(n=1)).id
    app = create_app(
        db, token=TOKEN, allow_actions=True, action_manager=jobs, allowed_origins=[PUBLIC]
    )
    try:
        with running_server(app) as url, httpx.Client(base_url=url, timeout=20) as client:
            yield Server(url, job_id, client)
    finally:
        asyncio.run(jobs.stop())
        app.state.read_model.close()


def _refused(response: httpx.Response, code: str) -> None:
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code, response.text


@pytest.mark.parametrize(
    "headers",
    [
        {**COOKIE, "origin": "https://evil.example"},
        {**BEARER, "origin": "https://evil.example"},
        {**COOKIE, "origin": "null"},  # a sandboxed frame or a data: URL
        {**COOKIE, "referer": "https://evil.example/page"},
        {**COOKIE},  # the cookie alone: a browser request that hides where it comes from
    ],
    ids=["cookie-evil-origin", "bearer-evil-origin", "null-origin", "evil-referer", "no-origin"],
)
def test_a_foreign_or_missing_origin_is_refused_and_changes_nothing(
    server: Server, headers: dict[str, str]
) -> None:
    response = server.cancel(headers)
    assert response.status_code == 403
    _refused(response, "FORBIDDEN_ORIGIN")
    assert server.status() == "pending"


def test_another_port_of_the_same_host_is_another_origin(server: Server) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    other = f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}"
    response = server.cancel({**COOKIE, "origin": other})
    assert response.status_code == 403
    assert server.status() == "pending"


@pytest.mark.parametrize(
    "extra",
    [
        {"origin": "own"},
        {"referer": "own/jobs/x"},
        {"origin": PUBLIC},  # allowed_origins: the proxy's public address
        {"origin": "https://JOBS.example.com:443"},  # the same origin, spelt otherwise
    ],
    ids=["own-origin", "own-referer", "allowed-origin", "normalised-origin"],
)
def test_the_own_or_an_allowed_origin_may_act(server: Server, extra: dict[str, str]) -> None:
    headers = {k: v.replace("own", server.url) for k, v in extra.items()}
    response = server.cancel({**COOKIE, **headers})
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "cancelled"
    assert server.status() == "cancelled"


def test_a_bearer_client_without_origin_may_act(server: Server) -> None:
    response = server.cancel(BEARER)  # curl, scripts: no browser, no Origin
    assert response.json() == {"id": server.job_id, "outcome": "cancelled"}


def test_the_token_is_never_read_from_the_query_string_on_post(server: Server) -> None:
    response = server.cancel({"origin": server.url}, query=f"?token={TOKEN}")
    assert response.status_code == 401
    _refused(response, "UNAUTHORIZED")
    assert "query string" in response.json()["error"]["message"]
    assert "set-cookie" not in response.headers
    assert server.status() == "pending"

    # On GET it still works once, and sets the cookie the dashboard's POSTs then use.
    page = server.client.get(f"/jobs/{server.job_id}?token={TOKEN}")
    assert page.status_code == 200
    assert f"jobledger_token={TOKEN}" in page.headers["set-cookie"]


def test_without_actions_a_post_from_anywhere_is_still_refused_by_origin(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "jobs.db")
    jobs = jl.JobManager(db)
    job_id = jobs.enqueue(WORK, Item(n=1)).id
    asyncio.run(jobs.stop())
    app = create_app(db)
    try:
        with running_server(app) as url:
            foreign = httpx.post(
                f"{url}/api/jobs/{job_id}/cancel", headers={"origin": "https://evil.example"}
            )
            assert foreign.status_code == 403
            own = httpx.post(f"{url}/api/jobs/{job_id}/cancel", headers={"origin": url})
            assert own.status_code == 404  # no such route without --allow-actions
    finally:
        app.state.read_model.close()
