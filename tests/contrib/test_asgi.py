"""`jobledger.contrib.asgi.lifespan`: managers started with a Starlette app, on its
loop, around the app's own lifespan, and stopped with it. Real Starlette apps served by
uvicorn (which runs the lifespan) in a thread, on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pydantic
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import jobledger as jl
from jobledger.contrib.asgi import lifespan
from tests.engine import make_manager
from tests.http.conftest import running_server


class Note(pydantic.BaseModel):
    text: str


NOTE = jl.JobType("asgi.note", Note)


def state(jobs: jl.JobManager) -> str:
    return jobs.state


def manager(db: str) -> jl.JobManager:
    jobs = make_manager(db)

    @jobs.handler(NOTE, recovery="retry")
    async def note(ctx: jl.JobContext[Note]) -> str:
        return ctx.payload.text.upper()

    return jobs


async def enqueue_and_wait(request: Request) -> JSONResponse:
    jobs: jl.JobManager = request.state.jobs
    done = await jobs.enqueue(NOTE, Note(text=request.query_params["text"])).finished
    return JSONResponse({"status": done.status, "output": done.output})


def test_the_manager_runs_for_the_apps_life(db: str) -> None:
    jobs = manager(db)
    app = Starlette(routes=[Route("/notes", enqueue_and_wait, methods=["POST"])],
                    lifespan=lifespan(jobs))  # fmt: skip
    assert state(jobs) == "new"
    with running_server(app, lifespan="on") as url:
        assert state(jobs) == "started"
        answer = httpx.post(url + "/notes", params={"text": "hi"}, timeout=10)
        assert answer.json() == {"status": "completed", "output": "HI"}
    assert state(jobs) == "stopped"


def test_the_apps_own_lifespan_runs_inside_the_managers(db: str) -> None:
    first, second = manager(db), make_manager(db)
    seen: list[tuple[str, str, str]] = []

    @asynccontextmanager
    async def own(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        seen.append(("up", state(first), state(second)))
        first.enqueue(NOTE, Note(text="from startup"))  # the managers run already
        yield {"jobs": first, "greeting": "hello"}
        seen.append(("down", state(first), state(second)))

    async def greet(request: Request) -> JSONResponse:
        return JSONResponse({"greeting": request.state.greeting})

    app = Starlette(routes=[Route("/", greet)], lifespan=lifespan(first, second, then=own))
    with running_server(app, lifespan="on") as url:
        assert httpx.get(url + "/", timeout=10).json() == {"greeting": "hello"}
    assert seen == [("up", "started", "started"), ("down", "started", "started")]
    assert (state(first), state(second)) == ("stopped", "stopped")


def test_a_failed_startup_stops_the_managers_started_before(tmp_path: Any) -> None:
    ok = make_manager(str(tmp_path / "ok.db"))

    started: list[str] = []

    @asynccontextmanager
    async def broken(app: Starlette) -> AsyncIterator[None]:
        started.append(state(ok))
        if started:  # always true here; a generator needs its yield
            raise RuntimeError("the app's own startup failed")
        yield

    app = Starlette(lifespan=lifespan(ok, then=broken))

    async def startup() -> None:
        # What a server does at startup: enter the app's lifespan.
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(RuntimeError, match="own startup failed"):
        asyncio.run(startup())
    assert started == ["started"]
    assert state(ok) == "stopped"  # started first, stopped on the way out


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(jl.JobError) as none:
        lifespan()
    assert none.value.code == "JOB_INVALID_OPTION"
    with pytest.raises(jl.JobError) as wrong:
        lifespan("jobs.db")  # type: ignore[arg-type]
    assert wrong.value.code == "JOB_INVALID_OPTION"
