"""One attempt of one job, from claim to its outcome.

`Attempt` is the engine-side state behind a `JobContext`: the claim (worker id and
attempt number, the fencing token of every write the handler causes), the cancel token,
the last progress reported, the durable locks taken. Progress writes are throttled: a
report reaches the row at once when the last such write is `PROGRESS_INTERVAL` seconds
old; otherwise a trailing write lands it `PROGRESS_INTERVAL` after that write (so other
processes never see a stale value for longer than the interval, even when the handler
then works silently for minutes), and the outcome carries it in any case.

The lines the handler logs through `ctx.logger` are kept in a `LogBuffer`, made on the
first log call (`log_lines()` is empty until then; bounds in `_runtime/joblog.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from jobledger._core.limits import has_surrogate, is_finite_number
from jobledger._core.registry import HandlerSpec, encode_metadata
from jobledger._runtime.context import CancelToken
from jobledger._runtime.joblog import JobLogger, LogBuffer
from jobledger._runtime.timers import call_later
from jobledger._runtime.transactions import GroupCommitter, JobTransaction, spoiled_error
from jobledger._storage.interface import APPLIED, ClaimedJob, JobRow, Outcome
from jobledger._types import LogLine
from jobledger.errors import JobClaimLost, JobError, JobValidationError

if TYPE_CHECKING:
    from jobledger._runtime.engine import Engine

__all__ = ["PROGRESS_INTERVAL", "Attempt", "check_progress"]

PROGRESS_INTERVAL = 0.25

log = logging.getLogger("jobledger.engine")

# Guards the lazy making of an attempt's log buffer (rare: once per attempt that logs).
_LOGS_LOCK = threading.Lock()


class Done:
    """`asyncio.Event`'s set/is_set/wait, with the Event made only for a waiter: every
    attempt has one, and only a shutdown or a cancel ever waits on it."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: asyncio.Event | None = None

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> bool:
        if self._set:
            return True
        if self._event is None:
            self._event = asyncio.Event()
        return await self._event.wait()


