"""The console's job search (DESIGN §8.9): `jobs.list(search=...)`, `jobs.count` and
`GET /api/jobs?q=` on an id or id prefix, `payload.FIELD:VALUE`, `metadata.FIELD:VALUE`
and an error code. Both backends (`db`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import jobledger as jl
from jobledger._observe.http import create_app
from tests.conftest import run
from tests.engine import make_manager
from tests.http.conftest import running_server

ORDER = jl.JobType("search.order", dict)
CHARGE = jl.JobType("search.charge", dict)


def seeded(db: str) -> tuple[jl.JobManager, dict[str, str]]:
    jobs = make_manager(db)

    @jobs.handler(CHARGE, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def charge(ctx: jl.JobContext[dict[str, Any]]) -> None:
        raise jl.PermanentError("declined", code="CARD_DECLINED")

    ids = {
        "ada": jobs.enqueue(ORDER, {"user": {"id": 7}, "name": "ada", "vip": True},
                            metadata={"tenant": "acme"}).id,
        "bob": jobs.enqueue(ORDER, {"user": {"id": 8}, "name": "bob", "vip": False},
                            metadata={"tenant": "umbrella"}).id,
        "str7": jobs.enqueue(ORDER, {"user": {"id": "7"}, "name": "eve"}).id,
    }  # fmt: skip

    async def fail_one() -> str:
        async with jobs:
            done = await jobs.enqueue(CHARGE, {"card": "4242"}).finished
            assert done.status == jl.JobStatus.FAILED
            return done.id

    ids["declined"] = run(fail_one())
    return jobs, ids


def found(jobs: jl.JobManager, q: str) -> set[str]:
    got = {s.id for s in jobs.list(search=q)}
    assert jobs.count(search=q) == len(got)
    return got


def test_each_form_finds_its_jobs(db: str) -> None:
    jobs, ids = seeded(db)
    assert found(jobs, "payload.name:ada") == {ids["ada"]}
    # Compared as text: the number 7 and the string "7" both match.
    assert found(jobs, "payload.user.id:7") == {ids["ada"], ids["str7"]}
    assert found(jobs, "payload.vip:true") == {ids["ada"]}
    assert found(jobs, "payload.vip:false") == {ids["bob"]}
    assert found(jobs, "payload.missing:x") == set()
    assert found(jobs, "metadata.tenant:acme") == {ids["ada"]}
    assert found(jobs, "CARD_DECLINED") == {ids["declined"]}
    assert found(jobs, "JOB_HANDLER_TIMEOUT") == set()
    assert found(jobs, ids["bob"]) == {ids["bob"]}
    prefix = ids["bob"][:8]
    assert ids["bob"] in found(jobs, prefix)
    assert found(jobs, "zzzz") == set()
    # LIKE's wildcards are the term's own characters, not patterns.
    assert found(jobs, "%%%%") == set()
    assert found(jobs, ids["bob"][:7] + "_") == set()
    # Beside the other filters.
    assert {s.id for s in jobs.list(search="payload.user.id:7", status="pending")} == {
        ids["ada"],
        ids["str7"],
    }


@pytest.mark.parametrize(
    "q", ["payload.:x", "payload.name", "abc", "payload.a b:1", "x\x00yyy", ""]
)
def test_a_bad_search_is_refused(db: str, q: str) -> None:
    jobs = make_manager(db)
    with pytest.raises(jl.JobError) as err:
        jobs.list(search=q)
    assert err.value.code == "JOB_INVALID_OPTION"


def test_the_api_and_the_dashboard_search(db: str) -> None:
    _, ids = seeded(db)
    app = create_app(db)
    try:
        with running_server(app) as url:
            body = httpx.get(f"{url}/api/jobs", params={"q": "payload.name:bob"}, timeout=10).json()
            assert [j["id"] for j in body["items"]] == [ids["bob"]]
            bad = httpx.get(f"{url}/api/jobs", params={"q": "payload.:x"}, timeout=10)
            assert bad.status_code == 400
            assert bad.json()["error"]["code"] == "INVALID_QUERY"
            page = httpx.get(f"{url}/jobs", params={"q": "CARD_DECLINED"}, timeout=10).text
            assert ids["declined"] in page
            assert ids["ada"] not in page
            assert 'value="CARD_DECLINED"' in page
    finally:
        app.state.read_model.close()
