"""Start and stop job managers with an ASGI app: `lifespan(jobs)` for Starlette and
FastAPI (`Starlette(lifespan=...)`, `FastAPI(lifespan=...)`).

Invariants:

* At startup the managers start in the order given, on the server's event loop, before
  the app's own lifespan (`then=`) runs, so that code may enqueue and await handles;
  at shutdown the app's lifespan ends first, then the managers stop in reverse order
  (each `stop()` drains as `async with jobs` does: `shutdown_grace`, then the token).
* A manager that fails to start stops the ones started before it, and the error reaches
  the server (which then refuses to serve), as any lifespan error does.
* What `then=` yields (Starlette's lifespan state) is what the app's lifespan state is;
  without `then=`, the state is `{"jobs": <the first manager>}` so a request reaches it
  as `request.state.jobs`.
* Nothing here imports Starlette: any framework calling `lifespan(app)` and entering
  the returned async context manager works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from jobledger._runtime.manager import JobManager
from jobledger.errors import JobValidationError

__all__ = ["lifespan"]

App = TypeVar("App")


def lifespan(
    *managers: JobManager,
    then: Callable[[App], AbstractAsyncContextManager[Any]] | None = None,
) -> Callable[[App], AbstractAsyncContextManager[Any]]:
    """A lifespan that runs `managers` for the app's life, around `then` (your own
    lifespan, if any)."""
    if not managers or not all(isinstance(m, JobManager) for m in managers):
        raise JobValidationError(
            "lifespan() takes one or more JobManager instances",
            code="JOB_INVALID_OPTION",
            params={"managers": [type(m).__name__ for m in managers]},
        )
    if then is not None and not callable(then):
        raise JobValidationError(
            "then= takes a lifespan: a function of the app that returns an async context manager",
            code="JOB_INVALID_OPTION",
        )

    @asynccontextmanager
    async def run(app: App) -> AsyncIterator[Any]:
        async with AsyncExitStack() as stack:
            for manager in managers:
                await stack.enter_async_context(manager)
            if then is None:
                yield {"jobs": managers[0]}
            else:
                state = await stack.enter_async_context(then(app))
                yield state

    return run
