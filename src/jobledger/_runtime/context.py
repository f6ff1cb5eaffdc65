"""What a handler sees while it runs: `JobContext` and its `CancelToken`.

The token is thread-safe: plain `def` handlers run on a thread pool and poll
`ctx.cancelled.is_set()`; async handlers may `await ctx.cancelled.wait()`. It fires once,
with a reason (`"cancel"`, `"timeout"` or `"shutdown"`); outcomes are classified by that
reason, never by the text of whatever the handler raised.

`report_progress` and `patch_metadata` do their write at call time (a short synchronous
write, like every write in jobledger) and return an already-finished awaitable, so
`await ctx.report_progress(...)` works in async handlers and a bare call works in
plain ones. Metadata is written to the database first, then to memory, and only while
the row still carries this attempt's claim.

`ctx.logger` is made on first use, so a handler that never logs pays nothing for it
(`_runtime/joblog.py` says what it records and keeps).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Generator, Mapping
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

from jobledger._runtime.transactions import COMMITTED, TURN
from jobledger.errors import JobCancelled

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from jobledger._runtime.attempt import Attempt
    from jobledger._runtime.transactions import GroupCommitter, JobTransaction

__all__ = ["CancelReason", "CancelToken", "JobContext"]

P = TypeVar("P")
CancelReason = Literal["cancel", "timeout", "shutdown"]


class Done:
    """An awaitable that is already finished."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # pragma: no cover - makes this a generator


DONE = Done()


class CancelToken:
    """Fires once, from any thread; remembers why."""

    __slots__ = ("_event", "_loop", "_waiters", "message", "reason")

    # One lock for every token: a token is made per attempt and most are never fired
    # nor waited on, and what the lock guards (a flag and a waiter list) is brief.
    _lock = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # Made by the first `wait_sync` only: one token per attempt, and most never block.
        self._event: threading.Event | None = None
        self._loop = loop
        self._waiters: list[asyncio.Future[None]] | None = None
        self.reason: CancelReason | None = None
        self.message: str | None = None

    def is_set(self) -> bool:
        return self.reason is not None

    def fire(self, reason: CancelReason, message: str | None = None) -> bool:
        """Set the token; False if it was already set (the first reason stays)."""
        with self._lock:
            if self.reason is not None:
                return False
            self.message = message  # before `reason`, which is what is_set() reads
            self.reason = reason
            if self._event is not None:
                self._event.set()
            waiters, self._waiters = self._waiters or [], None
        for fut in waiters:
            loop = fut.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, fut)
        return True

    async def wait(self) -> CancelReason:
        """Wait until the token fires; returns the reason."""
        with self._lock:
            if self.reason is not None:
                return self.reason
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(fut)
        await fut
        return cast(CancelReason, self.reason)  # fire() set it before waking us

    def wait_sync(self, timeout: float | None = None) -> bool:
        """For plain handlers: block this thread until fired or `timeout` passes."""
        with self._lock:
            if self.reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def __repr__(self) -> str:
        return f"CancelToken(reason={self.reason!r})"


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class JobContext(Generic[P]):
    """The handler's view of one attempt of one job."""

    __slots__ = (
        "_attempt",
        "_logger",
        "_metadata",
        "_upstream",
        "attempt",
        "cancelled",
        "job_id",
        "payload",
    )

    def __init__(
        self,
        attempt_state: Attempt,
        payload: P,
        metadata: Mapping[str, Any],
    ) -> None:
        self._attempt = attempt_state
        self.payload: P = payload
        self.job_id: str = attempt_state.job_id
        self.attempt: int = attempt_state.attempt
        self.cancelled: CancelToken = attempt_state.token
        self._metadata: Mapping[str, Any] = MappingProxyType(dict(metadata))
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None
        self._upstream: Mapping[str, Any] | None = None

    @property
    def workflow_id(self) -> str | None:
        """The workflow this job is a step of (`jobs.workflow`), or None."""
        return self._attempt.workflow_id

    @property
    def upstream(self) -> Mapping[str, Any]:
        """For a workflow step (or a `jobs.retry` of one): each upstream step's name ->
        its job's output (JSON), a list of outputs in order for an `add_many` step; `{}`
        for any other job. Read from the database on first access (one query), then
        kept."""
        if self._upstream is None:
            self._upstream = MappingProxyType(self._attempt.upstream())
        return self._upstream

    @property
    def metadata(self) -> Mapping[str, Any]:
        """A read-only view of the job's metadata, including this attempt's patches."""
        return self._metadata

    @property
    def queue(self) -> str:
        return self._attempt.queue

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """Logger `jobledger.job` with `job_id, type, queue, attempt` on every record;
        each line is also kept with this attempt (the last 200 lines or 64 KiB)."""
        logger = self._logger
        if logger is None:
            logger = self._logger = self._attempt.job_logger()
        return logger

    def raise_if_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled(
                self.cancelled.message or f"job {self.job_id} was cancelled",
                params={"reason": self.cancelled.reason},
            )

    def transaction(self) -> TransactionBlock:
        """A write transaction on the job database whose commit also completes this job,
        fenced on this attempt (DESIGN.md §8.13): `async with ctx.transaction() as tx:`
        (or `with` in a plain `def` handler) run your statements (`tx.execute`, the
        backend's placeholders), `jobs.enqueue_tx(tx, ...)` follow-ups and
        `tx.set_output(value)`; leaving the block commits them with the job's `completed`
        row, or raises `JobClaimLost` (nothing committed) when the attempt no longer owns
        the job. Once per attempt; keep it short and do not `await` inside it. On SQLite
        `async with` shares its commit with the blocks of other jobs ending at the same
        moment (`_runtime/transactions.py`)."""
        return TransactionBlock(self._attempt)

    def report_progress(self, progress: float, detail: str | None = None) -> Awaitable[None]:
        """Record progress (0-100). Persisted throttled; the last value always lands."""
        self._attempt.report_progress(progress, detail)
        return DONE

    def patch_metadata(self, patch: Mapping[str, Any]) -> Awaitable[None]:
        """Shallow-merge `patch` into the job's metadata: database first, then memory."""
        merged = self._attempt.patch_metadata(patch)
        self._metadata = MappingProxyType(merged)
        return DONE

    def lock(self, name: str, *, timeout: float | None = None) -> DurableLockHandle:
        """A durable named lock (layer 3), usable as `async with` or `with`."""
        return DurableLockHandle(self._attempt, name, timeout)

    def __repr__(self) -> str:
        return f"JobContext(job_id={self.job_id!r}, attempt={self.attempt})"


