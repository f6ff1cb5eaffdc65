"""`mypy --strict` checks a job type's result type: a handler must return it, and
`handle.result()` / `decode_output` give it back; a type without one takes any handler.

As in test_payload_types.py: both snippets are checked in one mypy run, and the lines
of the wrong snippet that must be reported end in `# E` (the reported lines must be
exactly those). Lines of the right snippet ending in `# revealed: T` hold a
`reveal_type(...)`; its note must say T (with module prefixes dropped, so
`right_result.Thumb` reads `Thumb`), and it must be the only kind of note there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PRELUDE = """\
import dataclasses
from typing import Any

import pydantic

import jobledger as jl


class Resize(pydantic.BaseModel):
    path: str


class Thumb(pydantic.BaseModel):
    url: str


@dataclasses.dataclass
class Size:
    width: int


THUMB = jl.JobType("img.thumb", Resize, result=Thumb)
MEASURE = jl.JobType("img.measure", Resize, result=Size)
COUNT = jl.JobType("img.count", Resize, result=int)
PLAIN = jl.JobType("img.plain", Resize)
jobs = jl.JobManager(":memory:")
"""

WRONG = (
    PRELUDE
    + """

@jobs.handler(THUMB, recovery="retry")  # E
async def returns_a_str(ctx: jl.JobContext[Resize]) -> str:
    return ctx.payload.path


@jobs.handler(COUNT, recovery="retry")  # E
def returns_a_thumb(ctx: jl.JobContext[Resize]) -> Thumb:
    return Thumb(url=ctx.payload.path)


@jobs.handler(MEASURE, recovery="retry", queue=lambda p: p.path)  # E
async def returns_nothing(ctx: jl.JobContext[Resize]) -> None:
    return None


class CountsInstead(jl.JobHandler[Resize, int]):
    recovery = "retry"

    def execute(self, ctx: jl.JobContext[Resize]) -> int:
        return 1


jobs.register_handler(THUMB, CountsInstead())  # E


async def main() -> None:
    h = jobs.enqueue(THUMB, Resize(path="a"))
    n: int = await h.result()  # E
    snap = jobs.get(h.id)
    assert snap is not None
    size: Size = THUMB.decode_output(snap)  # E
    print(n, size)
"""
)

RIGHT = (
    PRELUDE
    + """

@jobs.handler(THUMB, recovery="retry")
async def thumb(ctx: jl.JobContext[Resize]) -> Thumb:
    return Thumb(url=ctx.payload.path + ".webp")


@jobs.handler(MEASURE, recovery="retry", queue=lambda p: p.path)
def measure(ctx: jl.JobContext[Resize]) -> Size:
    return Size(width=len(ctx.payload.path))


class Count(jl.JobHandler[Resize, int]):
    recovery = "retry"

    async def execute(self, ctx: jl.JobContext[Resize]) -> int:
        return 1


jobs.register_handler(COUNT, Count())


# A type without a result type takes any handler, as before result types existed.
@jobs.handler(PLAIN, recovery="retry")
async def plain(ctx: jl.JobContext[Resize]) -> dict[str, int]:
    return {"n": 1}


other = jl.JobManager(":memory:")


@other.handler(PLAIN, recovery="retry")
def plain_too(ctx: jl.JobContext[Resize]) -> str:
    return "x"


@other.handler(jl.JobType("img.none", Resize), recovery="abandon")
async def returns_none(ctx: jl.JobContext[Resize]) -> None: ...


class Anything(jl.JobHandler[Resize, list[str]]):
    recovery = "retry"

    def execute(self, ctx: jl.JobContext[Resize]) -> list[str]:
        return []


other.register_handler(jl.JobType("img.anything", Resize), Anything())
old_style: jl.JobType[Resize] = PLAIN
reveal_type(THUMB)  # revealed: JobType[Resize, Thumb]
reveal_type(PLAIN)  # revealed: JobType[Resize, Any]


