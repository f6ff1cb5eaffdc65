"""A Hypothesis state machine drives random sequences of enqueue, cancel, cancel_many,
time passing and the release of blocked handlers against one started manager.

The jobs' handlers succeed, fail retryably a few times then succeed, always fail, raise
`PermanentError`, or block until released (so cancels hit running jobs too); backoff is
a millisecond. Invariants, checked after every rule and by a sampler task that reads the
table every millisecond while the loop runs:

1. no row ever leaves a terminal state, and every observed change of status follows the
   state machine (`EDGES`, allowing skipped intermediate states between two samples);
2. the running count stays within the caps (per queue and global), in the table and in
   handler entry/exit counters;
3. at the end every job is terminal, every handle's `finished` resolves, and each final
   status is the one its behaviour implies (or `cancelled` when a cancel aimed at it).

Examples are derandomized and few, so the run is repeatable and takes seconds. The
machine runs on both backends: a SQLite file, and (fewer examples) a fresh PostgreSQL
schema per example from the conformance suite's schema factory.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from contextlib import ExitStack
from typing import Literal

import pydantic
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

import jobledger as jl
from jobledger._core.states import EDGES, INITIAL
from tests.conftest import db_reader, postgres_url
from tests.engine import make_manager

Mode = Literal["succeed", "flaky", "fail", "permanent", "block"]
QUEUES = ("qa", "qb", "qc")
CAP = 2
GLOBAL_CAP = 3
MAX_ATTEMPTS = 3
TERMINAL = {"completed", "failed", "cancelled"}


class Task(pydantic.BaseModel):
    mode: Mode
    fails: int = 0


TASK = jl.JobType("prop.task", Task)


def _reachable() -> dict[str, set[str]]:
    """Status -> every status reachable from it in one or more edges."""
    out: dict[str, set[str]] = {}
    for start in {str(s) for s in jl.JobStatus}:
        seen: set[str] = set()
        frontier = {start}
        while frontier:
            frontier = {str(b) for a, b in EDGES if str(a) in frontier} - seen
            seen |= frontier
        out[start] = seen
    return out


REACHABLE = _reachable()


class EngineMachine(RuleBasedStateMachine):
    jobs_made = Bundle("jobs_made")
    backend = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.schema: str | None = None
        if self.backend == "postgres":
            from tests.conformance.conftest import schema_factory

            self.schema = schema_factory().take()
            self.db = postgres_url(self.schema)
        else:
            self.db = os.path.join(self.tmp.name, "jobs.db")
        self.loop = asyncio.new_event_loop()
        self.release = asyncio.Event()
        self.modes: dict[str, Task] = {}
        self.queue_of: dict[str, str] = {}
        self.handles: list[jl.JobHandle] = []
        self.cancel_targets: set[str] = set()
        self.cancelled_queues: set[str] = set()
        self.history: dict[str, list[str]] = {}
        self.violations: list[str] = []
        self.active: dict[str, int] = dict.fromkeys(QUEUES, 0)
        self.peak_total = 0
        self.peak_queue = 0
        self.jobs = make_manager(self.db, global_max_concurrency=GLOBAL_CAP)
        self._register()
        self.loop.run_until_complete(self.jobs.start())
        self.stack = ExitStack()
        self.read = self.stack.enter_context(db_reader(self.db))
        self.sampler = self.loop.create_task(self._sample_forever())

    def _register(self) -> None:
        machine = self

        @self.jobs.handler(
            TASK,
            recovery="retry",
            concurrency=CAP,
            cancel_timeout=5.0,
            retry=jl.RetryPolicy(max_attempts=MAX_ATTEMPTS, backoff="fixed", base_delay=0.001),
        )
        async def execute(ctx: jl.JobContext[Task]) -> str:
            queue = ctx.queue
            machine.active[queue] += 1
            machine.peak_queue = max(machine.peak_queue, machine.active[queue])
            machine.peak_total = max(machine.peak_total, sum(machine.active.values()))
            try:
                await asyncio.sleep(0)
                task = ctx.payload
                if task.mode == "flaky" and ctx.attempt < task.fails:
                    raise RuntimeError(f"flaky attempt {ctx.attempt}")
                if task.mode == "fail":
                    raise RuntimeError("always fails")
                if task.mode == "permanent":
                    raise jl.PermanentError("never retry")
                if task.mode == "block":
                    await machine.release.wait()
                return "ok"
            finally:
                machine.active[queue] -= 1

    # -- observation ----------------------------------------------------------------

    def _observe(self) -> None:
        rows = self.read("SELECT id, status, queue FROM jobs")
        running: dict[str, int] = {}
        for job_id, status, queue in rows:
            seen = self.history.setdefault(job_id, [])
            if not seen:
                if status not in {str(s) for s in INITIAL} | REACHABLE["pending"]:
                    self.violations.append(f"{job_id} first seen as {status}")
                seen.append(status)
            elif seen[-1] != status:
                before = seen[-1]
                if before in TERMINAL:
                    self.violations.append(f"{job_id} left terminal {before} for {status}")
                elif status not in REACHABLE[before]:
                    self.violations.append(f"{job_id} jumped {before} -> {status}")
                seen.append(status)
            if status == "running":
                running[queue] = running.get(queue, 0) + 1
        if any(n > CAP for n in running.values()):
            self.violations.append(f"queue cap exceeded: {running}")
        if sum(running.values()) > GLOBAL_CAP:
            self.violations.append(f"global cap exceeded: {running}")

    async def _sample_forever(self) -> None:
        while True:
            self._observe()
            await asyncio.sleep(0.001)

    def _run_for(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    # -- rules ----------------------------------------------------------------------

    @rule(
        target=jobs_made,
        mode=st.sampled_from(["succeed", "flaky", "fail", "permanent", "block"]),
        fails=st.integers(min_value=0, max_value=MAX_ATTEMPTS),
        queue=st.sampled_from(QUEUES),
        priority=st.integers(min_value=-2, max_value=2),
        delay=st.sampled_from([None, 0.002, 0.01]),
    )
    def enqueue(
        self, mode: Mode, fails: int, queue: str, priority: int, delay: float | None
    ) -> str:
        task = Task(mode=mode, fails=fails)
        h = self.jobs.enqueue(TASK, task, queue=queue, priority=priority, delay=delay)
        self.modes[h.id] = task
        self.queue_of[h.id] = queue
        self.handles.append(h)
        return h.id

    @rule(job_id=jobs_made)
    def cancel(self, job_id: str) -> None:
        was = self.jobs.get(job_id)
        assert was is not None
        if not was.is_terminal:
            self.cancel_targets.add(job_id)
        outcome = self.loop.run_until_complete(self.jobs.cancel(job_id, reason="property"))
        event(f"cancel of a {was.status} job: {outcome}")
        assert outcome in ("cancelled", "not-cancellable")
        if was.is_terminal:
            assert outcome == "not-cancellable"

    @rule(queue=st.sampled_from(QUEUES))
    def cancel_many(self, queue: str) -> None:
        self.cancelled_queues.add(queue)

        async def on_the_loop() -> jl.CancelManyResult:
            # cancel_many is sync; called on the loop's thread it must run on the loop.
            return self.jobs.cancel_many(queue=queue, type=TASK)

        result = self.loop.run_until_complete(on_the_loop())
        assert result.aborted >= 0
        assert result.transitioned >= 0

    @rule(ms=st.sampled_from([1, 3, 10]))
    def let_time_pass(self, ms: int) -> None:
        self._run_for(ms / 1000)

    @rule()
    def release_blocked(self) -> None:
        self.release.set()
        self._run_for(0.002)

    # -- invariants -----------------------------------------------------------------

    @invariant()
    def never_leaves_terminal_and_caps_hold(self) -> None:
        self._observe()
        assert self.violations == []
        assert self.peak_queue <= CAP
        assert self.peak_total <= GLOBAL_CAP

    def teardown(self) -> None:
        try:
            self.release.set()
            self.loop.run_until_complete(self._finish())
        finally:
            self.sampler.cancel()
            try:
                self.loop.run_until_complete(self.sampler)
            except asyncio.CancelledError:
                pass
            self.loop.run_until_complete(self.jobs.stop())
            self.loop.close()
            self.stack.close()
            self.tmp.cleanup()
            if self.schema is not None:
                from tests.conformance.conftest import schema_factory

                schema_factory().give_back(self.schema)

    async def _finish(self) -> None:
        waiters = asyncio.gather(*(self._finished(h) for h in self.handles))
        try:
            snaps = await asyncio.wait_for(waiters, 20)
        except TimeoutError:
            stuck = self.read(
                "SELECT id, status, queue, attempt, scheduled_at, cancel_requested "
                "FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')"
            )
            raise AssertionError(f"jobs never finished: {stuck}; active={self.active}") from None
        self._observe()
        assert self.violations == []
        [(live,)] = self.read(
            "SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')"
        )
        assert live == 0
        for snap in snaps:
            self._check_final(snap)

    @staticmethod
    async def _finished(h: jl.JobHandle) -> jl.JobSnapshot:
        return await h.finished

    def _check_final(self, snap: jl.JobSnapshot) -> None:
        task = self.modes[snap.id]
        event(f"a {task.mode} job ended {snap.status}")
        may_be_cancelled = (
            snap.id in self.cancel_targets or self.queue_of[snap.id] in self.cancelled_queues
        )
        if snap.status == "cancelled":
            assert may_be_cancelled, snap
            return
        if task.mode == "permanent":
            assert (snap.status, snap.attempt) == ("failed", 0), snap
        elif task.mode == "fail" or (task.mode == "flaky" and task.fails >= MAX_ATTEMPTS):
            assert (snap.status, snap.attempt) == ("failed", MAX_ATTEMPTS - 1), snap
        elif task.mode == "flaky":
            assert (snap.status, snap.attempt) == ("completed", task.fails), snap
        else:
            assert (snap.status, snap.attempt) == ("completed", 0), snap


TestEngineStateMachine = EngineMachine.TestCase
TestEngineStateMachine.settings = settings(
    max_examples=20,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class PostgresEngineMachine(EngineMachine):
    backend = "postgres"


@pytest.mark.postgres
class TestPostgresEngineStateMachine(PostgresEngineMachine.TestCase):  # type: ignore[misc,valid-type]
    settings = settings(
        max_examples=20,
        stateful_step_count=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )

    def setUp(self) -> None:
        from tests.conformance.conftest import require_postgres

        require_postgres()
