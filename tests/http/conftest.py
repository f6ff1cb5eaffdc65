"""A real uvicorn server on 127.0.0.1 (a free port) in a thread, a worker manager running
in a thread of its own, and a database with jobs in every state."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic
import pytest
import uvicorn

import jobledger as jl
from jobledger._observe.http import create_app
from jobledger.cli._serve import bind, url_of
from jobledger.testing import drain

T = TypeVar("T")
WAIT = 20.0


@contextmanager
def running_server(app: Any, *, lifespan: Literal["on", "off"] = "off") -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1:<free port>; yield its base URL (no slash).
    `lifespan="on"` runs the app's lifespan (a failed startup stops the server)."""
    with running_uvicorn(app, lifespan=lifespan) as (url, _):
        yield url


@contextmanager
def running_uvicorn(
    app: Any, *, lifespan: Literal["on", "off"] = "off"
) -> Iterator[tuple[str, uvicorn.Server]]:
    """`running_server`, also yielding the server (its `server_state.tasks` are the
    requests the app is still answering)."""
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(
        app, lifespan=lifespan, log_level="warning", access_log=False, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield url_of(sock).rstrip("/"), server
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


class BackgroundWorker:
    """Runs `jobs` (started) on an event loop in a thread until `close()`."""

    def __init__(self, jobs: jl.JobManager) -> None:
        self.jobs = jobs
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(WAIT):
            raise AssertionError("the worker did not start")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with self.jobs:
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the worker's loop and return its result."""
        assert self.loop is not None
        done = threading.Event()
        box: list[Any] = []

        def go() -> None:
            try:
                box.append(fn())
            finally:
                done.set()

        self.loop.call_soon_threadsafe(go)
        if not done.wait(WAIT):
            raise AssertionError("the worker loop did not run the call")
        result: T = box[0]
        return result

    def close(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT)
        if self._error is not None:
            raise self._error


class Item(pydantic.BaseModel):
    n: int
    note: str = ""


WORK = jl.JobType("http.work", Item)
FAIL = jl.JobType("http.fail", Item)
CHILD = jl.JobType("http.child", Item)
NOBODY = jl.JobType("http.nobody", Item)


@dataclass
class Populated:
    path: str
    ids: dict[str, str]  # role -> job id
    schedule_id: str


def populate(path: str) -> Populated:
    """Jobs in every state, several queues, a child, a schedule-fired job."""
    jobs = jl.JobManager(path, startup_delay=0)

    @jobs.handler(WORK, recovery="retry", queue=lambda p: "fast" if p.n < 10 else "slow")
    async def work(ctx: jl.JobContext[Item]) -> dict[str, int]:
        await ctx.report_progress(60, "most of it")
        if ctx.payload.n == 7:
            jobs.enqueue(CHILD, Item(n=70), parent_id=ctx.job_id)
        return {"n": ctx.payload.n}

    @jobs.handler(FAIL, recovery="retry", retry=jl.RetryPolicy(max_attempts=2, base_delay=0.01))
    def fail(ctx: jl.JobContext[Item]) -> None:
        raise RuntimeError(f"failure {ctx.attempt}")

    @jobs.handler(CHILD, recovery="abandon")
    async def child(ctx: jl.JobContext[Item]) -> int:
        return ctx.payload.n

    async def main() -> Populated:
        async with jobs:
            ids = {
                "fast": jobs.enqueue(WORK, Item(n=1)).id,
                "parent": jobs.enqueue(WORK, Item(n=7, note="<script>alert(1)</script>")).id,
                "slow": jobs.enqueue(WORK, Item(n=11)).id,
                "failed": jobs.enqueue(FAIL, Item(n=2)).id,
            }
            sid = jobs.register_job_schedule(
                WORK, Item(n=3), trigger=jl.Cron("0 0 1 1 *"), name="yearly"
            )
            await jobs.trigger_job_schedule_now_by_id(sid)
            done = await drain(jobs, timeout=WAIT)
            ids["child"] = next(s.id for s in done if s.type == CHILD.name)
            ids["scheduled"] = next(s.id for s in done if s.schedule_id == sid)
            ids["cancelled"] = jobs.enqueue(NOBODY, Item(n=4)).id
            await jobs.cancel(ids["cancelled"], reason="not wanted")
            ids["delayed"] = jobs.enqueue(WORK, Item(n=5), delay=3600).id
            ids["pending"] = jobs.enqueue(NOBODY, Item(n=6)).id
            return Populated(path, ids, sid)

    return asyncio.run(main())


@pytest.fixture(scope="session")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Populated:
    return populate(str(tmp_path_factory.mktemp("http") / "jobs.db"))


@pytest.fixture(scope="session")
def base_url(populated: Populated) -> Iterator[str]:
    app = create_app(populated.path, poll_interval=0.02)
    with running_server(app) as url:
        yield url
    app.state.read_model.close()


def db_file(tmp_path: Path) -> str:
    return str(tmp_path / "jobs.db")
