"""`JobledgerBackend`: Django tasks as jobledger jobs.

How a Django task maps onto jobledger (docs/howto/django.md shows it from the user's side):

| Django                        | jobledger                                               |
|-------------------------------|---------------------------------------------------------|
| a `Task` (`myapp.tasks.send`) | a job type named by the task's module path, and its     |
|                               | handler (registered when the task is defined)           |
| `enqueue(*args, **kwargs)`    | one job, payload `{"args": [...], "kwargs": {...}}`     |
| `TaskResult.id`               | the job id                                              |
| `queue_name`                  | the job's queue                                         |
| `priority` (higher first)     | `-priority` (jobledger runs lower first)                |
| `run_after`                   | `run_at`                                                |
| one run of the task           | one attempt; `worker_ids` lists each attempt's worker  |

Invariants:
* Everything a `TaskResult` says is read from the job database (the row, its attempts
  and its metadata), so any process can read any result; nothing lives in memory.
* Tasks register themselves: the framework validates every `Task` it builds against
  its backend (`Task.__post_init__`), and `validate_task` records the task under its
  module path, so importing a tasks module is what gives the worker its handlers.
  Nothing touches a database before the first enqueue, read or worker start (tasks
  are often defined while the app registry is still loading).
* One `JobManager` per (alias, database) per process, shared by the per-thread backend
  instances that Django's `task_backends` makes; it is only started by the worker
  command, so web processes write and read rows and run nothing.
* A task's exception is kept by class path in the job's metadata (`"django"` →
  `"exceptions"`, by attempt number), because jobledger's own error record keeps only
  the class name, and `TaskError.exception_class` must import it.

Limits: tasks defined after the worker started are not run by it (it runs what its
`tasks` modules define); `ENQUEUE_ON_COMMIT` follows the `default` database's
transaction only; a result's `id` inside a transaction with `ENQUEUE_ON_COMMIT` is
known only once the job is written, at COMMIT (it is `""` until then).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from typing_extensions import ParamSpec

import jobledger as jl
from jobledger.contrib.django._compat import (
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)

__all__ = ["JobledgerBackend", "TaskRaised"]

P = ParamSpec("P")
T = TypeVar("T")

Payload = dict[str, Any]

OPTION_KEYS = frozenset(
    {"database", "retry", "timeout", "concurrency", "tasks", "schedules", "manager"}
)
TASK_OPTION_KEYS = frozenset({"retry", "timeout"})
DEFAULT_CONCURRENCY = 10
# Django's own backends run a task once: a failure is FAILED. Retries are opt-in.
DEFAULT_RETRY = jl.RetryPolicy(max_attempts=1)
META = "django"  # the metadata key this backend owns in each job

_STATUS = {
    jl.JobStatus.PENDING: TaskResultStatus.READY,
    jl.JobStatus.DELAYED: TaskResultStatus.READY,
    jl.JobStatus.WAITING: TaskResultStatus.READY,
    jl.JobStatus.RUNNING: TaskResultStatus.RUNNING,
    jl.JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    jl.JobStatus.FAILED: TaskResultStatus.FAILED,
    jl.JobStatus.CANCELLED: TaskResultStatus.FAILED,
}
# Errors jobledger itself records (no exception of the task's): the class a
# `TaskError` names for them.
_ERROR_CLASSES = {
    "JOB_HANDLER_TIMEOUT": "builtins.TimeoutError",
    "JOB_CANCELLED": "jobledger.errors.JobCancelled",
}


class TaskRaised(Exception):
    """A task raised `SystemExit`, `KeyboardInterrupt` or another exception that is not
    an `Exception`: it is recorded under its own class and re-raised as this, so that
    it ends the attempt and not the worker."""


@dataclass(frozen=True)
class _Options:
    database: str
    retry: jl.RetryPolicy
    timeout: float | None
    concurrency: int
    tasks: Mapping[str, Mapping[str, Any]]
    schedules: Mapping[str, Mapping[str, Any]]
    manager: Mapping[str, Any]


class _Shared:
    """What every thread's backend instance of one alias shares in this process."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.tasks: dict[str, Task[Any, Any]] = {}  # module path -> first Task seen
        self.managers: dict[tuple[str, str], jl.JobManager] = {}
        self.types: dict[str, jl.JobType[Payload]] = {}


_shared: dict[str, _Shared] = {}
_shared_lock = threading.Lock()