class TransactionBlock:
    """What `ctx.transaction()` returns: `with` commits the block on its own, `async
    with` through the loop's group commit (SQLite) or on its own (PostgreSQL)."""

    __slots__ = ("_attempt", "_committer", "_sync", "_tx")

    def __init__(self, attempt_state: Attempt) -> None:
        self._attempt = attempt_state
        self._sync: AbstractContextManager[JobTransaction] | None = None
        self._committer: GroupCommitter | None = None
        self._tx: JobTransaction | None = None

    def __enter__(self) -> JobTransaction:
        self._sync = self._attempt.transaction()
        return self._sync.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._sync is not None
        return self._sync.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> JobTransaction:
        attempt = self._attempt
        committer = attempt._engine.group_committer()
        if committer is None:
            return self.__enter__()
        self._committer = committer
        attempt._open_tx_check()
        if not committer.take():
            await committer.acquire()
        tx = self._tx = attempt.enter_group_tx(committer)
        return tx

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        committer = self._committer
        if committer is None:
            return self.__exit__(exc_type, exc, tb)
        tx = self._tx
        assert tx is not None
        if self._attempt.exit_group_tx(committer, tx, exc is not None):
            # The commit was queued before this task gives the loop its turn, so it is
            # over when the task resumes (one suspension, no future of its own);
            # `committed` waits only where it is not, and raises what failed it.
            await TURN
            if tx._result is not COMMITTED:
                await committer.committed(tx)
            if tx._after_commit:
                self._attempt._after_commit(tx)
        return None


class DurableLockHandle:
    """`async with ctx.lock("name"):` in async handlers, `with ctx.lock("name"):` in plain ones."""

    __slots__ = ("_attempt", "_name", "_timeout")

    def __init__(self, attempt_state: Attempt, name: str, timeout: float | None) -> None:
        self._attempt = attempt_state
        self._name = name
        self._timeout = timeout

    async def __aenter__(self) -> None:
        await self._attempt.acquire_lock_async(self._name, self._timeout)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._attempt.release_lock(self._name)

    def __enter__(self) -> None:
        self._attempt.acquire_lock_sync(self._name, self._timeout)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._attempt.release_lock(self._name)
