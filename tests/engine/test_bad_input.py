"""Bad input that used to get in and break later reads, or escape as a raw exception
(DESIGN §8.12): every case is a `JobError` with its stable code, and the table holds
exactly what it held before.

Each entry point sees the same bad options: `enqueue`, `enqueue_many` (where the entry's
code is in `params["entries"]`), a `JobSpec` of its own, and `enqueue_tx`.
"""

from __future__ import annotations

import asyncio
import math
import sys
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest
import typing_extensions

import jobledger as jl
from jobledger.clock import to_ms
from tests.conftest import db_rows, run
from tests.engine import ITEM, Item, make_manager

LOOSE = jl.JobType("test.loose", dict[str, Any])
ANY = jl.JobType("test.any", Any)
ROWS = jl.JobType("test.rows", list[dict[Any, Any]])
END_OF_9999 = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


class Reading(pydantic.BaseModel):
    value: float
    tags: dict[str, int] = {}


READING = jl.JobType("test.reading", Reading)

# (code, options) that every enqueue form must refuse.
BAD_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("JOB_INVALID_OPTION", {"delay": 1e12}),
    ("JOB_INVALID_OPTION", {"delay": timedelta.max}),
    ("JOB_INVALID_OPTION", {"delay": 10**400}),
    ("JOB_INVALID_OPTION", {"run_at": datetime.max}),
    ("JOB_INVALID_OPTION", {"run_at": END_OF_9999}),
    ("JOB_INVALID_OPTION", {"run_at": datetime.min.replace(tzinfo=UTC)}),
    ("JOB_INVALID_OPTION", {"run_at": datetime(1969, 12, 31, 23, 59, tzinfo=UTC)}),
    ("JOB_INVALID_OPTION", {"queue": "a\x00b"}),
    ("JOB_INVALID_OPTION", {"queue": "line\nbreak"}),
    ("JOB_INVALID_OPTION", {"queue": "\ud800"}),
    ("JOB_INVALID_IDEMPOTENCY_KEY", {"idempotency_key": "k\x00"}),
    ("JOB_INVALID_IDEMPOTENCY_KEY", {"idempotency_key": "k\x1b[0m"}),
    ("JOB_INVALID_IDEMPOTENCY_KEY", {"idempotency_key": "\ud800"}),
    ("JOB_INVALID_MAX_ATTEMPTS", {"max_attempts": 2**63}),
    ("JOB_INVALID_TIMEOUT", {"timeout": 1e300}),
    ("JOB_INVALID_TIMEOUT", {"timeout": 10**400}),
    ("JOB_INVALID_OPTION", {"priority": 2**63}),
    ("JOB_INVALID_OPTION", {"metadata": {"a": "\ud800"}}),
    ("JOB_INVALID_OPTION", {"metadata": {"\ud800": 1}}),
    ("JOB_INVALID_OPTION", {"metadata": {1: "a", "1": "b"}}),
    ("JOB_INVALID_OPTION", {"metadata": {"nested": {None: 1, "null": 2}}}),
    ("JOB_INVALID_OPTION", {"metadata": {"big": "x" * (64 * 1024)}}),
    ("JOB_INVALID_OPTION", {"metadata": {"x": [math.inf]}}),
]
SPEC_FIELDS = {"idempotency_key", "priority", "run_at", "delay", "metadata"}