async def main() -> None:
    h = jobs.enqueue(THUMB, Resize(path="a"))
    reveal_type(h)  # revealed: JobHandle[Thumb]
    reveal_type(await h.result())  # revealed: Thumb
    reveal_type(await jobs.enqueue(MEASURE, Resize(path="b")).result())  # revealed: Size
    reveal_type(await jobs.enqueue(COUNT, Resize(path="c")).result())  # revealed: int
    reveal_type(jobs.enqueue_many(THUMB, [Resize(path="d")]))  # revealed: list[JobHandle[Thumb]]
    with jobs.write_tx() as tx:
        reveal_type(jobs.enqueue_tx(tx, THUMB, Resize(path="e")))  # revealed: JobHandle[Thumb]
    snap = jobs.get(h.id)
    assert snap is not None
    reveal_type(THUMB.decode_output(snap))  # revealed: Thumb
    reveal_type(snap.output)  # revealed: Any
    untyped = jobs.enqueue(PLAIN, Resize(path="f"))
    reveal_type(await untyped.result())  # revealed: Any
    reveal_type(jobs.enqueue("img.thumb", {"path": "g"}))  # revealed: JobHandle[Any]
    bare: jl.JobHandle = h
    done: jl.JobSnapshot = await bare.finished
    thumb_value: Thumb = await h.result()
    print(done.output, thumb_value.url)
"""
)


def test_mypy_checks_result_types(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_result.py"
    right = tmp_path / "right_result.py"
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
    found = re.findall(r"^(.+?):(\d+): (error|note): (.*)$", proc.stdout, flags=re.MULTILINE)
    errors = [(Path(p).name, int(n), msg) for p, n, kind, msg in found if kind == "error"]
    notes = [(Path(p).name, int(n), msg) for p, n, kind, msg in found if kind == "note"]
    assert errors, output  # mypy ran and found something (an empty run would pass below)

    assert [e for e in errors if e[0] == right.name] == [], output
    expected = {i for i, text in enumerate(WRONG.splitlines(), 1) if text.endswith("# E")}
    assert {n for name, n, _ in errors if name == wrong.name} == expected, output

    # A handler returning the wrong type is named, with the type it had to return.
    messages = {n: msg for name, n, msg in errors if name == wrong.name}
    source = WRONG.splitlines()
    for line, msg in messages.items():
        text = source[line - 1]
        if text.startswith("@jobs.handler(THUMB"):
            assert '"Callable[[JobContext[Resize]], Coroutine[Any, Any, str]]"' in msg, msg
            assert 'expected "Callable[[JobContext[Resize]], Awaitable[Thumb] | Thumb]"' in msg
        elif text.startswith("@jobs.handler(COUNT"):
            assert '"Callable[[JobContext[Resize]], Thumb]"' in msg, msg
            assert 'expected "Callable[[JobContext[Resize]], Awaitable[int] | int]"' in msg
        elif text.startswith("@jobs.handler(MEASURE"):
            assert "Coroutine[Any, Any, None]" in msg, msg
            assert "Awaitable[Size] | Size" in msg, msg
        elif "register_handler" in text:
            assert '"CountsInstead"; expected "JobHandler[Resize, Thumb]' in msg, msg
        elif "h.result()" in text:
            assert '(expression has type "Thumb", variable has type "int")' in msg, msg
        elif "decode_output" in text:
            assert '(expression has type "Thumb", variable has type "Size")' in msg, msg

    # Every reveal_type says what its line expects, and there is nothing else to note.
    revealed = {
        n: re.sub(r"\b\w+\.", "", msg.removeprefix("Revealed type is ").strip('"'))
        for name, n, msg in notes
        if name == right.name
    }
    marked = {
        i: text.split("# revealed: ")[1]
        for i, text in enumerate(RIGHT.splitlines(), 1)
        if "# revealed: " in text
    }
    assert revealed == marked, output
    assert proc.returncode == 1, output
