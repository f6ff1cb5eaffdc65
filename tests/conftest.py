"""Fixtures and helpers shared by the whole suite (kept small; other packages import it).

No pytest-asyncio: an async test is a sync test function that calls `run(main())`, which
is `asyncio.run` with a hard timeout, so a hung engine fails the test instead of the run.
Waiting is done on conditions (`wait_until`), never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["RUN_TIMEOUT", "run", "wait_until"]

T = TypeVar("T")

RUN_TIMEOUT = 30.0


def run(coro: Coroutine[Any, Any, T], timeout: float = RUN_TIMEOUT) -> T:
    """`asyncio.run(coro)`, failing with TimeoutError after `timeout` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float = 10.0,
    step: float = 0.005,
    what: str = "a condition",
) -> None:
    """Poll `predicate` every `step` seconds (real time) until it is truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """A fresh SQLite file path (the file itself is created by whoever opens it)."""
    return str(tmp_path / "jobs.db")