class Attempt:
    __slots__ = (
        "_engine",
        "_flush_armed",
        "_last_progress_write",
        "_logs",
        "attempt",
        "claimed_at",
        "committed",
        "done",
        "fence_mark",
        "job",
        "job_id",
        "kept",
        "lock_wait",
        "locks",
        "metadata",
        "parent_id",
        "progress",
        "progress_detail",
        "progress_dirty",
        "queue",
        "schedule_id",
        "spec",
        "started_ms",
        "submitted",
        "task",
        "timing",
        "token",
        "tx_backstop",
        "tx_opened",
        "type",
        "workflow_id",
    )

    def __init__(
        self,
        engine: Engine,
        spec: HandlerSpec[Any],
        job_id: str,
        attempt: int,
        queue: str,
        metadata: dict[str, Any],
        parent_id: str | None,
        schedule_id: str | None,
    ) -> None:
        self._engine = engine
        self.spec = spec
        self.type = spec.name
        self.job_id = job_id
        self.attempt = attempt
        self.queue = queue
        self.metadata = metadata
        self.parent_id = parent_id
        self.schedule_id = schedule_id
        self.workflow_id: str | None = None  # set by the engine for a workflow's job
        self.token = CancelToken(engine.loop)
        self.task: asyncio.Future[Any] | None = None
        self.timing = False  # its handler's timeout is armed (`_runtime/deadlines.py`)
        self.submitted = False
        self.kept = False  # its outcome's first write failed; it is being written again
        # Set once the outcome is committed and on_settled has run (the "executed" signal).
        self.done = Done()
        self.progress: float | None = None
        self.progress_detail: str | None = None
        self.progress_dirty = False
        self._last_progress_write = -math.inf
        self._flush_armed = False
        self.locks: set[str] | None = None  # the durable locks it holds (made on first use)
        self.lock_wait: str | None = None  # the lock `ctx.lock` waits for (`jobs.explain`)
        self._logs: LogBuffer | None = None
        # The row's started_at (epoch ms, written by the claim), for the worker's record.
        self.started_ms: int | None = None
        # perf_counter() at the claim while its first step has not run, else 0.0
        # (`_runtime/ahead.py`).
        self.claimed_at = 0.0
        # `ctx.transaction()`: whether one was opened, and once it committed, the outcome
        # it wrote with the row it answered (the engine writes nothing more).
        self.tx_opened = False
        self.tx_backstop: threading.Timer | None = None
        self.job: ClaimedJob | None = None  # the claim, set by the engine before the handler
        # The claim's `ClaimResult.mark`: a group commit proves this attempt's fence by
        # it without reading the row, when nothing wrote since (set by the engine too).
        self.fence_mark: Any = None
        self.committed: tuple[Outcome, JobRow] | None = None

    def task_done(self, task: asyncio.Future[Any]) -> None:
        """The done callback `Engine.abort` gives a task it cancels before its first
        step, whose `_run` (which ends with `Engine.ensure_outcome`) never runs."""
        self._engine.ensure_outcome(self)

    def expire(self) -> None:
        """The handler's timeout (`job.timeout_ms`) passed: the token fires, and an async
        handler's task is cancelled too (a plain one only sees the token)."""
        job = self.job
        assert job is not None  # armed only by `Engine._run`, which set both
        assert job.timeout_ms is not None
        fired = self.token.fire("timeout", f"timed out after {job.timeout_ms / 1000:g}s")
        if fired and self.spec.is_async and self.task is not None:
            self.task.cancel()

    # -- logs -------------------------------------------------------------------------

    def job_logger(self) -> JobLogger:
        """A `ctx.logger` for this attempt (see `_runtime/joblog.py`)."""
        fields = {
            "job_id": self.job_id,
            "type": self.type,
            "queue": self.queue,
            "attempt": self.attempt,
        }
        return JobLogger(self._log_buffer(), fields)

    def _log_buffer(self) -> LogBuffer:
        logs = self._logs
        if logs is None:
            with _LOGS_LOCK:  # the handler's threads may log for the first time at once
                logs = self._logs
                if logs is None:
                    logs = self._logs = LogBuffer(self._engine.clock)
        return logs

    def log_lines(self) -> list[LogLine]:
        """The lines kept so far, oldest first (the last 200 or 64 KiB); a copy."""
        logs = self._logs
        return [] if logs is None else logs.lines()

    def adopt_logs(self, lines: list[LogLine], dropped: int) -> None:
        """Keep lines logged elsewhere for this attempt (a process handler's child)."""
        if lines or dropped:
            self._log_buffer().extend(lines, dropped)

    def log_lines_dropped(self) -> int:
        """How many older lines the bounds pushed out of `log_lines()`."""
        logs = self._logs
        return 0 if logs is None else logs.dropped

    # -- progress and metadata ------------------------------------------------------

    def upstream(self) -> dict[str, Any]:
        """`ctx.upstream`: the upstream jobs' outputs by step (lists for `add_many`).

        Read even outside a workflow: a re-run of a step (`jobs.retry`) is in none but
        has its old edges; any other job has none, and pays one read only if it asks."""
        out: dict[str, Any] = {}
        for step, output, many in self._engine.store.upstream_outputs(self.job_id):
            value = None if output is None else json.loads(output)
            name = step or ""
            if many:
                out.setdefault(name, []).append(value)
            else:
                out[name] = value
        return out

    def _open_tx_check(self) -> None:
        if self.tx_opened:
            raise JobValidationError(
                "ctx.transaction() was used once in this attempt already",
                code="JOB_INVALID_OPTION",
                params={"job_id": self.job_id},
            )
        self.tx_opened = True
        if self.token.reason is not None:  # fired (`token.is_set()`, inline)
            raise self._claim_lost()

    @contextmanager
    def transaction(self) -> Iterator[JobTransaction]:
        """`with ctx.transaction()` (`_runtime/transactions.py` states what it
        guarantees): its own write transaction, committed when the block is left."""
        self._open_tx_check()
        engine = self._engine
        store = engine.store
        backstop = self._timeout_backstop()
        with store.user_transaction() as conn:
            tx = JobTransaction(conn, store)
            try:
                yield tx
            finally:
                tx._open = False
                if backstop is not None:
                    backstop.cancel()
            if self.token.is_set():  # cancelled, timed out or shut down meanwhile
                raise self._claim_lost()
            outcome = engine.completion_in_tx(self, tx.output)
            row = store.finalize_in(conn, outcome, engine.now_ms())
            if row is None:
                raise self._claim_lost()
        self.committed = (outcome, row)
        self._after_commit(tx)

    def _after_commit(self, tx: JobTransaction) -> None:
        for fn in tx._after_commit:
            try:
                fn()
            except Exception:
                log.exception("an after-commit callback of job %s failed", self.job_id)

    def enter_group_tx(self, committer: GroupCommitter) -> JobTransaction:
        """`async with ctx.transaction()` on SQLite, once `committer` gave this block its
        turn (`_open_tx_check` first): a savepoint of the group transaction the blocks
        of this loop share (`GroupCommitter`). Not a coroutine, as `exit_group_tx`:
        `async with` awaits the turn itself."""
        if self.token.reason is not None:  # fired (`token.is_set()`, inline)
            committer.end(False)
            raise self._claim_lost()
        conn = committer.begin()
        tx = committer.current = JobTransaction(conn, self._engine.store, self)
        job = self.job
        if job is not None and job.timeout_ms is not None:
            self.tx_backstop = self._timeout_backstop()
        return tx

    def exit_group_tx(self, committer: GroupCommitter, tx: JobTransaction, failed: bool) -> bool:
        """Close the block: keep it (its fence checked in its savepoint; the group's
        commit, queued by `committer.end`, writes its finalize and sets `tx.result`),
        True; or roll it back (`failed`: the block raised, and that exception goes on),
        False. Not a coroutine: `async with` waits for the commit itself."""
        tx._open = False
        backstop = self.tx_backstop
        if backstop is not None:
            self.tx_backstop = None
            backstop.cancel()
        if failed:
            committer.end(False)
            return False
        if tx.spoiled:
            committer.end(False)
            raise spoiled_error()
        if self.token.reason is not None:
            committer.end(False)
            raise self._claim_lost()
        try:
            outcome = self._engine.completion_in_tx(self, tx.output)
            # The fence, checked under the write lock the group holds until its commit
            # (which writes the finalize, batched with the group's others): nothing can
            # change the row in between (`_storage/sqlite/group.py`). Proven without a
            # read by the claim's mark when nothing wrote since the claim.
            holds = committer.group.fence_holds(outcome, self.fence_mark)
        except BaseException:
            committer.end(False)
            raise
        if not holds:
            committer.end(False)
            raise self._claim_lost()
        # Set before the commit it waits for: the commit runs at the end of this turn of
        # the loop, before the engine can see this handler end (a cancel included); it
        # sets the row when one was read (APPLIED until then), and a failed one clears
        # it (`GroupCommitter._flushed`).
        self.committed = (outcome, APPLIED)
        if not committer.end(True, tx, outcome):  # spoiled while finalizing: not kept
            self.committed = None
            raise spoiled_error()
        return True

    def _timeout_backstop(self) -> threading.Timer | None:
        """A timer that fires the token at the job's timeout from a thread of its own.

        The engine's timer runs on the event loop, which a block holding the store's
        write lock can stall (the loop's next write waits for that lock): so the
        timeout still lands inside the block, and its commit loses."""
        job = self.job
        if job is None or job.timeout_ms is None:
            return None
        elapsed = self._engine.now_ms() - (self.started_ms or self._engine.now_ms())
        remaining = max(0.0, (job.timeout_ms - elapsed) / 1000)
        message = f"timed out after {job.timeout_ms / 1000:g}s"
        timer = threading.Timer(remaining, self.token.fire, ("timeout", message))
        timer.daemon = True
        timer.start()
        return timer

    def _claim_lost(self) -> JobClaimLost:
        why = self.token.reason or "rescued"
        return JobClaimLost(
            f"job {self.job_id} attempt {self.attempt} no longer owns its row ({why}); "
            "nothing of its transaction was committed",
            params={"job_id": self.job_id, "attempt": self.attempt, "reason": why},
        )

    def report_progress(self, progress: float, detail: str | None) -> None:
        value, detail = check_progress(progress, detail)
        self.progress, self.progress_detail = value, detail
        engine = self._engine
        now = engine.clock.monotonic()
        if now - self._last_progress_write >= PROGRESS_INTERVAL:
            self._last_progress_write = now
            self.progress_dirty = False
            engine.store.set_progress(
                self.job_id, engine.worker_id, self.attempt, value, detail, engine.now_ms()
            )
        else:
            self.progress_dirty = True
            self._arm_flush(PROGRESS_INTERVAL - (now - self._last_progress_write))
        engine.publish_progress(self.job_id, value, detail)

    def _arm_flush(self, delay: float) -> None:
        """Schedule the trailing write (from any thread; at most one armed at a time)."""
        loop = self._engine.loop
        if self._flush_armed or loop is None or loop.is_closed():
            return
        self._flush_armed = True

        def arm() -> None:
            call_later(loop, self._engine.clock, delay, self._flush_progress)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            arm()
        else:
            loop.call_soon_threadsafe(arm)

    def _flush_progress(self) -> None:
        # It leaves `_last_progress_write` alone: the throttle window stays anchored on the
        # leading writes, so a report after a quiet spell is still written at once.
        self._flush_armed = False
        if not self.progress_dirty or self.submitted or self.progress is None:
            return
        self.progress_dirty = False
        engine = self._engine
        try:
            engine.store.set_progress(
                self.job_id,
                engine.worker_id,
                self.attempt,
                self.progress,
                self.progress_detail,
                engine.now_ms(),
            )
        except Exception:
            self.progress_dirty = True  # the outcome write still carries it
            log.debug("trailing progress write of %s failed", self.job_id, exc_info=True)

    def patch_metadata(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(patch, Mapping):
            raise JobValidationError("patch_metadata takes a mapping", code="JOB_INVALID_OPTION")
        encode_metadata(patch)
        # The store merges into the row's metadata, which only this attempt can change
        # while it holds the claim, so the merge here is what the row will hold.
        encode_metadata({**self.metadata, **patch})
        engine = self._engine
        merged = engine.store.patch_metadata(
            self.job_id, engine.worker_id, self.attempt, dict(patch), engine.now_ms()
        )
        if merged is None:
            raise JobError(
                f"job {self.job_id} is no longer held by this attempt; metadata not written",
                code="JOB_CLAIM_LOST",
            )
        self.metadata = merged
        return merged

    # -- durable locks --------------------------------------------------------------

    def _try_lock(self, name: str) -> bool:
        engine = self._engine
        if engine.store.try_lock(name, self.job_id, engine.worker_id, engine.now_ms()):
            if self.locks is None:
                self.locks = set()
            self.locks.add(name)
            return True
        return False

    async def acquire_lock_async(self, name: str, timeout: float | None) -> None:
        _check_lock_name(name)
        engine = self._engine
        started = engine.clock.monotonic()
        try:
            while not self._try_lock(name):
                self.lock_wait = name
                if timeout is not None and engine.clock.monotonic() - started >= timeout:
                    raise JobError(
                        f"lock {name!r} was not acquired in {timeout}s", code="JOB_LOCK_TIMEOUT"
                    )
                await engine.clock.sleep(engine.poll_interval)
        finally:
            self.lock_wait = None

    def acquire_lock_sync(self, name: str, timeout: float | None) -> None:
        _check_lock_name(name)
        started = time.monotonic()
        pause = threading.Event()
        try:
            while not self._try_lock(name):
                self.lock_wait = name
                if timeout is not None and time.monotonic() - started >= timeout:
                    raise JobError(
                        f"lock {name!r} was not acquired in {timeout}s", code="JOB_LOCK_TIMEOUT"
                    )
                pause.wait(self._engine.poll_interval)
        finally:
            self.lock_wait = None

    def release_lock(self, name: str) -> None:
        if self.locks is not None and name in self.locks:
            self.locks.discard(name)
            engine = self._engine
            engine.store.release_lock(name, self.job_id, engine.worker_id, self.attempt)


def check_progress(progress: object, detail: object) -> tuple[float, str | None]:
    """A reported progress clamped to 0-100 and its detail as text, or JOB_INVALID_OPTION
    (the same check in the worker and in a process handler's child)."""
    if not is_finite_number(progress):
        raise JobValidationError(
            f"progress must be a number from 0 to 100, not {progress!r}",
            code="JOB_INVALID_OPTION",
        )
    value = float(min(100, max(0, progress)))  # clamped first: a huge int has no float
    text = None if detail is None else str(detail)
    if text is not None and has_surrogate(text):
        raise JobValidationError(
            "progress detail must be UTF-8 text (it holds a lone surrogate)",
            code="JOB_INVALID_OPTION",
        )
    return value, text


def _check_lock_name(name: object) -> None:
    if not isinstance(name, str) or not name or len(name) > 500:
        raise JobValidationError(
            f"a lock name is a non-empty string of at most 500 characters, not {name!r}",
            code="JOB_INVALID_OPTION",
        )