def _shared_for(alias: str) -> _Shared:
    with _shared_lock:
        return _shared.setdefault(alias, _Shared())


def _module_path(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


class JobledgerBackend(BaseTaskBackend):
    """A backend for `django.tasks` (or the `django-tasks` backport) that stores every
    task as a jobledger job; `manage.py jobledger_worker` runs them."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.enqueue_on_commit = bool(params.get("ENQUEUE_ON_COMMIT", False))
        self._shared = _shared_for(alias)
        self._parsed: _Options | None = None

    # -- configuration --------------------------------------------------------------

    @property
    def config(self) -> _Options:
        """The validated `OPTIONS`. Raises `ImproperlyConfigured` with what `check()`
        reports (the checks run before this in `manage.py` commands)."""
        if self._parsed is None:
            errors = [e for e in config_errors(self.alias, self.options) if e.is_serious()]
            if errors:
                raise ImproperlyConfigured("; ".join(str(e.msg) for e in errors))
            opts = self.options
            self._parsed = _Options(
                database=str(opts["database"]),
                retry=opts.get("retry", DEFAULT_RETRY),
                timeout=opts.get("timeout"),
                concurrency=opts.get("concurrency", DEFAULT_CONCURRENCY),
                tasks=opts.get("tasks", {}),
                schedules=opts.get("schedules", {}),
                manager=opts.get("manager", {}),
            )
        return self._parsed

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        yield from super().check(**kwargs)
        yield from config_errors(self.alias, self.options)
        from django.apps import apps

        if not apps.is_installed("jobledger.contrib.django"):
            yield checks.Warning(
                f"TASKS[{self.alias!r}] uses JobledgerBackend, but no worker command is installed",
                hint="Add 'jobledger.contrib.django' to INSTALLED_APPS for "
                "`manage.py jobledger_worker`.",
                id="jobledger.W001",
            )

    # -- the manager ----------------------------------------------------------------

    @property
    def manager(self) -> jl.JobManager:
        """This alias's `JobManager` in this process (made on first use, never started
        here): for what Django's interface has no word for, such as `jobs.cancel`,
        queue limits, or `jobledger.testing.drain` in tests."""
        config = self.config
        key = (config.database, repr(sorted(config.manager.items())))
        shared = self._shared
        with shared.lock:
            manager = shared.managers.get(key)
            if manager is None:
                manager = jl.JobManager(config.database, **config.manager)
                shared.managers[key] = manager
                for path, task in shared.tasks.items():
                    self._register(manager, path, task)
            return manager

    def _job_type(self, path: str) -> jl.JobType[Payload]:
        with self._shared.lock:
            job_type = self._shared.types.get(path)
            if job_type is None:
                job_type = self._shared.types[path] = jl.JobType(path, dict[str, Any])
            return job_type

    def _task_options(self, path: str) -> tuple[jl.RetryPolicy, float | None]:
        config = self.config
        own = config.tasks.get(path, {})
        return own.get("retry", config.retry), own.get("timeout", config.timeout)

    def _register(self, manager: jl.JobManager, path: str, task: Task[Any, Any]) -> None:
        if manager.has_handler(path):
            return
        retry, timeout = self._task_options(path)
        manager.handler(
            self._job_type(path),
            recovery="retry",
            concurrency=self.config.concurrency,
            timeout=timeout,
            retry=retry,
            queue=task.queue_name,
        )(_handler(self.alias, path, task, manager))

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        path = task.module_path
        shared = self._shared
        with shared.lock:
            if path in shared.tasks:
                return
            shared.tasks[path] = task
            managers = list(shared.managers.values())
        for manager in managers:
            self._register(manager, path, task)

    # -- enqueue --------------------------------------------------------------------

    def enqueue(
        self,
        task: Task[P, T],
        args: P.args,  # type: ignore[valid-type]
        kwargs: P.kwargs,  # type: ignore[valid-type]
    ) -> TaskResult[T]:
        self.validate_task(task)
        payload: Payload = normalize_json({"args": args, "kwargs": kwargs})
        manager = self.manager
        retry, timeout = self._task_options(task.module_path)
        meta: dict[str, Any] = {"backend": self.alias}
        run_at = None
        if task.run_after is not None:
            run_at = task.run_after
            if timezone.is_naive(run_at):
                run_at = timezone.make_aware(run_at)
            meta["run_after"] = task.run_after.isoformat()
        result: TaskResult[T] = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

        def write() -> None:
            handle = manager.enqueue(
                self._job_type(task.module_path),
                payload,
                queue=task.queue_name,
                priority=-task.priority,
                run_at=run_at,
                timeout=timeout,
                max_attempts=retry.max_attempts,
                metadata={META: meta},
            )
            # A result is frozen for its users; the framework itself fills results in
            # this way (`TaskResult.refresh`).
            object.__setattr__(result, "id", handle.id)
            object.__setattr__(result, "enqueued_at", _local(handle.snapshot.created_at))
            task_enqueued.send(type(self), task_result=result)

        if self.enqueue_on_commit:
            transaction.on_commit(write)
        else:
            write()
        return result

    # -- results --------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any]:
        if not isinstance(result_id, str) or not result_id:
            raise TaskResultDoesNotExist(result_id)
        found = read_result(self.manager, result_id, self.alias)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        return found


# -- reading a result back ------------------------------------------------------------


def _local(when: datetime) -> datetime:
    """A stored (UTC) time as Django's settings want it: aware, or naive local time."""
    return when if settings.USE_TZ else timezone.make_naive(when)


