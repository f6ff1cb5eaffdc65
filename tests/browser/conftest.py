"""Playwright driving Debian's Chromium (headless). Without /usr/bin/chromium the browser
tests skip, except in CI (`CI=true`), where a missing browser is a failure."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _require_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing in CI (apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


# What Chromium logs for a fetch answered 4xx: a refused action the page then shows.
_REFUSED = re.compile(
    r"Failed to load resource: the server responded with a status of 4\d\d \([A-Za-z ]+\)"
)


def _page(browser: Any, *, refusals_expected: bool) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield pg
    finally:
        context.close()
    if refusals_expected:
        errors = [e for e in errors if not _REFUSED.fullmatch(e)]
    assert errors == [], f"errors in the page: {errors}"


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; any script error or console error fails the test."""
    yield from _page(browser, refusals_expected=False)


@pytest.fixture
def refusing_page(browser: Any) -> Iterator[Any]:
    """`page` for a test that makes the server refuse an action on purpose: the console
    line for a 4xx answer is expected there, any other error still fails the test."""
    yield from _page(browser, refusals_expected=True)
