"""Every ```python block in README.md and docs/ runs.

The blocks of one page run in order, each in a fresh process, in one temporary
directory per page (so a page can build an app in one block and import it in the
next), with a timeout. A block that defines `test_` functions is run by pytest; any
other runs as a script (`run_snippet.py`: a top-level `await` is allowed). A block that
exits non-zero fails the page.

An HTML comment on the line before a block (invisible on the rendered page) says how
it runs:

- `<!-- snippet: file NAME -->`: the block is the file NAME (`thumbs.py`): it is
  written there, then run.
- `<!-- snippet: append NAME -->`: the block is added to the end of NAME, which then runs.
- `<!-- snippet: context ... -->`: the comment's own lines (after `context`) are code
  run before every later block of the page, after the earlier contexts: the imports and
  objects a reference page takes for granted (`jobs`, a job type). Not shown, and not a
  block itself.
- `<!-- snippet: postgres -->`: the block needs PostgreSQL; every `postgresql://` URL
  in it becomes the test server's, with a fresh schema (skipped when the server is
  unreachable, as the suite's other PostgreSQL tests are).
- `<!-- snippet: needs MODULE -->`: runs only where MODULE is importable (an optional
  integration such as FastAPI that jobledger does not depend on); skipped otherwise.
- `<!-- snippet: env NAME=VALUE -->`: the block's process has this environment
  variable (a Django module run on its own needs `DJANGO_SETTINGS_MODULE`).
- `<!-- snippet: skip REASON -->`: not run, for the reason given (keep these rare).

Markers combine with `;` (`<!-- snippet: needs fastapi; file app/main.py -->`).

A signature in the reference (`jobs.enqueue(job_type, payload, *, ...) -> JobHandle`)
is notation, not a program, so it is fenced as ```text, not ```python.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.conftest import _drop_schema, _pg_unavailable, new_schema_name
from tests.conftest import postgres_url

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_snippet.py")
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TIMEOUT = 60.0

_BLOCK = re.compile(
    r"(?:<!-- snippet: (?P<marker>[^\n]*?)(?P<body>\n(?:(?!-->).)*)?-->\n)?"
    r"^```python\n(?P<code>.*?)^```",
    re.M | re.S,
)
_CONTEXT = re.compile(r"<!-- snippet: context\n(?P<code>.*?)-->", re.S)
_PG_URL = re.compile(r"postgresql://[^\"'\s]*")


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    marker: str  # "" when none
    context: str  # the page's context code in force at this block


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    contexts = [(m.start(), m["code"]) for m in _CONTEXT.finditer(text)]
    out: list[Block] = []
    for m in _BLOCK.finditer(text):
        marker = (m["marker"] or "").strip()
        if marker == "context":
            marker = ""  # a context comment right before a block is not its marker
        context = ""
        for at, code in contexts:
            if at < m.start("code"):
                context += code  # contexts accumulate down the page
        line = text.count("\n", 0, m.start("code"))
        out.append(Block(line, m["code"], marker, context))
    return out


def _cases() -> list[object]:
    cases: list[object] = []
    for page in PAGES:
        if blocks(page):
            cases.append(pytest.param(page, id=str(page.relative_to(REPO))))
    return cases


def test_the_markers_are_known_and_skips_give_a_reason() -> None:
    known = ("file ", "append ", "postgres", "needs ", "env ", "skip ")
    skips = 0
    for page in PAGES:
        for b in blocks(page):
            for m in (m.strip() for m in b.marker.split(";") if m.strip()):
                assert m.startswith(known), (page, b.line, m)
                if m.startswith("skip"):
                    assert len(m.split(maxsplit=1)) == 2, (page, b.line, "a skip needs a reason")
                    skips += 1
    assert skips <= 3, "skips are for what cannot run at all; make the block runnable"


def _run(
    page: Path, b: Block, workdir: Path, n: int, schemas: list[str]
) -> subprocess.CompletedProcess[str] | str:
    """Run one block; a str is the reason it was skipped. PostgreSQL schemas it was
    given are added to `schemas` (the caller drops them)."""
    markers = [m.strip() for m in b.marker.split(";") if m.strip()]
    code, context = b.code, b.context
    if any(m.startswith("skip") for m in markers):
        return b.marker
    for m in markers:
        if m.startswith("needs ") and importlib.util.find_spec(m.split()[1]) is None:
            return f"{m}, which is not installed"
    marker = next((m for m in markers if m.startswith(("file ", "append "))), "")
    if "postgres" in markers:
        reason = _pg_unavailable()
        if reason is not None:
            return reason
        schemas.append(new_schema_name())
        url = postgres_url(schemas[-1])
        code, context = _PG_URL.sub(url, code), _PG_URL.sub(url, context)
    if marker.startswith(("file ", "append ")):
        target = workdir / marker.split()[1]
        target.parent.mkdir(parents=True, exist_ok=True)
        if marker.startswith("file "):
            target.write_text(code, encoding="utf-8")
        else:
            assert target.exists(), f"{page}:{b.line}: append to a file no block wrote"
            target.write_text(target.read_text(encoding="utf-8") + "\n" + code, encoding="utf-8")
        script = target
    else:
        script = workdir / f"snippet_{n}_line_{b.line}.py"
        script.write_text(context + "\n" + code if context else code, encoding="utf-8")
    name = str(script.relative_to(workdir))
    if re.search(r"^def test_", code, re.M):
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
    else:
        args = [sys.executable, str(RUNNER), name]
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    env.pop("JOBLEDGER_DB", None)
    for m in markers:
        if m.startswith("env "):
            name, _, value = m.split(maxsplit=1)[1].partition("=")
            env[name] = value
    return subprocess.run(
        args, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


@pytest.mark.parametrize("page", _cases())
def test_every_python_block_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    skipped: list[str] = []
    schemas: list[str] = []
    try:
        for n, b in enumerate(blocks(page)):
            result = _run(page, b, tmp_path, n, schemas)
            where = f"{page.relative_to(REPO)}:{b.line}"
            if isinstance(result, str):
                skipped.append(f"{where}: {result}")
                continue
            assert result.returncode == 0, (
                f"{where} exited {result.returncode}\n{b.code}\n"
                f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
    finally:
        for schema in schemas:
            _drop_schema(schema)
    if skipped:
        print("not run:", *skipped, sep="\n  ")
    if skipped and len(skipped) == len(blocks(page)):
        pytest.skip("; ".join(skipped))