def _task_of(snap: jl.JobSnapshot, alias: str) -> Task[Any, Any] | None:
    try:
        base = import_string(snap.type)
    except ImportError:
        return None
    if not isinstance(base, Task):
        return None
    meta = snap.metadata.get(META) or {}
    run_after = meta.get("run_after")
    return base.using(
        priority=-snap.priority,
        queue_name=snap.queue,
        run_after=None if run_after is None else datetime.fromisoformat(run_after),
        backend=meta.get("backend", alias),
    )


def _errors(snap: jl.JobSnapshot, attempts: list[jl.AttemptSnapshot]) -> list[TaskError]:
    meta = snap.metadata.get(META) or {}
    raised: Mapping[str, str] = meta.get("exceptions") or {}
    out: list[TaskError] = []

    def add(error: jl.JobErrorInfo, attempt: int | None) -> None:
        path = raised.get(str(attempt)) if attempt is not None else None
        if path is None:
            path = _ERROR_CLASSES.get(error.code, "jobledger.errors.JobError")
        text = error.traceback or f"{error.code}: {error.message}\n"
        out.append(TaskError(exception_class_path=path, traceback=text))

    for a in attempts:
        if a.error is not None:
            add(a.error, a.attempt)
    if not attempts and snap.error is not None and snap.is_terminal:
        add(snap.error, None)  # cancelled (or orphaned) before it ever ran
    return out


def read_result(manager: jl.JobManager, job_id: str, alias: str) -> TaskResult[Any] | None:
    """The `TaskResult` of job `job_id` as the database has it, or None when there is
    no such job or it is not a task's (its type does not import as a `Task`)."""
    snap = manager.get(job_id)
    return None if snap is None else _result(manager, snap, alias)


def _result(manager: jl.JobManager, snap: jl.JobSnapshot, alias: str) -> TaskResult[Any] | None:
    task = _task_of(snap, alias)
    if task is None:
        return None
    attempts = manager.attempts(snap.id)
    worker_ids = [a.worker_id for a in attempts if a.worker_id is not None]
    running = snap.status == jl.JobStatus.RUNNING
    if running and snap.worker_id is not None:
        worker_ids.append(snap.worker_id)
    last = snap.started_at if running else attempts[-1].started_at if attempts else None
    first = attempts[0].started_at if attempts else last
    payload = snap.payload if isinstance(snap.payload, dict) else {}
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=snap.id,
        status=_STATUS[snap.status],
        enqueued_at=_local(snap.created_at),
        started_at=None if first is None else _local(first),
        finished_at=(
            _local(snap.finished_at) if snap.is_terminal and snap.finished_at is not None else None
        ),
        last_attempted_at=None if last is None else _local(last),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=task.backend,
        errors=_errors(snap, attempts),
        worker_ids=worker_ids,
    )
    if snap.status == jl.JobStatus.COMPLETED:
        object.__setattr__(result, "_return_value", snap.output)
    return result


# -- running a task -------------------------------------------------------------------