# (code, job type, payload)
BAD_PAYLOADS: list[tuple[str, jl.JobType[Any], Any]] = [
    ("JOB_PAYLOAD_INVALID", LOOSE, {"a": math.nan}),
    ("JOB_PAYLOAD_INVALID", LOOSE, {"a": [1.0, -math.inf]}),
    ("JOB_PAYLOAD_INVALID", LOOSE, {"a": {"b": (math.inf,)}}),
    ("JOB_PAYLOAD_INVALID", LOOSE, {"a": {1: "a", "1": "b"}}),
    ("JOB_PAYLOAD_INVALID", ANY, {1: "a", "1": "b"}),
    ("JOB_PAYLOAD_INVALID", ANY, {None: "a", "None": "b"}),
    ("JOB_PAYLOAD_INVALID", ROWS, [{"k": 1}, {2: "a", "2": "b"}]),
    ("JOB_PAYLOAD_INVALID", LOOSE, {"\ud800": 1}),
    ("JOB_PAYLOAD_INVALID", LOOSE, {"a": "\udfff"}),
    ("JOB_PAYLOAD_INVALID", READING, {"value": math.nan}),
    ("JOB_PAYLOAD_INVALID", READING, Reading(value=math.inf)),
    ("JOB_PAYLOAD_INVALID", READING, {"value": 1.0, "tags": {"\ud800": 1}}),
]


def rejected(fn: Callable[..., object], *args: Any, **kwargs: Any) -> jl.JobError:
    """The JobError `fn(*args, **kwargs)` raises (any other exception fails the test as
    it escapes); a coroutine it returns is run."""

    def call() -> None:
        result = fn(*args, **kwargs)
        if asyncio.iscoroutine(result):
            run(result)

    with pytest.raises(jl.JobError) as info:
        call()
    return info.value


def table(db: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in db_rows(db, "SELECT * FROM jobs"))


def test_bad_options_are_refused_by_every_enqueue_form(db: str) -> None:
    jobs = make_manager(db)
    jobs.enqueue(ITEM, Item(n=1), metadata={"keep": True})
    before = table(db)
    for code, options in BAD_OPTIONS:
        assert rejected(jobs.enqueue, ITEM, Item(), **options).code == code, options
        err = rejected(jobs.enqueue_many, ITEM, [Item(), Item()], **options)
        assert err.code == "JOB_BATCH_INVALID", options
        assert [e["code"] for e in err.params["entries"]] == [code, code], options
        if set(options) <= SPEC_FIELDS:
            spec = jl.JobSpec(Item(), **options)
            err = rejected(jobs.enqueue_many, ITEM, [Item(), spec])
            assert [(e["index"], e["code"]) for e in err.params["entries"]] == [(1, code)]
        with jobs.write_tx() as tx:
            assert rejected(jobs.enqueue_tx, tx, ITEM, Item(), **options).code == code
    assert table(db) == before
    # What was refused never reached a row, so every read still works.
    assert len(jobs.list()) == jobs.count() == 1
    run(jobs.stop())


def test_bad_payloads_are_refused_not_stored_as_null(db: str) -> None:
    jobs = make_manager(db)
    jobs.enqueue(LOOSE, {"fine": 1.5, "none": None, "text": "NaN Infinity \ufffd"})
    before = table(db)
    for code, job_type, payload in BAD_PAYLOADS:
        assert rejected(jobs.enqueue, job_type, payload).code == code, payload
        err = rejected(jobs.enqueue_many, job_type, [payload])
        assert err.params["entries"][0]["code"] == code, payload
    assert table(db) == before
    run(jobs.stop())


def test_payloads_near_the_checks_still_go_in(db: str) -> None:
    jobs = make_manager(db)
    fine: list[tuple[jl.JobType[Any], Any]] = [
        (LOOSE, {"a": None, "b": [None, 1.5e308], "c": {"1": "x", "2": "y"}}),
        (LOOSE, {"text": "a\\ud800 is only text here", "emoji": "\U0001f600"}),
        (READING, Reading(value=-0.0, tags={"\ufffd": 1})),
    ]
    for job_type, payload in fine:
        jobs.enqueue(job_type, payload)
    int_keys: Any = {1: "int keys alone do not collide", "n": None}
    jobs.enqueue(ITEM, Item(), metadata=int_keys)
    jobs.enqueue(ITEM, Item(), run_at=datetime(1970, 1, 1, tzinfo=UTC), max_attempts=2**62)
    jobs.enqueue(ITEM, Item(), run_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))
    jobs.enqueue(ITEM, Item(), idempotency_key="ünïcode ✓", queue="q-ü", timeout=3600 * 24)
    assert len(jobs.list()) == jobs.count() == 7
    run(jobs.stop())


