"""`mypy --strict` rejects a wrong payload type and accepts a correct program (DESIGN §2).

Both snippets are checked in one mypy run (a cold run costs seconds; a second one would
double it). Lines of the wrong snippet that must be reported end in `# E`; the test
asserts the reported lines are exactly those, so an error that goes missing and a new
false positive both fail it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PRELUDE = """\
import pydantic

import jobledger as jl


class Resize(pydantic.BaseModel):
    path: str
    width: int


class WrongModel(pydantic.BaseModel):
    name: str


RESIZE = jl.JobType("image.resize", Resize)
jobs = jl.JobManager(":memory:")
"""

WRONG = (
    PRELUDE
    + """
jobs.enqueue(RESIZE, WrongModel(name="x"))  # E
jobs.enqueue(RESIZE, {"path": "a", "width": 1})  # E
jobs.enqueue_many(RESIZE, [WrongModel(name="x")])  # E
jobs.enqueue_many(RESIZE, [jl.JobSpec(WrongModel(name="x"), priority=1)])  # E
with jobs.write_tx() as tx:
    jobs.enqueue_tx(tx, RESIZE, WrongModel(name="x"))  # E
jobs.enqueue(RESIZE, Resize(path="a", width=1), priority="high")  # E


@jobs.handler(RESIZE, recovery="retry")  # E
async def handles_the_wrong_payload(ctx: jl.JobContext[WrongModel]) -> None:
    return None


def read(ctx: jl.JobContext[Resize]) -> str:
    return ctx.payload.width  # E
"""
)

RIGHT = (
    PRELUDE
    + """
from typing import Any

@jobs.handler(RESIZE, recovery="retry", concurrency=2, timeout=30.0, queue=lambda p: p.path)
async def resize(ctx: jl.JobContext[Resize]) -> dict[str, int]:
    await ctx.report_progress(40, detail="step 2/5")
    await ctx.patch_metadata({"remote_id": "abc"})
    async with ctx.lock("vector-store:kb1"):
        return {"w": ctx.payload.width}


async def main() -> None:
    h: jl.JobHandle = jobs.enqueue(RESIZE, Resize(path="a", width=1), priority=1)
    jobs.enqueue("image.resize", {"path": "a", "width": 1})
    jobs.enqueue_many(RESIZE, [Resize(path="b", width=2), Resize(path="c", width=3)])
    jobs.enqueue_many(RESIZE, [jl.JobSpec(Resize(path="d", width=4), priority=2)])
    with jobs.write_tx() as tx:
        jobs.enqueue_tx(tx, RESIZE, Resize(path="e", width=5))
    untyped: Any = {"path": "f", "width": 6}
    jobs.enqueue(RESIZE, untyped)
    snap: jl.JobSnapshot = await h.finished
    width: int = snap.payload["width"]
    outcome = await jobs.cancel(h.id)
    if outcome == "timed-out":
        print(width)
    result: jl.CancelManyResult = jobs.cancel_many(type=RESIZE)
    print(result.aborted, jobs.count(status=["pending", "running"]))
"""
)


def test_mypy_rejects_a_wrong_payload_and_accepts_a_correct_program(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_payload.py"
    right = tmp_path / "right_payload.py"
    wrong.write_text(WRONG)
    right.write_text(RIGHT)
    env = {**os.environ, "MYPYPATH": str(REPO / "src")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(wrong),
            str(right),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    output = proc.stdout + proc.stderr
    errors = re.findall(r"^(.+?):(\d+): error: (.*)$", proc.stdout, flags=re.MULTILINE)
    assert errors, output  # mypy ran and found something (an empty run would pass below)
    by_file: dict[str, set[int]] = {}
    for path, line, _ in errors:
        by_file.setdefault(Path(path).name, set()).add(int(line))
    expected = {i for i, text in enumerate(WRONG.splitlines(), 1) if text.endswith("# E")}
    assert by_file.get(right.name, set()) == set(), output
    assert by_file.get(wrong.name) == expected, output
    # A wrong payload is named, with what was expected: not "Cannot infer value of type
    # parameter "P"", which points at neither the argument nor the types.
    assert "Cannot infer" not in output, output
    messages = {int(line): msg for path, line, msg in errors if Path(path).name == wrong.name}
    source = WRONG.splitlines()
    for line, msg in messages.items():
        text = source[line - 1]
        if "enqueue" in text and ("WrongModel(" in text or '{"path"' in text):
            assert 'incompatible type "WrongModel"' in msg or "dict[str, " in msg, (text, msg)
            assert 'expected "Resize' in msg, (text, msg)
    assert messages[min(expected)].startswith('Argument 2 to "enqueue" of "JobManager"'), output
    assert proc.returncode == 1, output