def _handler(
    alias: str, path: str, task: Task[Any, Any], manager: jl.JobManager
) -> Callable[[jl.JobContext[Payload]], Any]:
    """The jobledger handler that runs `task`: a plain `def` for a plain function (the
    ORM is synchronous; it runs in the manager's threads), an `async def` for a
    coroutine function."""
    func: Callable[..., Any] = task.func
    sender = JobledgerBackend

    def begin(ctx: jl.JobContext[Payload]) -> tuple[TaskResult[Any], list[Any], bool]:
        snap = manager.get(ctx.job_id)
        result = None if snap is None else _result(manager, snap, alias)
        if result is None or snap is None:  # gone meanwhile, or its task is not there
            raise jl.PermanentError(f"job {ctx.job_id} is not a task of {path}")
        args = list(ctx.payload.get("args", []))
        if task.takes_context:
            args.insert(0, TaskContext(task_result=result))
        last = snap.attempt + 1 >= snap.max_attempts
        task_started.send(sender, task_result=result)
        return result, args, last

    def record(ctx: jl.JobContext[Payload], exc: BaseException) -> Mapping[str, Any]:
        meta = dict(ctx.metadata.get(META) or {})
        raised = dict(meta.get("exceptions") or {})
        raised[str(ctx.attempt + 1)] = _module_path(type(exc))  # AttemptSnapshot.attempt
        meta["exceptions"] = raised
        return {META: meta}

    def ended(result: TaskResult[Any], status: TaskResultStatus, value: Any = None) -> None:
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "_return_value", value)
        object.__setattr__(result, "finished_at", timezone.now())
        task_finished.send(sender, task_result=result)

    def reraise(exc: BaseException) -> BaseException:
        if isinstance(exc, Exception):
            return exc
        return TaskRaised(f"{path} raised {_module_path(type(exc))}: {exc}")

    if inspect.iscoroutinefunction(func):

        async def run_async(ctx: jl.JobContext[Payload]) -> Any:
            result, args, last = begin(ctx)
            try:
                value = normalize_json(await func(*args, **ctx.payload.get("kwargs", {})))
            except asyncio.CancelledError:
                raise  # jobledger's timeout, cancel or shutdown: its own outcome
            except BaseException as exc:
                await _best_effort_async(ctx.patch_metadata(record(ctx, exc)))
                if last:
                    ended(result, TaskResultStatus.FAILED)
                out = reraise(exc)
                if out is exc:
                    raise
                raise out from exc
            ended(result, TaskResultStatus.SUCCESSFUL, value)
            return value

        return run_async

    def run_sync(ctx: jl.JobContext[Payload]) -> Any:
        close_old_connections()  # what Django does around each request
        try:
            result, args, last = begin(ctx)
            try:
                value = normalize_json(func(*args, **ctx.payload.get("kwargs", {})))
            except BaseException as exc:
                patch = record(ctx, exc)
                _best_effort(lambda: ctx.patch_metadata(patch))
                if last:
                    ended(result, TaskResultStatus.FAILED)
                out = reraise(exc)
                if out is exc:
                    raise
                raise out from exc
            ended(result, TaskResultStatus.SUCCESSFUL, value)
            return value
        finally:
            close_old_connections()

    return run_sync


def _best_effort(fn: Callable[[], object]) -> None:
    """Recording the exception's class must not replace the exception itself (the
    attempt may have lost its claim meanwhile: `JOB_CLAIM_LOST`)."""
    try:
        fn()
    except Exception:
        pass