def test_control_characters_and_surrogates_in_type_names() -> None:
    for name in ("a\x00", "tab\there", "\x7f", "\x85", "\ud800"):
        with pytest.raises(jl.HandlerRegistrationError) as info:
            jl.JobType(name, Item)
        assert info.value.code == "JOB_HANDLER_INVALID"


def test_lookups_of_ids_that_are_not_strings_or_cannot_exist(db: str) -> None:
    jobs = make_manager(db)
    handle = jobs.enqueue(ITEM, Item())
    odd: Any = 5
    assert rejected(lambda: jobs.get(odd)).code == "JOB_INVALID_OPTION"
    assert rejected(jobs.cancel, odd).code == "JOB_INVALID_OPTION"
    assert jobs.get("\ud800") is None
    assert run(jobs.cancel("\ud800")) == "not-cancellable"
    for reason in ("\ud800", 7):
        assert rejected(jobs.cancel, handle.id, reason).code == "JOB_INVALID_OPTION"
        err = rejected(jobs.cancel_many, queue="test.item", reason=reason)
        assert err.code == "JOB_INVALID_OPTION"
    for filters in ({"queue": "\ud800"}, {"type": 5}, {"parent_id": "\udc00"}, {"status": 3}):
        assert rejected(jobs.list, **filters).code == "JOB_INVALID_OPTION", filters
        assert rejected(jobs.count, **filters).code == "JOB_INVALID_OPTION", filters
    assert rejected(lambda: jobs.cancel_many(queue="\ud800")).code == "JOB_INVALID_OPTION"
    for offset in (2**63, 2**70):
        assert rejected(jobs.list, offset=offset).code == "JOB_INVALID_OPTION"
    assert [s.id for s in jobs.list(limit=2**70)] == [handle.id]  # capped, as documented
    assert jobs.get(handle.id) is not None
    assert jobs.count(status="pending") == 1
    run(jobs.stop())


def test_enqueue_tx_takes_only_this_managers_open_tx(tmp_path: Any) -> None:
    here = make_manager(str(tmp_path / "here.db"))
    there = make_manager(str(tmp_path / "there.db"))
    with there.write_tx() as foreign:
        err = rejected(lambda: here.enqueue_tx(foreign, ITEM, Item()))
        assert err.code == "JOB_INVALID_OPTION"
    with here.write_tx() as finished:
        pass
    assert rejected(lambda: here.enqueue_tx(finished, ITEM, Item())).code == "JOB_INVALID_OPTION"
    every = jl.Interval(60)
    err = rejected(lambda: here.register_job_schedule_tx(finished, ITEM, Item(), trigger=every))
    assert err.code == "JOB_INVALID_OPTION"
    assert rejected(lambda: here.update_job_schedule_tx(finished, "x")).code == "JOB_INVALID_OPTION"
    assert here.count() == there.count() == 0
    with here.write_tx() as tx:
        here.enqueue_tx(tx, ITEM, Item())
    assert here.count() == 1
    run(here.stop())
    run(there.stop())


def test_once_at_the_very_end_of_year_9999_is_refused(db: str) -> None:
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    for at in (END_OF_9999, datetime(1969, 1, 1, tzinfo=UTC)):
        err = rejected(jobs.register_job_schedule, ITEM, Item(), trigger=jl.Once(at=at), name="x")
        assert err.code == "JOB_SCHEDULE_TRIGGER_INVALID"
    last = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    sid = jobs.register_job_schedule(ITEM, Item(), trigger=jl.Once(at=last), name="last")
    snap = jobs.get_job_schedule_by_id(sid)
    # Read back through a float of epoch seconds: exact to the stored millisecond.
    assert snap is not None
    assert isinstance(snap.trigger, jl.Once)
    assert to_ms(snap.trigger.at) == to_ms(last)
    err = rejected(lambda: jobs.update_job_schedule(sid, trigger=jl.Once(at=END_OF_9999)))
    assert err.code == "JOB_SCHEDULE_TRIGGER_INVALID"
    err = rejected(lambda: jobs.update_job_schedule(sid, metadata={1: "a", "1": "b"}))
    assert err.code == "JOB_INVALID_OPTION"
    err = rejected(lambda: jobs.update_job_schedule(sid, name="bad\ud800"))
    assert err.code == "JOB_SCHEDULE_NAME_INVALID"
    assert jobs.update_job_schedule("\ud800", enabled=False) is None
    assert jobs.unregister_job_schedule_by_id("\ud800") is False
    assert jobs.get_job_schedule_by_id(sid) == snap
    run(jobs.stop())


