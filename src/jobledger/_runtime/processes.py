"""The process executor: a worker's pool of child processes for `executor="process"`.

A plain `def` handler registered with `executor="process"` (DESIGN.md §8.10) runs in a
child process of the worker, so CPU-bound jobs use every core and a runaway one can be
killed. The pool belongs to one `Engine`; it starts at the first process job and closes
with the manager.

    engine (loop thread)                        child (spawned)
    ─────────────────────                       ──────────────────────────────────
    run: ("run", job, payload JSON, ...)  ───►  reader thread ─► main thread runs
         ("cancel", job, reason, msg)     ───►  reader thread fires the child's token
    ◄───  ("progress", job, value, detail)      (throttled to one per 50 ms)
    ◄───  ("end", job, kind, JSON, log lines)   kind: done | error | raised
    sentinel readable  ◄── the child exited (any cause): its job ends "died"

Invariants:

- One job at a time per child, and at most one more waiting per child: the engine
  claims process jobs while fewer than `2 * size` are in hand (`Engine.proc_inflight`,
  counted at claim as the thread pool's threads are). A waiting job goes to the first
  child that frees, in the same loop callback that reads the child's end, so a child
  never idles through the finalize and the next claim (without it, two children on two
  cores ran 2 ms jobs at about one core's worth). A job whose token fires while it
  waits is never started (its end is "unstarted").
- A job handed to a child gets exactly one end: the child's `end` message, or its death
  seen through the process sentinel (exit code and signal). A child that dies mid-job
  (kill -9, a segfault, `os._exit`) therefore never loses its claimed job: the engine
  writes the attempt's outcome from the death.
- A child is never reused after it was killed (timeout, cancel grace, shutdown), died, or
  ran `max_jobs_per_child` jobs: it leaves the pool and a fresh one is spawned in its
  place at once (unless the pool is closing, or the child died before it ever became
  ready, which would otherwise respawn in a loop).
- The timeout is a hard limit counted from the hand-over to the child (not from the
  claim, which may be up to one job earlier): the parent's
  token fires with reason "timeout", the child gets SIGTERM, and SIGKILL `KILL_GRACE`
  seconds later if it is still alive. A cancel sends the token to the child and kills
  it after the handler's `cancel_timeout`; a shutdown kills it after
  `SHUTDOWN_KILL_AFTER`, inside the lifecycle's settle window, so its row is requeued
  or abandoned by strategy instead of left for recovery.
- Job data crosses as JSON text: the payload as stored, the output as the thread path
  would store it (`registry.encode_result`, in the child), errors and params as JSON.
  Only the handler and its payload and result types go by reference (module and name;
  the types in pickle's by-name form), once per child and job type.
- Everything on the parent side runs on the manager's loop (`loop.add_reader` on each
  pipe and sentinel): no locks, no threads. This needs a selector event loop (POSIX;
  not Windows' proactor loop).
- Children are spawned (never forked: no inherited connections, locks or threads) and
  are not daemonic, so a handler may start processes of its own. A child whose pipe
  closes (its worker stopped or died) exits at once, even mid-job; an atexit hook kills
  whatever a pool that was never closed left running.

Not available in a child: `ctx.patch_metadata`, `ctx.lock`, `ctx.upstream` and
`ctx.transaction()` (they write or read the database through the worker), which raise
JOB_HANDLER_EXECUTOR.
`ctx.logger` works; its kept lines travel back with the end.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import logging
import multiprocessing
import multiprocessing.util  # before our atexit hook, which must run before its joins
import os
import pickle
import queue
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic_core import to_jsonable_python

from jobledger._core.registry import JobType, encode_result
from jobledger._runtime.attempt import check_progress
from jobledger._runtime.context import CancelToken, JobContext
from jobledger._runtime.joblog import JobLogger, LogBuffer
from jobledger._runtime.timers import call_later
from jobledger._types import LogLine
from jobledger.clock import Clock, SystemClock
from jobledger.errors import JobError, PermanentError

if TYPE_CHECKING:
    from jobledger._runtime.attempt import Attempt
    from jobledger._storage.interface import ClaimedJob

__all__ = ["KILL_GRACE", "SHUTDOWN_KILL_AFTER", "End", "ProcessPool", "child_main"]

log = logging.getLogger("jobledger.engine")

KILL_GRACE = 0.5  # SIGTERM -> SIGKILL
# Inside `lifecycle.SETTLE_AFTER_ABORT` (1 s), so the killed job's outcome is written.
SHUTDOWN_KILL_AFTER = 0.5
PROGRESS_SEND_INTERVAL = 0.05
CLOSE_TIMEOUT = 2.0  # at close, idle children get this long to exit before SIGKILL

EndKind = Literal["done", "error", "raised", "died", "unstarted"]
# How a job in a child ended: ("done", output JSON), ("error", JSON of code, message,
# retryable, params), ("raised", JSON of the exception), ("died", exit code), or
# ("unstarted", None): its token fired while it waited for a child.
End = tuple[EndKind, Any]


class _Job:
    """One job on its way through the pool: waiting for a child, then held by one."""

    __slots__ = ("attempt", "child", "end", "job")

    def __init__(self, attempt: Attempt, job: ClaimedJob, end: asyncio.Future[End]) -> None:
        self.attempt = attempt
        self.job = job
        self.end = end
        self.child: _Child | None = None  # set at the hand-over


class _Child:
    """The parent's view of one child process."""

    __slots__ = ("conn", "exited", "gone", "held", "jobs", "known", "proc", "ready", "timers")

    def __init__(self, proc: Any, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.proc = proc
        self.conn = conn
        self.ready = False  # it said so; a child that never does is not replaced
        self.gone: asyncio.Future[None] = loop.create_future()
        self.exited = False
        self.held: _Job | None = None  # the job handed to it
        self.known: set[str] = set()  # job types whose handler it has been sent
        self.jobs = 0  # handed to it so far
        self.timers: list[Any] = []  # the held job's timeout and kill timers

    @property
    def pid(self) -> int | None:
        pid: int | None = self.proc.pid
        return pid

    def free(self) -> bool:
        return self.ready and self.held is None and not self.exited


_POOLS: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


class ProcessPool:
    """Up to `size` spawned children, each running one job at a time (module docstring)."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self.size = size
        self.loop = loop
        self.clock = clock
        self.closed = False
        self._mp = multiprocessing.get_context("spawn")
        self._children: list[_Child] = []  # in the pool
        self._leaving: set[_Child] = set()  # retired or killed, not yet exited
        self._waiting: deque[_Job] = deque()  # claimed, for the next free child
        self._jobs: dict[str, _Job] = {}
        self._refs: dict[str, tuple[str, str, bytes]] = {}  # job type -> what a child loads
        _POOLS.add(self)

    def pids(self) -> list[int]:
        """The pool's children's process ids (for tests and operators)."""
        return [c.pid for c in self._children if c.pid is not None]

    # -- running a job ------------------------------------------------------------

    async def run(self, attempt: Attempt, job: ClaimedJob) -> End:
        """Run `job` in a child; how it ended. Never raises for anything the child does
        (a failed spawn raises)."""
        item = _Job(attempt, job, self.loop.create_future())
        self._jobs[job.id] = item
        try:
            child = next((c for c in self._children if c.free()), None)
            if child is not None:
                self._hand(child, item)
            else:
                self._waiting.append(item)
                if len(self._children) < self.size:
                    self._spawn()  # its ready takes the first job waiting
            return await item.end
        except asyncio.CancelledError:
            if item.child is not None:
                self._kill(item.child)  # nobody will wait for its end
            raise
        finally:
            if self._jobs.get(job.id) is item:
                del self._jobs[job.id]
            if item in self._waiting:
                self._waiting.remove(item)

    def _hand(self, child: _Child, item: _Job) -> None:
        """Give `item` to the free `child`: from here its end is the child's."""
        attempt = item.attempt
        if attempt.token.is_set():
            # Cancelled or shut down while it waited: never started, nothing to kill.
            item.end.set_result(("unstarted", None))
            return
        item.child = child
        child.held = item
        child.jobs += 1
        try:
            child.conn.send(self._run_message(child, item))
        except OSError:
            return  # it is exiting: its sentinel ends the job as "died"
        timeout_ms = item.job.timeout_ms
        if timeout_ms is not None:
            child.timers.append(
                call_later(
                    self.loop,
                    self.clock,
                    timeout_ms / 1000,
                    lambda: self._timed_out(child, item, timeout_ms),
                )
            )

    def _next(self, child: _Child) -> None:
        """`child` is free: the next job waiting, if any."""
        while self._waiting and child.free():
            item = self._waiting.popleft()
            if not item.end.done():
                self._hand(child, item)

    def _run_message(self, child: _Child, item: _Job) -> tuple[Any, ...]:
        spec = item.attempt.spec
        ref = None
        if spec.name not in child.known:
            ref = self._refs.get(spec.name)
            if ref is None:
                job_type = spec.job_type
                types = pickle.dumps((job_type.payload_type, job_type.result_type))
                ref = self._refs[spec.name] = (*spec.target, types)
            child.known.add(spec.name)
        job = item.job
        return (
            "run",
            job.id,
            job.attempt,
            item.attempt.queue,
            spec.name,
            job.payload,
            job.metadata,
            item.attempt.workflow_id,
            ref,
        )

    def _ended(self, child: _Child, end: End) -> None:
        """The held job's end (its message, or the child's death)."""
        item = child.held
        if item is None:
            return
        child.held = None
        for timer in child.timers:
            timer.cancel()
        child.timers.clear()
        if not item.end.done():
            item.end.set_result(end)
        limit = item.attempt.spec.max_jobs_per_child
        if child in self._children and limit is not None and child.jobs >= limit:
            self._retire(child, kill=False)
        else:
            self._next(child)

    # -- cancel, timeout, kill ----------------------------------------------------

    def signal(self, attempt: Attempt) -> None:
        """The attempt's token fired (cancel or shutdown): pass it on to its child. One
        still waiting for a child is never started (`_hand`)."""
        item = self._jobs.get(attempt.job_id)
        if item is None:
            return
        child = item.child
        if child is None or child.held is not item:
            return
        token = attempt.token
        try:
            child.conn.send(("cancel", attempt.job_id, token.reason, token.message))
        except OSError:
            return  # exiting already: its sentinel ends the job
        if token.reason == "shutdown":
            child.timers.append(
                self.loop.call_later(SHUTDOWN_KILL_AFTER, self._kill_if, child, item)
            )
        elif token.reason == "cancel":
            grace = attempt.spec.cancel_timeout
            child.timers.append(
                call_later(self.loop, self.clock, grace, lambda: self._kill_if(child, item))
            )

    def _timed_out(self, child: _Child, item: _Job, timeout_ms: int) -> None:
        if child.held is item:
            item.attempt.token.fire("timeout", f"timed out after {timeout_ms / 1000:g}s")
            self._kill(child)

    def _kill_if(self, child: _Child, item: _Job) -> None:
        if child.held is item:
            self._kill(child)

    def _kill(self, child: _Child) -> None:
        self._retire(child, kill=True)

    def _retire(self, child: _Child, *, kill: bool) -> None:
        """Take the child out of the pool (a fresh one takes its place) and end it."""
        if child in self._children:
            self._children.remove(child)
            self._leaving.add(child)
            if not self.closed and child.ready:
                self._replace()
        if child.exited:
            return
        if kill:
            child.proc.terminate()
            self.loop.call_later(KILL_GRACE, _sigkill, child)
        else:
            try:
                child.conn.send(("stop",))
            except OSError:
                pass

    # -- children -----------------------------------------------------------------

    def _spawn(self) -> _Child:
        parent_end, child_end = self._mp.Pipe(duplex=True)
        proc = self._mp.Process(
            target=child_main, args=(child_end,), name="jobledger-child", daemon=False
        )
        try:
            proc.start()
        finally:
            child_end.close()
        child = _Child(proc, parent_end, self.loop)
        self._children.append(child)
        self.loop.add_reader(parent_end.fileno(), self._readable, child)
        self.loop.add_reader(proc.sentinel, self._exited, child)
        return child

    def _replace(self) -> None:
        try:
            self._spawn()
        except Exception:
            log.warning("a replacement child process could not be started", exc_info=True)

    def _readable(self, child: _Child) -> None:
        conn = child.conn
        try:
            while not conn.closed and conn.poll():
                self._message(child, conn.recv())
        except (EOFError, OSError):
            self._unwatch_pipe(child)  # its end closed: the sentinel says why

    def _unwatch_pipe(self, child: _Child) -> None:
        if not child.conn.closed:
            self.loop.remove_reader(child.conn.fileno())

    def _message(self, child: _Child, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        item = child.held
        if kind == "ready":
            child.ready = True
            self._next(child)
        elif kind == "progress":
            if item is not None and item.job.id == msg[1] and not item.attempt.submitted:
                try:
                    item.attempt.report_progress(msg[2], msg[3])
                except Exception:
                    log.warning("progress of %s not recorded", msg[1], exc_info=True)
        elif kind == "end":
            _, job_id, what, data, lines, dropped = msg
            if item is None or item.job.id != job_id:
                return
            if lines or dropped:
                item.attempt.adopt_logs(
                    [
                        LogLine(at=datetime.fromtimestamp(at, UTC), level=lv, message=m)
                        for at, lv, m in lines
                    ],
                    dropped,
                )
            self._ended(child, (what, data))

    def _exited(self, child: _Child) -> None:
        self.loop.remove_reader(child.proc.sentinel)
        self._readable(child)  # what it sent before it exited (an end, its last progress)
        self._unwatch_pipe(child)
        child.conn.close()
        child.proc.join(1.0)  # the sentinel fires at exit; the reaping is immediate
        child.exited = True
        code = child.proc.exitcode
        self._leaving.discard(child)
        in_pool = child in self._children
        if in_pool:
            self._children.remove(child)
        self._ended(child, ("died", code))
        if not child.gone.done():
            child.gone.set_result(None)
        if in_pool and not self.closed:
            if child.ready:
                log.warning("child process %s exited (%s); replaced", child.pid, code)
                self._replace()
            elif not self._children:
                # It died before it was ready (its import failed?) and none is left:
                # the jobs waiting would wait forever, so they end as its death.
                while self._waiting:
                    item = self._waiting.popleft()
                    if not item.end.done():
                        item.end.set_result(("died", code))

    async def aclose(self) -> None:
        """Stop every child: idle ones are asked to exit, busy ones (handlers that ignored
        the shutdown) are killed; after CLOSE_TIMEOUT, SIGKILL for any left."""
        self.closed = True
        while self._waiting:
            item = self._waiting.popleft()
            if not item.end.done():
                item.end.set_result(("unstarted", None))
        for child in list(self._children):
            self._retire(child, kill=child.held is not None)
        leaving = [c.gone for c in self._leaving]
        if leaving:
            _, pending = await asyncio.wait(leaving, timeout=CLOSE_TIMEOUT)
            if pending:
                for child in list(self._leaving):
                    _sigkill(child)
                await asyncio.wait(pending, timeout=CLOSE_TIMEOUT)
        _POOLS.discard(self)

    def kill_all(self) -> None:
        """SIGKILL every child now (interpreter exit with a pool never closed)."""
        for child in [*self._children, *self._leaving]:
            _sigkill(child)
            child.proc.join(1.0)


def _sigkill(child: _Child) -> None:
    if not child.exited and child.proc.is_alive():
        child.proc.kill()


def describe_death(exitcode: int | None) -> tuple[str, dict[str, Any]]:
    """The message and params of an attempt whose child died: `exitcode` is the child's
    exit status, or minus the signal that killed it (`multiprocessing`'s convention)."""
    params: dict[str, Any] = {"exitcode": exitcode}
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        params["signal"] = name
        return f"the handler's process was killed by {name}", params
    return f"the handler's process exited with status {exitcode}", params


@atexit.register
def _kill_leftovers() -> None:
    # Registered after multiprocessing's own hook, so it runs first: that hook joins
    # every non-daemonic child, and a child computing forever would hang the exit.
    for pool in list(_POOLS):
        pool.kill_all()


# -- the child side ---------------------------------------------------------------------


def child_main(conn: Connection) -> None:
    """A child process's main function (the spawn target)."""
    _ChildWorker(conn).serve()


class _ChildWorker:
    """The child's loop: its main thread runs jobs; a reader thread takes messages (so
    a cancel reaches the token while the handler computes)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()  # the handler's threads may report progress
        self.inbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.current: _ChildAttempt | None = None
        self.handlers: dict[str, tuple[Callable[[Any], Any], JobType[Any]] | str] = {}
        self.clock = SystemClock()

    def send(self, msg: tuple[Any, ...]) -> None:
        with self.send_lock:
            self.conn.send(msg)

    def serve(self) -> None:
        threading.Thread(target=self._read, name="jobledger-pipe", daemon=True).start()
        self.send(("ready", os.getpid()))
        while (msg := self.inbox.get()) is not None:
            self._run(msg)

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                # The worker closed the pipe or died: nobody can record this job's end.
                os._exit(0)
            kind = msg[0]
            if kind == "cancel":
                current = self.current
                if current is not None and current.job_id == msg[1]:
                    current.token.fire(msg[2], msg[3])
            elif kind == "stop":
                self.inbox.put(None)
            else:
                self.inbox.put(msg)

    def _run(self, msg: tuple[Any, ...]) -> None:
        _, job_id, attempt_no, queue_name, type_name, payload, metadata, workflow_id, ref = msg
        if ref is not None:
            self.handlers[type_name] = _load(type_name, ref)
        state = _ChildAttempt(self, job_id, attempt_no, queue_name, type_name, workflow_id)
        self.current = state
        try:
            what, data = self._execute(self.handlers.get(type_name), state, payload, metadata)
        finally:
            self.current = None
        state.flush()
        lines, dropped = state.kept_logs()
        self.send(("end", job_id, what, data, lines, dropped))

    def _execute(
        self,
        entry: tuple[Callable[[Any], Any], JobType[Any]] | str | None,
        state: _ChildAttempt,
        payload: str,
        metadata: str,
    ) -> tuple[str, str]:
        if not isinstance(entry, tuple):
            return "error", _error_json(
                "JOB_HANDLER_THREW",
                entry or "no handler was sent",
                True,
                {"exception": "ImportError"},
            )
        fn, job_type = entry
        try:
            value = job_type.decode(payload)
        except Exception as exc:
            return "error", _error_json("JOB_PAYLOAD_INVALID", str(exc), False, {})
        meta = json.loads(metadata) if metadata != "{}" else {}
        ctx: JobContext[Any] = JobContext(
            cast(Any, state), value, meta if isinstance(meta, dict) else {}
        )
        try:
            result = fn(ctx)
        except Exception as exc:
            return "raised", _raised_json(exc)
        encode = job_type.encode_output if job_type.result_type is not None else None
        out = encode_result(encode, result)
        if isinstance(out, str):
            return "done", out
        return "error", _error_json(out.code, out.message, False, out.params)


def _load(
    type_name: str, ref: tuple[str, str, bytes]
) -> tuple[Callable[[Any], Any], JobType[Any]] | str:
    """The handler and its job type in this child, or why they cannot be had."""
    module, qualname, types = ref
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        payload_type, result_type = pickle.loads(types)
        return obj, JobType(type_name, payload_type, result=result_type)
    except Exception as exc:
        return f"the handler {module}.{qualname} could not be loaded in a child process: {exc!r}"


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def _error_json(code: str, message: str, retryable: bool, params: dict[str, Any]) -> str:
    return json.dumps(
        {"code": code, "message": message, "retryable": retryable, "params": _jsonable(params)}
    )


def _raised_json(exc: Exception) -> str:
    from jobledger._runtime.engine import format_traceback

    name = type(exc).__name__
    info: dict[str, Any] = {
        "exception": name,
        "message": str(exc) or name,
        "permanent": isinstance(exc, PermanentError),
        "traceback": format_traceback(exc),
    }
    if isinstance(exc, JobError):
        info["code"] = exc.code
        info["job_message"] = exc.message
        info["params"] = _jsonable(exc.params)
    return json.dumps(info)


class _ChildAttempt:
    """What a `JobContext` in a child stands on, in place of the worker's `Attempt`."""

    __slots__ = (
        "_flush_timer",
        "_last_sent",
        "_lock",
        "_logs",
        "_pending",
        "_worker",
        "attempt",
        "job_id",
        "queue",
        "token",
        "type",
        "workflow_id",
    )

    def __init__(
        self,
        worker: _ChildWorker,
        job_id: str,
        attempt: int,
        queue_name: str,
        type_name: str,
        workflow_id: str | None,
    ) -> None:
        self._worker = worker
        self.job_id = job_id
        self.attempt = attempt
        self.queue = queue_name
        self.type = type_name
        self.workflow_id = workflow_id
        self.token = CancelToken()
        self._logs: LogBuffer | None = None
        self._lock = threading.Lock()
        self._pending: tuple[float, str | None] | None = None
        self._last_sent = -1e9
        self._flush_timer: threading.Timer | None = None

    def report_progress(self, progress: float, detail: str | None) -> None:
        value, text = check_progress(progress, detail)
        with self._lock:
            now = time.monotonic()
            if now - self._last_sent >= PROGRESS_SEND_INTERVAL:
                self._last_sent = now
                self._pending = None
                send = True
            else:
                # Sent by a timer at the end of the interval, or with the end.
                self._pending = (value, text)
                send = False
                if self._flush_timer is None:
                    timer = threading.Timer(PROGRESS_SEND_INTERVAL, self.flush)
                    timer.daemon = True
                    self._flush_timer = timer
                    timer.start()
        if send:
            self._worker.send(("progress", self.job_id, value, text))

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
            timer, self._flush_timer = self._flush_timer, None
            self._last_sent = time.monotonic()
        if timer is not None:
            timer.cancel()
        if pending is not None:
            self._worker.send(("progress", self.job_id, *pending))

    def job_logger(self) -> JobLogger:
        if self._logs is None:
            self._logs = LogBuffer(self._worker.clock)
        fields = {
            "job_id": self.job_id,
            "type": self.type,
            "queue": self.queue,
            "attempt": self.attempt,
        }
        return JobLogger(self._logs, fields)

    def kept_logs(self) -> tuple[list[tuple[float, str, str]], int]:
        logs = self._logs
        if logs is None:
            return [], 0
        return [(x.at.timestamp(), x.level, x.message) for x in logs.lines()], logs.dropped

    def _unavailable(self, what: str) -> JobError:
        return JobError(
            f"{what} is not available to a handler with executor='process'",
            code="JOB_HANDLER_EXECUTOR",
            params={"job_id": self.job_id},
        )

    def patch_metadata(self, patch: Any) -> dict[str, Any]:
        raise self._unavailable("ctx.patch_metadata")

    def upstream(self) -> dict[str, Any]:
        raise self._unavailable("ctx.upstream")

    def transaction(self) -> Any:
        # A child has no connection to the job database: its writes go through the
        # worker, and a commit there could not be the child's own (DESIGN.md §8.13).
        raise self._unavailable("ctx.transaction()")

    def acquire_lock_sync(self, name: str, timeout: float | None) -> None:
        raise self._unavailable("ctx.lock")

    async def acquire_lock_async(self, name: str, timeout: float | None) -> None:
        raise self._unavailable("ctx.lock")

    def release_lock(self, name: str) -> None:
        return None