async def _best_effort_async(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        pass


# -- configuration checks -------------------------------------------------------------


def config_errors(alias: str, options: Any) -> list[checks.CheckMessage]:
    """What is wrong with `TASKS[alias]["OPTIONS"]`, as Django check messages."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    out: list[checks.CheckMessage] = []

    def error(msg: str, hint: str, n: int) -> None:
        out.append(checks.Error(f"{where}: {msg}", hint=hint, id=f"jobledger.E{n:03d}"))

    if not isinstance(options, Mapping):
        error("is not a dict", "OPTIONS = {'database': ...}", 1)
        return out
    unknown = sorted(set(options) - OPTION_KEYS)
    if unknown:
        error(f"unknown option(s) {unknown}", f"Known: {sorted(OPTION_KEYS)}.", 2)
    database = options.get("database")
    if database is None:
        error(
            "'database' is missing",
            "Name the job database: a SQLite file path, or a postgresql:// URL.",
            3,
        )
    elif not isinstance(database, str) or not database.strip():
        error(
            f"'database' must be a non-empty str, not {database!r}",
            "A SQLite file path, or a postgresql:// URL.",
            4,
        )
    elif "://" in database and not database.startswith(("postgresql://", "postgres://")):
        error(
            f"'database' {database.split('://')[0]}:// is not a database jobledger opens",
            "A SQLite file path, or a postgresql:// URL.",
            5,
        )
    elif database in _django_database_names():
        out.append(
            checks.Warning(
                f"{where}: 'database' is one of DATABASES' own files",
                hint="Give jobledger its own SQLite file (or PostgreSQL schema): Django's "
                "connections and jobledger's would compete for its write lock.",
                id="jobledger.W002",
            )
        )
    for key in ("retry",):
        if key in options and not isinstance(options[key], jl.RetryPolicy):
            error(f"'{key}' must be a jobledger.RetryPolicy", "retry=jl.RetryPolicy(...)", 6)
    if "timeout" in options and not _is_timeout(options["timeout"]):
        error("'timeout' must be seconds > 0, or None", "timeout=30.0", 7)
    concurrency = options.get("concurrency", DEFAULT_CONCURRENCY)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        error(f"'concurrency' must be an integer >= 1, not {concurrency!r}", "", 8)
    tasks = options.get("tasks", {})
    if not isinstance(tasks, Mapping):
        error("'tasks' must map task paths to options", "{'myapp.tasks.send': {...}}", 9)
    else:
        for path, own in tasks.items():
            if not isinstance(own, Mapping) or set(own) - TASK_OPTION_KEYS:
                error(f"'tasks'[{path!r}] must be a dict of {sorted(TASK_OPTION_KEYS)}", "", 9)
            elif "retry" in own and not isinstance(own["retry"], jl.RetryPolicy):
                error(f"'tasks'[{path!r}]['retry'] must be a jobledger.RetryPolicy", "", 6)
            elif "timeout" in own and not _is_timeout(own["timeout"]):
                error(f"'tasks'[{path!r}]['timeout'] must be seconds > 0, or None", "", 7)
    schedules = options.get("schedules", {})
    if not isinstance(schedules, Mapping):
        error("'schedules' must map names to schedules", "{'nightly': {...}}", 10)
    else:
        for name, spec in schedules.items():
            problem = _schedule_problem(spec)
            if problem is not None:
                error(f"'schedules'[{name!r}]: {problem}", _SCHEDULE_HINT, 10)
    manager = options.get("manager", {})
    known = set(inspect.signature(jl.JobManager).parameters) - {"path"}
    if not isinstance(manager, Mapping) or set(manager) - known:
        error(
            "'manager' must be a dict of JobManager options",
            f"Known: {sorted(known)}.",
            11,
        )
    return out


_SCHEDULE_HINT = (
    "{'task': 'myapp.tasks.cleanup', 'trigger': jl.Cron('0 3 * * *'), 'args': [], 'kwargs': {}}"
)


def _schedule_problem(spec: object) -> str | None:
    if not isinstance(spec, Mapping):
        return "must be a dict"
    extra = set(spec) - {"task", "trigger", "args", "kwargs"}
    if extra:
        return f"unknown key(s) {sorted(extra)}"
    if not isinstance(spec.get("task"), str):
        return "'task' must be a task's import path"
    if not isinstance(spec.get("trigger"), jl.Cron | jl.Interval | jl.Once):
        return "'trigger' must be a jobledger.Cron, Interval or Once"
    if not isinstance(spec.get("args", []), list | tuple):
        return "'args' must be a list"
    if not isinstance(spec.get("kwargs", {}), Mapping):
        return "'kwargs' must be a dict"
    return None


def _is_timeout(value: object) -> bool:
    if value is None:
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _django_database_names() -> set[str]:
    names: set[str] = set()
    for db in getattr(settings, "DATABASES", {}).values():
        name = db.get("NAME")
        if isinstance(name, str) and name:
            names.add(name)
    return names


def ensure_schedules(backend: JobledgerBackend) -> list[str]:
    """Upsert every schedule `OPTIONS["schedules"]` declares (`ensure_job_schedule`:
    idempotent, an operator's pause survives); returns their ids."""
    ids = []
    manager = backend.manager
    for name, spec in backend.config.schedules.items():
        task = import_string(spec["task"])
        if not isinstance(task, Task):
            raise ImproperlyConfigured(f"schedule {name!r}: {spec['task']} is not a Task")
        backend.validate_task(task)  # registers its handler, if the import did not
        payload = normalize_json({"args": spec.get("args", []), "kwargs": spec.get("kwargs", {})})
        ids.append(
            manager.ensure_job_schedule(
                task.module_path, payload, trigger=spec["trigger"], name=name
            )
        )
    return ids
