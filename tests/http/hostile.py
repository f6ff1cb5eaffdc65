"""A database of hostile and far-future rows, for the HTTP fuzz and conformance tests.

What the public API accepts is written through it: markup and odd unicode (bidi
overrides, zero-width and astral characters) in payloads, outputs, errors, tracebacks,
log lines, metadata, progress details and workflow names, C0 controls inside payload
strings, a payload close to `MAX_PAYLOAD_BYTES`, JSON nested `DEPTH` deep, run_at at the
last millisecond of year 9999, queue names holding "/". What it refuses is then written
with plain SQL into the same real database (SQLite file or PostgreSQL schema), as another
release or a careless script could: ids shaped like paths (`../x`, `a/b`, `%2F`, ...),
control characters in names and ids, priorities at the ends of a signed 64-bit column,
queues named `a/b/pause`, schedules, workers and a leader lease with markup and
year-9999 times. No NUL anywhere (neither backend stores one in text).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jobledger as jl
from jobledger._core.limits import MAX_MS
from jobledger._core.registry import MAX_PAYLOAD_BYTES
from jobledger.testing import drain
from tests.conftest import db_reader, is_postgres

__all__ = ["DEPTH", "HOSTILE_IDS", "RAW_DEPTH", "SCRIPT", "Hostile", "build_hostile"]

SCRIPT = "<script>alert('x')</script>"
# Bidi overrides, zero-width, BOM, astral (Fraktur, emoji), a combining accent, U+FFFF.
ODD = (
    "\u202eevil\u202c \u200b\ufeff \U0001d518\U0001d52b\U0001d526 \U0001f600 \u0800 "
    "e\u0301 \uffff \u4e2d"
)
CONTROLS = "".join(chr(c) for c in range(1, 32)) + "\x7f\x85"
TEXT = f"{SCRIPT} {ODD} {CONTROLS}"
NAME = f"{SCRIPT} {ODD}"  # names refuse control characters through the API
# pydantic's JSON parser stops at 200 levels, so a handler decodes no deeper payload
# (an enqueue accepts ~250: reported). Rows written with SQL nest RAW_DEPTH deep.
DEPTH = 150
RAW_DEPTH = 5000
HOSTILE_IDS = ("../x", "a/b", "%2F", "x/attempts", "..", ".", "a%2Fb", "<b>id</b>", "\x01\u202e")
TOP_PRIORITY = 2**63 - 1
HOSTILE_QUEUES = ("a/b/pause", "../up", "q\u202e\x01")

ANY = jl.JobType("hostile.any", dict)
BOOM = jl.JobType("hostile.boom", dict)
IDLE = jl.JobType("hostile.idle", dict)


def _nested(depth: int) -> Any:
    value: Any = TEXT
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _payload() -> dict[str, Any]:
    return {"text": TEXT, "deep": _nested(DEPTH), "n": -(2**62), "f": 1e308, "e": ""}


@dataclass
class Hostile:
    db: str
    ids: dict[str, str]  # role -> job id (the raw ids of HOSTILE_IDS under "raw:<id>")
    schedule_id: str
    workflow_id: str


def build_hostile(db: str) -> Hostile:
    """The rows described above in `db`."""
    jobs = jl.JobManager(db, startup_delay=0)

    @jobs.handler(ANY, recovery="retry", queue="tenant/7")
    async def any_(ctx: jl.JobContext[dict[str, Any]]) -> Any:
        ctx.logger.info("%s", TEXT)
        await ctx.report_progress(99.5, TEXT)
        return {"echo": ctx.payload.get("text"), "deep": _nested(DEPTH)}

    @jobs.handler(BOOM, recovery="retry", retry=jl.RetryPolicy(max_attempts=1))
    async def boom(ctx: jl.JobContext[dict[str, Any]]) -> None:
        ctx.logger.error("%s", TEXT)
        raise RuntimeError(TEXT)

    far = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)

    async def main() -> Hostile:
        async with jobs:
            ids = {
                "done": jobs.enqueue(ANY, _payload(), metadata={NAME: TEXT}).id,
                "failed": jobs.enqueue(BOOM, {"text": TEXT}).id,
                # Close to the bound, and still under it once encoded.
                "huge": jobs.enqueue(IDLE, {"big": "\u00e9" * (MAX_PAYLOAD_BYTES // 2 - 64)}).id,
                "far": jobs.enqueue(IDLE, {"text": TEXT}, run_at=far, priority=2**62).id,
                "low": jobs.enqueue(IDLE, {}, priority=-(2**62), queue="a/b", run_at=far).id,
            }
            sid = jobs.register_job_schedule(
                ANY, _payload(), trigger=jl.Cron("59 23 31 12 *"), name=NAME, metadata={NAME: TEXT}
            )
            wf = jobs.workflow(NAME)
            first = wf.add(ANY, {"text": TEXT}, name=NAME)
            wf.add(BOOM, {}, name=f"{NAME} 2", after=[first])
            flow = wf.enqueue()
            await drain(jobs, timeout=20)
            return Hostile(db, ids, sid, flow.id)

    made = asyncio.run(main())
    _raw_rows(made)
    return made


def _raw_rows(made: Hostile) -> None:
    """What the public API refuses, written with SQL (the `?` placeholders of
    `tests.conftest.sql_for`), JSON columns that do not parse included: a payload nested
    past every parser's limit, and text that is not JSON. A console search on payload or
    metadata matches neither (`tests/http/test_hostile_rows.py`)."""
    pg = is_postgres(made.db)
    with db_reader(made.db) as run:
        if pg:
            columns = [
                str(r[0])
                for r in run(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs'"
                    " AND table_schema = current_schema() ORDER BY ordinal_position"
                )
            ]
        else:
            columns = [str(r[1]) for r in run("PRAGMA table_info(jobs)")]
        rest = ", ".join(c for c in columns if c != "id")
        for n, job_id in enumerate(HOSTILE_IDS, start=1):
            if pg:
                run(
                    f"INSERT INTO jobs (id, {rest}) SELECT ?, {rest} FROM jobs WHERE id = ?",
                    (job_id, made.ids["done"]),
                )
            else:
                # A negative rowid is the key of an id from before schema 4 (a legacy id).
                run(
                    f"INSERT INTO jobs (rowid, id, {rest}) SELECT ?, ?, {rest} FROM jobs "
                    "WHERE id = ?",
                    (-n, job_id, made.ids["done"]),
                )
            made.ids[f"raw:{job_id}"] = job_id
        for job_id, priority, queue in zip(
            HOSTILE_IDS, (TOP_PRIORITY, -TOP_PRIORITY, 0), HOSTILE_QUEUES, strict=False
        ):
            run(
                "UPDATE jobs SET priority = ?, queue = ?, type = ?, idempotency_key = ?, "
                "worker_id = ?, progress_detail = ?, scheduled_at = ?, updated_at = ? "
                "WHERE id = ?",
                (priority, queue, f"t{CONTROLS}", TEXT, TEXT, TEXT, MAX_MS, MAX_MS, job_id),
            )
        run(
            "UPDATE job_schedules SET next_run = ?, last_run = ?, type = ? WHERE id = ?",
            (MAX_MS, MAX_MS, f"t{CONTROLS}", made.schedule_id),
        )
        run(
            "INSERT INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (TEXT, TEXT, 2**62, '["' + SCRIPT + '", "a/b"]', MAX_MS, MAX_MS),
        )
        run("UPDATE workflows SET name = ? WHERE id = ?", (TEXT, made.workflow_id))
        # Beyond json.loads' recursion, and not JSON at all: shown as their text.
        deep = "[" * RAW_DEPTH + "]" * RAW_DEPTH
        run(
            "UPDATE jobs SET payload = ?, output = ?, metadata = ? WHERE id = ?",
            (deep, "{not json", deep, HOSTILE_IDS[3]),
        )
        run(
            "UPDATE jobs SET payload = ?, metadata = ?, error = ? WHERE id = ?",
            ("{not json", "[1, 2]", deep, HOSTILE_IDS[4]),
        )
        run(
            "UPDATE job_schedules SET payload = ?, metadata = ?, trigger = ? WHERE id = ?",
            (deep, deep, '{"kind": "' + SCRIPT + '"}', made.schedule_id),
        )