def test_manager_options_out_of_range(db_path: str) -> None:
    for options in (
        {"poll_interval": math.inf},
        {"startup_delay": math.nan},
        {"worker_timeout": 10**400},
        {"busy_timeout": math.nan},
        {"gc_interval": -1},
        {"global_max_concurrency": 2**63},
        {"claim_batch": 0},
        {"synchronous": "SOMETIMES"},
        {"worker_id": "w\x00"},
    ):
        assert rejected(jl.JobManager, db_path, **options).code == "JOB_INVALID_OPTION"
    odd: Any = 5
    assert rejected(lambda: jl.JobManager(odd)).code == "JOB_INVALID_OPTION"
    assert rejected(lambda: jl.JobManager("a\x00b.db")).code == "JOB_INVALID_OPTION"


def test_patch_metadata_and_progress_are_held_to_the_same_rules(db: str) -> None:
    jobs = make_manager(db)
    codes: list[str] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        patches: list[Any] = [{1: "a", "1": "b"}, {"x": "\ud800"}, {"x": math.nan}]
        for patch in patches:
            try:
                await ctx.patch_metadata(patch)
            except jl.JobError as exc:
                codes.append(exc.code)
        await ctx.patch_metadata({"half": "y" * (40 * 1024)})
        try:  # the merged metadata would pass the cap
            await ctx.patch_metadata({"other": "z" * (40 * 1024)})
        except jl.JobError as exc:
            codes.append(exc.code)
        try:
            ctx.report_progress(50, "\ud800")
        except jl.JobError as exc:
            codes.append(exc.code)
        ctx.report_progress(10**400, None)  # clamped to 100, like any number above it

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(ITEM, Item()).finished

    snap = run(main())
    assert snap.status == "completed"
    assert codes == ["JOB_INVALID_OPTION"] * 5
    assert set(snap.metadata) == {"half"}
    assert snap.progress == 100


class OldDict(typing.TypedDict):
    n: int


class NewDict(typing_extensions.TypedDict):
    n: int


class Outer(typing_extensions.TypedDict):
    inner: OldDict


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="typing.TypedDict works on 3.12+")
def test_a_typing_typeddict_payload_fails_when_the_job_type_is_made() -> None:
    with pytest.raises(jl.HandlerRegistrationError) as info:
        jl.JobType("test.old", OldDict)
    assert info.value.code == "JOB_HANDLER_INVALID"
    assert "typing_extensions.TypedDict" in info.value.message
    nested = jl.JobType("test.nested", Outer)  # only pydantic sees the nested one
    with pytest.raises(jl.HandlerRegistrationError) as info:
        nested.encode({"inner": {"n": 1}})
    assert info.value.code == "JOB_HANDLER_INVALID"


def test_a_typing_extensions_typeddict_payload_works(db: str) -> None:
    kind = jl.JobType("test.new", NewDict)
    jobs = make_manager(db)

    @jobs.handler(kind, recovery="retry")
    async def work(ctx: jl.JobContext[NewDict]) -> int:
        return ctx.payload["n"] * 2

    async def main() -> jl.JobSnapshot:
        async with jobs:
            return await jobs.enqueue(kind, NewDict(n=21)).finished

    assert run(main()).output == 42
