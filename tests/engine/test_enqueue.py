"""The enqueue family: validation, idempotency, transactions, batches, claim order.

Every rejected call is checked twice: the error's stable `code`, and the table, which
must hold exactly what it held before (bad input never writes, corrupts or loses a row).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import jobledger as jl
from jobledger._storage.sqlite.store import SHARED_CHUNK
from tests.conftest import db_rows, run, wait_until
from tests.engine import ITEM, Item, make_manager, sql_one, statuses

OTHER = jl.JobType("test.other", Item)
TEXT = jl.JobType("test.text", str)


def registered(db: str, **options: Any) -> tuple[jl.JobManager, list[int]]:
    """A manager with a handler for ITEM that records the payloads it runs, in order."""
    jobs = make_manager(db, **options)
    ran: list[int] = []

    @jobs.handler(ITEM, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> int:
        ran.append(ctx.payload.n)
        return ctx.payload.n

    return jobs, ran


def rejected(fn: Callable[[], object]) -> jl.JobError:
    with pytest.raises(jl.JobError) as info:
        fn()
    return info.value


# -- bad input ------------------------------------------------------------------------


def test_bad_input_is_rejected_with_its_code_and_writes_nothing(db: str) -> None:
    jobs, _ = registered(db)

    @jobs.handler(TEXT, recovery="retry")
    async def text(ctx: jl.JobContext[str]) -> None:
        return None

    keep = jobs.enqueue(ITEM, Item(n=1), idempotency_key="keep", metadata={"a": 1})
    before = jobs.get(keep.id)
    unhandled = jl.JobType("test.unhandled", Item)
    wrong: Any = {"n": "not a number"}
    not_text: Any = 42
    cases: list[tuple[str, Callable[[], object]]] = [
        ("JOB_UNKNOWN_TYPE", lambda: jobs.enqueue("test.unhandled", Item())),
        ("JOB_UNKNOWN_TYPE", lambda: jobs.enqueue("", Item())),
        ("JOB_PAYLOAD_INVALID", lambda: jobs.enqueue(ITEM, wrong)),
        ("JOB_PAYLOAD_INVALID", lambda: jobs.enqueue("test.item", wrong)),
        ("JOB_PAYLOAD_INVALID", lambda: jobs.enqueue(TEXT, not_text)),
        ("JOB_PAYLOAD_TOO_LARGE", lambda: jobs.enqueue(TEXT, "x" * (1024 * 1024 + 1))),
        ("JOB_INVALID_MAX_ATTEMPTS", lambda: jobs.enqueue(ITEM, Item(), max_attempts=0)),
        ("JOB_INVALID_MAX_ATTEMPTS", lambda: jobs.enqueue(ITEM, Item(), max_attempts=-2)),
        ("JOB_INVALID_MAX_ATTEMPTS", lambda: jobs.enqueue(ITEM, Item(), max_attempts=True)),
        ("JOB_INVALID_TIMEOUT", lambda: jobs.enqueue(ITEM, Item(), timeout=0)),
        ("JOB_INVALID_TIMEOUT", lambda: jobs.enqueue(ITEM, Item(), timeout=-1.0)),
        ("JOB_INVALID_TIMEOUT", lambda: jobs.enqueue(ITEM, Item(), timeout=math.nan)),
        ("JOB_INVALID_TIMEOUT", lambda: jobs.enqueue(ITEM, Item(), timeout=math.inf)),
        ("JOB_INVALID_IDEMPOTENCY_KEY", lambda: jobs.enqueue(ITEM, Item(), idempotency_key="")),
        ("JOB_INVALID_IDEMPOTENCY_KEY", lambda: jobs.enqueue(ITEM, Item(), idempotency_key=" ")),
        ("JOB_NOT_FOUND", lambda: jobs.enqueue(ITEM, Item(), parent_id="no-such-job")),
        ("JOB_INVALID_OPTION", lambda: jobs.enqueue(ITEM, Item(), delay=-1)),
        ("JOB_INVALID_OPTION", lambda: jobs.enqueue(ITEM, Item(), queue="")),
        ("JOB_INVALID_OPTION", lambda: jobs.enqueue(ITEM, Item(), priority="high")),  # type: ignore[arg-type]
        ("JOB_INVALID_OPTION", lambda: jobs.enqueue(ITEM, Item(), metadata={"x": math.nan})),
        (
            "JOB_INVALID_OPTION",
            lambda: jobs.enqueue(ITEM, Item(), delay=1, run_at=jobs.clock.now()),
        ),
    ]
    for code, call in cases:
        err = rejected(call)
        assert err.code == code, (code, err)
    # A producer may enqueue a JobType it has no handler for; only a bare name needs one.
    assert jobs.enqueue(unhandled, Item()).snapshot.status == "pending"
    assert jobs.count() == 2
    assert jobs.get(keep.id) == before
    run(jobs.stop())


def test_error_classes_and_params_are_stable(db: str) -> None:
    jobs, _ = registered(db)
    err = rejected(lambda: jobs.enqueue("nope", Item()))
    assert isinstance(err, jl.JobValidationError)
    assert err.params["known_types"] == ["test.item"]
    err = rejected(lambda: jobs.enqueue(ITEM, Item(), parent_id="gone"))
    assert isinstance(err, jl.JobNotFound)
    assert err.params == {"parent_id": "gone"}
    text = jl.JobType("test.small", str)
    small = make_manager(db, max_payload_bytes=10)
    err = rejected(lambda: small.enqueue(text, "x" * 20))
    assert err.code == "JOB_PAYLOAD_TOO_LARGE"
    assert err.params["limit"] == 10
    assert small.count() == 0
    run(small.stop())
    run(jobs.stop())


def test_parent_id_of_an_existing_job_is_kept(db: str) -> None:
    jobs, _ = registered(db)
    parent = jobs.enqueue(ITEM, Item(n=1))
    child = jobs.enqueue(ITEM, Item(n=2), parent_id=parent.id)
    assert child.snapshot.parent_id == parent.id
    assert [s.id for s in jobs.list(parent_id=parent.id)] == [child.id]
    run(jobs.stop())


def test_registration_rules(db: str) -> None:
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry")
    async def first(ctx: jl.JobContext[Item]) -> None:
        return None

    with pytest.raises(jl.HandlerRegistrationError) as info:

        @jobs.handler(ITEM, recovery="abandon")
        async def second(ctx: jl.JobContext[Item]) -> None:
            return None

    assert info.value.code == "JOB_HANDLER_ALREADY_REGISTERED"

    class Twice(jl.JobHandler[Item, None]):
        recovery = "singleton"

        async def execute(self, ctx: jl.JobContext[Item]) -> None:
            return None

    with pytest.raises(jl.HandlerRegistrationError):
        jobs.register_handler(ITEM, Twice())

    # `recovery` is required: missing is a TypeError (and a mypy error), bogus is rejected.
    with pytest.raises(TypeError):
        jobs.handler(OTHER)  # type: ignore[call-overload]
    with pytest.raises(jl.HandlerRegistrationError):
        jobs.handler(OTHER, recovery="sometimes")(lambda ctx: None)  # type: ignore[call-overload]

    class NoRecovery(jl.JobHandler[Item, None]):
        def execute(self, ctx: jl.JobContext[Item]) -> None:
            return None

    with pytest.raises(jl.HandlerRegistrationError):
        jobs.register_handler(OTHER, NoRecovery())
    for bad_timeout in (0, -1.0, math.nan):
        with pytest.raises(jl.JobValidationError) as vinfo:
            jobs.handler(OTHER, recovery="retry", timeout=bad_timeout)(lambda ctx: None)
        assert vinfo.value.code == "JOB_INVALID_TIMEOUT"
    with pytest.raises(jl.HandlerRegistrationError):
        jobs.handler(OTHER, recovery="retry", concurrency=0)(lambda ctx: None)
    # None of the failed registrations left a handler behind.
    assert not jobs.has_handler(OTHER)
    assert jobs.has_handler(ITEM)
    run(jobs.stop())


# -- idempotency ----------------------------------------------------------------------


def test_live_idempotency_key_returns_the_same_job(db: str) -> None:
    jobs, ran = registered(db)

    @jobs.handler(OTHER, recovery="retry")
    async def other(ctx: jl.JobContext[Item]) -> None:
        return None

    first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="k")
    again = jobs.enqueue(ITEM, Item(n=2), idempotency_key="k")
    # Keys are global across types.
    other_type = jobs.enqueue(OTHER, Item(n=3), idempotency_key="k")
    assert first.id == again.id == other_type.id
    assert again.snapshot.payload == {"n": 1}
    assert jobs.count() == 1

    async def main() -> None:
        async with jobs:
            assert (await again.finished).status == "completed"
            # Terminal: the key is free again.
            fresh = jobs.enqueue(ITEM, Item(n=4), idempotency_key="k")
            assert fresh.id != first.id
            assert (await fresh.finished).output == 4

    run(main())
    assert ran == [1, 4]
    assert sql_one(db, "SELECT count(*) FROM jobs WHERE idempotency_key = 'k'") == 2


def test_cancelled_key_can_be_reused(db: str) -> None:
    jobs, _ = registered(db)
    first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="k", delay=3600)

    async def main() -> None:
        assert await jobs.cancel(first.id) == "cancelled"
        second = jobs.enqueue(ITEM, Item(n=2), idempotency_key="k")
        assert second.id != first.id
        await jobs.stop()

    run(main())
    assert sorted(statuses(db).values()) == ["cancelled", "pending"]


def test_concurrent_enqueues_with_one_key_make_one_row(db: str) -> None:
    jobs, _ = registered(db)
    ids: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def producer() -> None:
        start.wait()
        for i in range(10):
            h = jobs.enqueue(ITEM, Item(n=i), idempotency_key="shared")
            with lock:
                ids.append(h.id)

    threads = [threading.Thread(target=producer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 80
    assert len(set(ids)) == 1
    assert jobs.count() == 1
    run(jobs.stop())


# -- transactional enqueue ------------------------------------------------------------


def test_enqueue_tx_commits_with_the_callers_writes(db: str) -> None:
    jobs, ran = registered(db)

    async def main() -> None:
        async with jobs:
            with jobs.write_tx() as tx:
                tx.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, status TEXT)")
            with jobs.write_tx() as tx:
                tx.execute("INSERT INTO item (id, status) VALUES (1, 'deleting')")
                h = jobs.enqueue_tx(tx, ITEM, Item(n=1))
                # Not committed yet: another connection sees neither row.
                assert sql_one(db, "SELECT count(*) FROM jobs") == 0
                assert sql_one(db, "SELECT count(*) FROM item") == 0
            assert sql_one(db, "SELECT status FROM item WHERE id = 1") == "deleting"
            assert sql_one(db, "SELECT count(*) FROM jobs WHERE id = ?", (h.id,)) == 1
            assert (await h.finished).status == "completed"

    run(main())
    assert ran == [1]


def test_enqueue_tx_rolls_back_with_the_callers_writes(db: str) -> None:
    jobs, ran = registered(db)

    async def main() -> None:
        async with jobs:
            with jobs.write_tx() as tx:
                tx.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, status TEXT)")
            handles: list[jl.JobHandle] = []

            def purge() -> None:
                with jobs.write_tx() as tx:
                    tx.execute("INSERT INTO item (id, status) VALUES (1, 'deleting')")
                    handles.append(jobs.enqueue_tx(tx, ITEM, Item(n=1)))
                    raise RuntimeError("abort the purge")

            with pytest.raises(RuntimeError, match="abort the purge"):
                purge()
            assert sql_one(db, "SELECT count(*) FROM item") == 0
            assert sql_one(db, "SELECT count(*) FROM jobs") == 0
            assert jobs.get(handles[0].id) is None

            async def finished() -> jl.JobSnapshot:
                return await handles[0].finished

            waiter = asyncio.ensure_future(finished())
            done, _ = await asyncio.wait({waiter}, timeout=0.2)
            assert not done
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            # The manager is still healthy: the next transaction commits and runs.
            with jobs.write_tx() as tx:
                h = jobs.enqueue_tx(tx, ITEM, Item(n=2))
            assert (await h.finished).status == "completed"

    run(main())
    assert ran == [2]


def test_enqueue_tx_rejects_bad_input_inside_the_transaction(db: str) -> None:
    jobs, _ = registered(db)
    with jobs.write_tx() as tx:
        tx.execute("CREATE TABLE item (id INTEGER PRIMARY KEY)")

    def write() -> None:
        with jobs.write_tx() as tx:
            tx.execute("INSERT INTO item (id) VALUES (1)")
            jobs.enqueue_tx(tx, ITEM, Item(), max_attempts=0)

    with pytest.raises(jl.JobValidationError) as info:
        write()
    assert info.value.code == "JOB_INVALID_MAX_ATTEMPTS"
    assert sql_one(db, "SELECT count(*) FROM item") == 0
    run(jobs.stop())


# -- enqueue_many ---------------------------------------------------------------------


def test_enqueue_many_keeps_order_and_applies_per_entry_options(db: str) -> None:
    jobs, ran = registered(db)
    # Annotated: mypy cannot infer P from a literal list mixing P and JobSpec[P].
    entries: list[Item | jl.JobSpec[Item]] = [
        Item(n=0),
        jl.JobSpec(Item(n=1), priority=-5, idempotency_key="one", metadata={"own": 1}),
        jl.JobSpec(Item(n=2), delay=timedelta(hours=1)),
        Item(n=3),
        jl.JobSpec(Item(n=4), idempotency_key="one"),  # same key in the batch: same job
    ]
    handles = jobs.enqueue_many(ITEM, entries, priority=3, metadata={"batch": True})
    snaps = [h.snapshot for h in handles]
    assert [s.payload["n"] for s in snaps] == [0, 1, 2, 3, 1]
    assert handles[4].id == handles[1].id
    assert [s.priority for s in snaps] == [3, -5, 3, 3, -5]
    assert [dict(s.metadata) for s in snaps] == [
        {"batch": True},
        {"own": 1},
        {"batch": True},
        {"batch": True},
        {"own": 1},
    ]
    assert [s.status for s in snaps] == ["pending", "pending", "delayed", "pending", "pending"]
    assert jobs.count() == 4
    # Newest first, so the written order is the reverse of list().
    assert [s.id for s in reversed(jobs.list())] == [h.id for h in handles[:4]]
    assert jobs.enqueue_many(ITEM, []) == []

    async def main() -> None:
        async with jobs:
            for h in handles:
                if h.snapshot.status == "pending":
                    await h.finished

    run(main())
    assert ran == [1, 0, 3]  # priority first, then the order written


def test_enqueue_many_with_an_invalid_entry_writes_nothing(db: str) -> None:
    jobs, _ = registered(db)
    wrong: Any = {"n": "x"}
    entries: list[Item | jl.JobSpec[Item]] = [
        Item(n=0),
        wrong,
        jl.JobSpec(Item(n=2), idempotency_key=""),
        jl.JobSpec(Item(n=3), delay=-1),
        Item(n=4),
    ]
    with pytest.raises(jl.JobValidationError) as info:
        jobs.enqueue_many(ITEM, entries)
    err = info.value
    assert err.code == "JOB_BATCH_INVALID"
    invalid = err.params["entries"]
    assert [(e["index"], e["code"]) for e in invalid] == [
        (1, "JOB_PAYLOAD_INVALID"),
        (2, "JOB_INVALID_IDEMPOTENCY_KEY"),
        (3, "JOB_INVALID_OPTION"),
    ]
    assert all(isinstance(e["message"], str) and e["message"] for e in invalid)
    assert jobs.count() == 0
    # A missing parent is only found while writing: still nothing is written.
    with pytest.raises(jl.JobNotFound):
        jobs.enqueue_many(ITEM, [Item(n=0), Item(n=1)], parent_id="gone")
    assert jobs.count() == 0
    run(jobs.stop())


def test_enqueue_many_rows_are_the_rows_written(db: str) -> None:
    # More entries than one multi-row INSERT takes, and not a multiple of it; a queue
    # resolver and a JobSpec among them.
    jobs = make_manager(db)

    @jobs.handler(ITEM, recovery="retry", queue=lambda item: f"q{item.n % 3}")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    entries: list[Item | jl.JobSpec[Item]] = [Item(n=i) for i in range(75)]
    entries[40] = jl.JobSpec(Item(n=40), priority=7, delay=60)
    handles = jobs.enqueue_many(ITEM, entries, metadata={"m": 1}, max_attempts=2)
    assert len({h.id for h in handles}) == 75
    assert [h.id for h in handles] == sorted(h.id for h in handles)  # ids in entry order
    for i, h in enumerate(handles):
        assert h.snapshot == jobs.get(h.id)
        assert h.snapshot.queue == f"q{i % 3}"
        assert h.snapshot.payload == {"n": i}
    assert handles[40].snapshot.status == "delayed"
    assert handles[40].snapshot.priority == 7
    assert [s.id for s in reversed(jobs.list(limit=100))] == [h.id for h in handles]
    assert sql_one(db, "SELECT count(*) FROM queues WHERE name IN ('q0', 'q1', 'q2')") == 3
    run(jobs.stop())


def test_enqueue_many_stores_each_payload_text_exactly_as_a_single_enqueue(db: str) -> None:
    # A batch of rows that differ only in id and payload takes its own INSERT (the
    # shared columns bound once per statement); the text it stores must be the text a
    # single enqueue stores.
    jobs = make_manager(db)
    texts = [
        "plain",
        'quote " and backslash \\ and slash /',
        "new\nline\ttab\r\x00nul\x1fctl",
        "accents é ü, CJK 漢字, emoji 😀🎉, RTL עברית",
        "\u2028\u2029 line separators",
        "",
        '{"looks": ["like", "json"]}',
        "\ud7ff\ue000\uffff",
    ]
    handles = jobs.enqueue_many(TEXT, texts)
    singles = [jobs.enqueue(TEXT, t) for t in texts]
    stored = [sql_one(db, "SELECT payload FROM jobs WHERE id = ?", (h.id,)) for h in handles]
    expected = [sql_one(db, "SELECT payload FROM jobs WHERE id = ?", (h.id,)) for h in singles]
    assert stored == expected
    assert [jobs.get(h.id).payload for h in handles] == texts  # type: ignore[union-attr]
    run(jobs.stop())


def test_a_shared_batch_longer_than_one_statement_keeps_every_row_in_order(db: str) -> None:
    # Rows that share every option go SHARED_CHUNK to a statement: two full statements
    # and a short one here.
    jobs, _ = registered(db)
    n = 2 * SHARED_CHUNK + 7
    handles = jobs.enqueue_many(ITEM, [Item(n=i) for i in range(n)], priority=3)
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    stored = db_rows(db, "SELECT id, payload, priority, queue FROM jobs ORDER BY id")
    assert stored == [(h.id, json.dumps({"n": i}, separators=(",", ":")), 3, ITEM.name)
                      for i, h in enumerate(handles)]  # fmt: skip
    run(jobs.stop())


def test_enqueue_many_with_invalid_shared_options_reports_every_entry(db: str) -> None:
    jobs, _ = registered(db)
    wrong: Any = {"n": "x"}
    bad_priority: Any = "high"
    entries: list[Item | jl.JobSpec[Item]] = [
        Item(n=0),
        wrong,
        jl.JobSpec(Item(n=2), priority=1),  # its own priority is valid
    ]
    with pytest.raises(jl.JobValidationError) as info:
        jobs.enqueue_many(ITEM, entries, priority=bad_priority)
    # The payload is validated first, so entry 1 reports its payload.
    assert [(e["index"], e["code"]) for e in info.value.params["entries"]] == [
        (0, "JOB_INVALID_OPTION"),
        (1, "JOB_PAYLOAD_INVALID"),
    ]
    assert jobs.count() == 0
    run(jobs.stop())


def test_an_idempotency_hit_does_not_count_as_registering_its_queue(db: str) -> None:
    jobs, _ = registered(db)
    first = jobs.enqueue(ITEM, Item(n=1), idempotency_key="k", queue="home")
    hit = jobs.enqueue(ITEM, Item(n=2), idempotency_key="k", queue="elsewhere")
    assert hit.id == first.id
    assert sql_one(db, "SELECT count(*) FROM queues WHERE name = 'elsewhere'") == 0
    # The first row really written to the queue registers it (other processes learn
    # their queues from that table).
    jobs.enqueue(ITEM, Item(n=3), queue="elsewhere")
    assert sql_one(db, "SELECT count(*) FROM queues WHERE name = 'elsewhere'") == 1
    run(jobs.stop())


def test_a_plain_enqueue_on_a_known_queue_is_one_autocommit_statement(db_path: str) -> None:
    # Nothing to look up or register: the INSERT is the whole transaction (SQLite's
    # autocommit), about a tenth cheaper than BEGIN IMMEDIATE, INSERT, COMMIT.
    jobs, _ = registered(db_path)
    conn = jobs._store.conn  # type: ignore[attr-defined]
    seen: list[str] = []

    def statements(call: Callable[[], jl.JobHandle]) -> list[str]:
        seen.clear()
        conn.set_trace_callback(seen.append)
        try:
            call()
        finally:
            conn.set_trace_callback(None)
        # A trigger program the INSERT runs (the kept counts, migration 16) is traced
        # again with the INSERT's own text: one statement, seen more than once in a row.
        once = [sql for sql, _ in itertools.groupby(seen)]
        return [sql.split()[0].upper() for sql in once]

    assert statements(lambda: jobs.enqueue(ITEM, Item(n=1)))[0] == "BEGIN"  # registers
    assert statements(lambda: jobs.enqueue(ITEM, Item(n=2))) == ["INSERT"]
    assert statements(lambda: jobs.enqueue(ITEM, Item(n=3), idempotency_key="k"))[0] == "BEGIN"
    assert statements(lambda: jobs.enqueue(ITEM, Item(n=4), queue="fresh"))[0] == "BEGIN"
    assert statements(lambda: jobs.enqueue(ITEM, Item(n=5), queue="fresh")) == ["INSERT"]
    assert not conn.in_transaction
    stored = db_rows(db_path, "SELECT payload, queue, status FROM jobs ORDER BY id")
    assert stored == [(json.dumps({"n": n}, separators=(",", ":")), queue, "pending")
                      for n, queue in [(1, ITEM.name), (2, ITEM.name), (3, ITEM.name),
                                       (4, "fresh"), (5, "fresh")]]  # fmt: skip
    run(jobs.stop())


# -- ordering and producers -----------------------------------------------------------


def test_claim_order_is_priority_then_fifo(db: str) -> None:
    jobs, ran = registered(db)
    priorities = [5, 0, 5, -1, 0, 10, -1, 0]
    handles = [jobs.enqueue(ITEM, Item(n=i), priority=p) for i, p in enumerate(priorities)]

    async def main() -> None:
        async with jobs:
            for h in handles:
                await h.finished

    run(main())
    expected = [i for _, i in sorted((p, i) for i, p in enumerate(priorities))]
    assert ran == expected


def test_enqueue_from_other_threads_while_running(db: str) -> None:
    jobs, ran = registered(db)

    async def main() -> None:
        async with jobs:
            handles = await asyncio.gather(
                *(asyncio.to_thread(jobs.enqueue, ITEM, Item(n=i)) for i in range(20))
            )
            for h in handles:
                assert (await h.finished).status == "completed"

    run(main())
    assert sorted(ran) == list(range(20))


def test_enqueue_after_stop_writes_a_pending_row_and_runs_nothing(db: str) -> None:
    jobs, ran = registered(db)

    async def main() -> jl.JobHandle:
        async with jobs:
            await jobs.enqueue(ITEM, Item(n=1)).finished
        return jobs.enqueue(ITEM, Item(n=2))

    h = run(main())
    assert ran == [1]
    assert h.snapshot.status == "pending"
    assert statuses(db)[h.id] == "pending"
    # A stopped manager is still an observer.
    assert jobs.get(h.id) == h.snapshot
    assert jobs.count() == 2


def test_enqueue_before_start_runs_once_started(db: str) -> None:
    jobs, ran = registered(db)
    h = jobs.enqueue(ITEM, Item(n=5))

    async def main() -> jl.JobSnapshot:
        async with jobs:
            await wait_until(lambda: ran == [5], what="the early job to run")
            return await h.finished

    assert run(main()).output == 5


def test_start_builds_every_handlers_payload_adapter_before_the_first_claim(
    db_path: str,
) -> None:
    # A worker that never enqueued would build each type's adapter when its first job
    # arrives (the process's first one also sets up pydantic, ~20 ms), holding the
    # claimed slots meanwhile; start() builds them instead.
    fresh = jl.JobType("test.fresh-adapter", Item)
    jobs = make_manager(db_path)

    @jobs.handler(fresh, recovery="retry")
    async def work(ctx: jl.JobContext[Item]) -> None:
        return None

    assert fresh._adapter is None  # registering alone builds nothing

    async def main() -> None:
        async with jobs:
            assert fresh._adapter is not None

    run(main())


def test_a_manager_that_ran_and_stopped_cannot_start_again(db: str) -> None:
    jobs = make_manager(db)

    async def main() -> str:
        async with jobs:
            pass
        with pytest.raises(jl.JobError) as again:
            await jobs.start()
        return again.value.code

    assert run(main()) == "JOB_MANAGER_STOPPED"
