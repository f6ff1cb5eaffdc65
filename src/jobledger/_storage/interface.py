"""The storage contract: named operations, typed values, no SQL.

The engine talks to storage only through `Store` (River's shape: "claim", "finalize if
running", "promote due", not SQL strings). Every state change is a compare-and-set:
claims move `pending -> running` only for unclaimed rows; finalize/retry/progress and
metadata writes apply only while the row still carries the caller's claim
`(worker_id, attempt)` — the fencing token — so a worker presumed dead cannot overwrite a
job that was rescued and re-claimed by someone else.

Times are epoch milliseconds from the injected clock; storage never reads the time.
A second backend (PostgreSQL) implements the same protocol and passes the same suite.
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar

from jobledger._core import ids
from jobledger._core.search import Search, SearchField
from jobledger._storage import layout as L

if TYPE_CHECKING:
    from jobledger._storage.records import (
        AttemptRow,
        EnsuredSchedule,
        LeaseRow,
        RecoveryPlan,
        RecoveryStats,
        ScheduleRow,
        WorkerRow,
    )
    from jobledger._storage.schedule_ops import Decide

from jobledger._storage.observe import (
    AuditRecord,
    JobMetrics,
    LeaderLease,
    QueueCounts,
    QueueSettingsRecord,
    ScheduleRecord,
    SearchIndexRecord,
    StorageFacts,
    WorkerRecord,
    WorkflowRecord,
)

__all__ = [
    "APPLIED",
    "SUCCESSOR_END",
    "SUCCESSOR_SEP",
    "TERMINAL",
    "ClaimRequest",
    "ClaimResult",
    "ClaimedJob",
    "GroupCommit",
    "JobFilter",
    "JobRow",
    "KeyRule",
    "NewJob",
    "Outcome",
    "OutcomeKind",
    "Reissued",
    "RetryFilter",
    "SpreadRequest",
    "Store",
    "batchable",
    "fresh_row",
    "latest_versions",
    "new_row",
    "retry_row",
    "successor_key",
    "user_key",
    "was_inserted",
]

T = TypeVar("T")

# The statuses a row never leaves (`_core/states.py` owns the edges).
TERMINAL = ("completed", "failed", "cancelled")

# A full `jobs` row in the column order of `queries.JOB_COLUMNS`.
JobRow = tuple[Any, ...]
# `finalize`'s answer for an outcome written with `want_row=False`: applied, row not read.
APPLIED: JobRow = ()


class Reissued(tuple[Any, ...]):
    """An entry `enqueue` inserted under a fresh id: the SQLite store found its first id's
    row key taken (another process made the same key in the same millisecond)."""

    __slots__ = ()


def was_inserted(entry: JobRow, row: JobRow) -> bool:
    """Whether `enqueue` answered `row` for `entry` by inserting it; otherwise `row` is the
    live job that holds the entry's idempotency key."""
    return row is entry or row[0] == entry[0] or type(row) is Reissued


@dataclass(frozen=True, slots=True)
class KeyRule:
    """What an entry of `Store.enqueue_keyed` does with the jobs that hold its key,
    besides answering the live one. `ms` is the window in milliseconds; the entry's
    `created_at` is the enqueue's now.

    * "unique_for": answer the most recently ended job stored under the key too, when
      it ended (`finished_at`) at or after `created_at - ms`; insert only without either.
    * "debounce": when a pending or delayed job holds the key (or is its successor, see
      `successor_key`), set its payload, status and `scheduled_at` to the entry's and
      answer it; else insert the entry, under `successor_key` when a running job holds
      the key.
    """

    kind: Literal["unique_for", "debounce"]
    ms: int


# A debounced job written while a running job holds its key is stored under
# `key + SUCCESSOR_SEP + its id`: the partial unique index over live keys stays as it
# is (one live row per stored key), and no user key can collide, since keys never hold
# control characters (`_core/limits.py`). Every successor of `key` sorts inside
# [key, key + SUCCESSOR_END), as does `key` itself and no other user key, so one index
# range finds them all.
SUCCESSOR_SEP = "\x1f"
SUCCESSOR_END = "\x20"


def successor_key(key: str, job_id: str) -> str:
    return f"{key}{SUCCESSOR_SEP}{job_id}"


def latest_versions(rows: list[JobRow]) -> list[JobRow]:
    """`rows` (one per entry of `enqueue_keyed`) with each job's last version in every
    place: a batch can debounce one key twice."""
    last: dict[str, JobRow] = {}
    for row in rows:
        first = last.get(row[0])
        last[row[0]] = Reissued(row) if type(first) is Reissued else row
    if len(last) == len(rows):
        return rows
    return [last[row[0]] for row in rows]


def user_key(stored: str | None) -> str | None:
    """The key a caller gave, for a stored key (a successor's reads as its key)."""
    if stored is None or SUCCESSOR_SEP not in stored:
        return stored
    return stored[: stored.index(SUCCESSOR_SEP)]


@dataclass(slots=True)
class NewJob:
    id: str
    type: str
    status: Literal["pending", "delayed", "waiting"]  # waiting: a fire `buffer_one` held back
    queue: str
    priority: int
    payload: str
    max_attempts: int
    timeout_ms: int | None
    idempotency_key: str | None
    parent_id: str | None
    schedule_id: str | None
    metadata: str
    enqueued_by: str
    scheduled_at: int
    created_at: int


def new_row(
    id: str,
    type: str,
    status: str,
    queue: str,
    priority: int,
    payload: str,
    max_attempts: int,
    timeout_ms: int | None,
    idempotency_key: str | None,
    parent_id: str | None,
    schedule_id: str | None,
    metadata: str,
    enqueued_by: str | None,
    scheduled_at: int,
    created_at: int,
) -> JobRow:
    """The row a fresh job becomes when inserted (`JOB_COLUMNS` order; defaults filled
    in). The one place that spells that layout; positional, as enqueue's hot loop calls it."""
    return (
        id, type, status, queue, priority, payload, None, None, 0, max_attempts, timeout_ms,
        idempotency_key, parent_id, schedule_id, metadata, None, None, 0, None, scheduled_at,
        None, None, created_at, created_at, enqueued_by, None, None, None,
    )  # fmt: skip


def fresh_row(job: NewJob) -> JobRow:
    """`new_row` of a `NewJob`."""
    return new_row(
        job.id,
        job.type,
        job.status,
        job.queue,
        job.priority,
        job.payload,
        job.max_attempts,
        job.timeout_ms,
        job.idempotency_key,
        job.parent_id,
        job.schedule_id,
        job.metadata,
        job.enqueued_by,
        job.scheduled_at,
        job.created_at,
    )


def retry_row(
    old: JobRow, job_id: str, payload: str | None, enqueued_by: str, now_ms: int
) -> JobRow:
    """The row that re-runs the terminal row `old` (`jobs.retry`): `old`'s type, queue,
    priority, payload (unless `payload`, already validated JSON, is given), max_attempts,
    timeout, metadata and parent; no idempotency key and no schedule (the re-run is
    nobody's fire); `pending` now at attempt 0, and `retry_of` naming `old`."""
    fresh = new_row(
        job_id,
        old[L.C_TYPE],
        "pending",
        old[L.C_QUEUE],
        old[L.C_PRIORITY],
        old[L.C_PAYLOAD] if payload is None else payload,
        old[L.C_MAX_ATTEMPTS],
        old[L.C_TIMEOUT],
        None,
        old[L.C_PARENT],
        None,
        old[L.C_METADATA],
        enqueued_by,
        now_ms,
        now_ms,
    )
    # A re-run is in no workflow, so nothing waits on it (DESIGN.md §8.8); it keeps the
    # old row's step name, and the store gives it the old row's edges from its ended
    # upstream jobs, so its `ctx.upstream` is the old one's.
    return (*fresh[: L.C_RETRY_OF], old[L.C_ID], None, old[L.C_STEP])


def retry_rows(old: Sequence[JobRow], enqueued_by: str, now_ms: int) -> list[JobRow]:
    """`retry_row` for each of `old` (`retry_many`), with ids of one millisecond in
    `old`'s order."""
    return [
        retry_row(o, i, None, enqueued_by, now_ms)
        for o, i in zip(old, ids.new_ids(now_ms, len(old)), strict=True)
    ]


@dataclass(frozen=True, slots=True)
class RetryFilter:
    """Which terminal rows `Store.retry_matching` re-runs: `status` holds terminal
    statuses only (at least one); `None` means no filter; `search` is a console search
    term (`_core/search.py`), as `JobFilter.search`."""

    status: tuple[str, ...] = ("failed",)
    queue: str | None = None
    type: str | None = None
    search: Search | None = None

    def __post_init__(self) -> None:
        if not self.status or any(s not in TERMINAL for s in self.status):
            raise ValueError(f"RetryFilter takes terminal statuses, not {self.status!r}")


@dataclass(slots=True)
class ClaimedJob:
    id: str
    type: str
    queue: str
    priority: int
    payload: str
    attempt: int
    max_attempts: int
    timeout_ms: int | None
    metadata: str
    parent_id: str | None
    schedule_id: str | None
    scheduled_at: int
    started_at: int
    # The job's workflow (None outside one): its finalize releases downstream rows, so
    # the runtime looks downstream after it commits (`Engine.on_workflow_step`).
    workflow_id: str | None = None
    # Where the claim found the row (SQLite: its rowid; None where the backend has no
    # such key): the finalize looks the row up by it instead of parsing the id again
    # (`Outcome.claimed`). A row keeps its rowid while it runs.
    key: int | None = None


@dataclass(slots=True)
class ClaimResult:
    jobs: list[ClaimedJob]
    global_blocked: bool
    # Nothing taken because the queue's own cap is full (a hint for dispatch; a backend
    # may leave it False).
    queue_full: bool = False
    # Nothing taken because the claim asked `registered` and the worker has no live row.
    unregistered: bool = False
    # `claim_spread` only: each asked queue's free slots (its cap less its running rows,
    # counted in the claim's transaction), so dispatch can tell a queue that ran dry
    # from one that was full or was not reached.
    free: dict[str, int] | None = None
    # Flow control read in the claim's transaction (`queue_settings`, DESIGN.md §8.7):
    # the queue's rate limit window is full until this epoch ms; the queue's cap as the
    # claim counted it (an operator's override, or the asked cap). `claim_spread`
    # answers them per queue in `rate_waits` and `caps`. A paused queue takes nothing.
    rate_wait: int | None = None
    cap: int | None = None
    rate_waits: dict[str, int] | None = None
    caps: dict[str, int] | None = None
    # What a group commit proves the claimed rows' fences by without reading them
    # (SQLite: `WriterLock.mark`, taken before the claim); None: read them.
    mark: Any = None


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A claim's arguments (see `Store.claim`), for `Store.finalize_and_claim`."""

    queue: str
    queue_cap: int
    global_cap: int
    limit: int
    worker_id: str
    types: tuple[str, ...]
    # Rows enqueued by these (dead) workers are not taken: they wait for the recovery
    # sweep, which applies their type's strategy first.
    exclude_owners: tuple[str, ...] = ()
    # Take rows only while `worker_id` is registered and not stopped: a worker that was
    # judged dead (its row deleted by a rescue) must not claim until it registers again,
    # or its claims would belong to nobody (no rescue looks for them).
    registered: bool = False
    # The handler's rate limit (starts, period in ms), None: none. An operator's limit
    # for the queue (`queue_settings`) replaces it.
    rate: tuple[int, int] | None = None
    # The handler's limit is per key (`jobs.rate_key`): each key has its own window. A
    # keyed queue is never in a `SpreadRequest`.
    rate_keyed: bool = False


@dataclass(frozen=True, slots=True)
class SpreadRequest:
    """A claim across queues (`Store.claim_spread`): up to `limit` rows, at most each
    queue's cap less its running rows, and no more than the global cap leaves free.

    `queues` are `(name, cap)` in the order they take turns. A turn is up to `turn` rows
    of one queue (its first by claim order, within its free slots): the queues take
    their turns in that order, then a second turn each, and so on, until `limit` or the
    global cap's free slots are reached. So with `turn` 1 the rows go one per queue
    before any queue gets a second; a larger turn serves fewer queues per claim, whose
    rows (written together) share more of the table's pages.
    """

    queues: tuple[tuple[str, int], ...]
    global_cap: int
    limit: int
    worker_id: str
    types: tuple[str, ...]
    exclude_owners: tuple[str, ...] = ()
    registered: bool = False
    # The handlers' rate limits of asked queues: (name, starts, period ms).
    rates: tuple[tuple[str, int, int], ...] = ()
    turn: int = 1


# "requeue": an attempt interrupted by shutdown goes back to `pending` with its attempt
# number unchanged and no owner, or `cancelled` when its cancel was requested.
OutcomeKind = Literal["completed", "failed", "cancelled", "retry", "requeue"]


@dataclass(slots=True)
class Outcome:
    """How one claimed attempt ended, to be written as a fenced compare-and-set."""

    job_id: str
    worker_id: str
    attempt: int
    kind: OutcomeKind
    output: str | None = None
    error: str | None = None
    retry_at: int | None = None  # for kind == "retry"
    progress: float | None = None  # last reported progress, persisted with the outcome
    progress_detail: str | None = None
    release_locks: bool = False
    # False: nobody needs the terminal row, so `finalize` answers APPLIED (or None when
    # the fence did not match) instead of reading the row back.
    want_row: bool = True
    # For the attempt's record (`job_attempts`), written with the outcome when it applies.
    started_at: int | None = None
    logs: str | None = None  # JSON [[at_ms, level, message], ...]
    # The claim this outcome ends, when the runtime has it. A store may look the row up
    # at its `key`, count the row's end itself while the row still has the claim's queue
    # and scheduled_at (`sqlite/counts.py`), and, for `want_row`, build the terminal row
    # from it, reading back only the columns the claim did not return or that may have
    # moved since (`sqlite/queries.py`, FINISHED_PARTS).
    claimed: ClaimedJob | None = None


def batchable(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The outcomes a store may write in one statement for many: each ends its job
    (no retry, no requeue), holds no locks, and names a job no other outcome of the
    call names (RETURNING names rows, not outcomes: a stale attempt beside its
    re-claim goes one by one). Fewer than two: none, the single statement is cheaper."""
    seen = Counter(o.job_id for o in outcomes)
    batch = [
        o
        for o in outcomes
        if not o.release_locks and o.kind not in ("retry", "requeue") and seen[o.job_id] == 1
    ]
    return batch if len(batch) >= 2 else []


@dataclass(frozen=True, slots=True)
class JobFilter:
    status: tuple[str, ...] = ()
    queue: str | None = None
    type: str | None = None
    schedule_id: str | None = None
    parent_id: str | None = None
    workflow_id: str | None = None
    search: Search | None = None  # `_core/search.py`

    @property
    def kept_countable(self) -> bool:
        """Whether the kept counts (`job_counts`) answer a count of this filter: one by
        status and queue only."""
        return (
            self.type is None
            and self.schedule_id is None
            and self.parent_id is None
            and self.workflow_id is None
            and self.search is None
        )


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    """A workflow to write in one transaction (`Store.enqueue_workflow`): its row, its
    jobs (fresh rows; `left[i]` is row i's count of upstream jobs, 0 for a row that is
    `pending`, with `workflow_id` and `step` in the row) and its edges, as (upstream job
    id, downstream job id, the downstream step's policy, whether the upstream step is
    an `add_many` one)."""

    id: str
    name: str
    created_at: int
    rows: Sequence[JobRow]
    left: Sequence[int]
    edges: Sequence[tuple[str, str, str, bool]]
    # The workflow `jobs.retry_workflow` re-runs; its edges may then name that one's
    # completed jobs as upstream jobs, which count in no row's `left`.
    retry_of: str | None = None
    # A workflow whose id may be written already (one a job starts, under that job's
    # id, so a re-run attempt finds it): then nothing is written.
    exists_ok: bool = False


class WorkflowHead(NamedTuple):
    """A row of `workflows`."""

    id: str
    name: str
    created_at: int
    retry_of: str | None


class GroupCommit(Protocol):
    """Transaction blocks of one thread sharing one commit (a store that offers it:
    `SqliteStore.group_tx`; `_storage/sqlite/group.py` states the invariants). The
    runtime's `GroupCommitter` drives it: a block checks its job's fence with
    `fence_holds`, and `end_block` hands a kept block's completion to the flush, which
    writes it before the COMMIT; `flush` reports to `on_flushed` the kept blocks'
    waiters and their rows, or a failed commit as a `StorageError` (no rows); its
    finalizes write the time `now_ms` gives at the commit."""

    active: bool
    in_block: bool
    on_flushed: Callable[[BaseException | None, list[Any], list[JobRow | None]], None] | None
    spoil: Callable[[], None] | None
    now_ms: Callable[[], int]

    def begin_block(self) -> Any: ...
    def fence_holds(self, outcome: Outcome, mark: Any = None) -> bool: ...
    def end_block(self, keep: bool, outcome: Outcome | None = None, waiter: Any = None) -> bool: ...
    def flush(self) -> None: ...


class Store(Protocol):
    """What the runtime needs from a backend. `SqliteStore` and `PostgresStore` both
    implement it, and `tests/conformance` runs the same contract tests on both.

    Every read and write of the tables is one of these named operations; nothing above
    the storage package writes SQL or asks which backend it has. A `conn` argument is a
    transaction the caller holds, from `write` (named operations grouped in one write
    transaction, retried whole on a busy database) or `user_transaction` (the user's
    `jobs.write_tx()`, where the user's own SQL runs too): the operation runs inside it.
    """

    path: str

    def write(self, work: Callable[[Any], T], label: str) -> T:
        """Run `work(conn)` in one write transaction; `work` may only pass `conn` to this
        store's operations."""
        ...

    def user_transaction(self) -> AbstractContextManager[Any]: ...
    def close(self) -> None: ...
    # SQLite: True (and one ERROR logged) once the file was deleted or replaced under
    # the open writer; a server database has no such failure.
    def report_file_replaced(self) -> bool: ...
    def data_version(self) -> int: ...
    def enqueue(self, jobs: Sequence[NewJob], conn: Any | None = None) -> list[JobRow]: ...
    # `enqueue` of rows already in `JobRow` form (`fresh_row`'s shape): the runtime's path.
    def enqueue_rows(
        self,
        rows: Sequence[JobRow],
        conn: Any | None = None,
        rate_keys: Sequence[str | None] | None = None,
    ) -> list[JobRow]: ...
    def enqueue_keyed(
        self,
        rows: Sequence[JobRow],
        rules: Sequence[KeyRule | None],
        conn: Any | None = None,
        rate_keys: Sequence[str | None] | None = None,
    ) -> list[JobRow]:
        """`enqueue_rows` where entry i follows `rules[i]` (None: as `enqueue_rows`), in
        order, in one transaction; an entry sees what the earlier ones wrote. Every entry
        with a rule has an idempotency key. Two callers with one key, in any processes,
        are serialised: each sees what the other committed.

        Per entry, the row as stored: the entry (as with `enqueue_rows`; a successor
        under its stored key), or the existing job answered (a live or recently ended
        hit, or the debounced job as updated). Entries answered by one job all carry
        its last version."""
        ...

    def remember_queues(self, names: Sequence[str]) -> None: ...
    def queues_since(self, seq: int) -> list[tuple[int, str, str]]: ...
    def claim(
        self,
        queue: str,
        *,
        queue_cap: int,
        global_cap: int,
        limit: int,
        now_ms: int,
        worker_id: str,
        types: tuple[str, ...],
        exclude_owners: tuple[str, ...] = (),
        registered: bool = False,
        rate: tuple[int, int] | None = None,
        rate_keyed: bool = False,
    ) -> ClaimResult: ...
    def update_queue_settings(
        self, queue: str, changes: Mapping[str, Any], now_ms: int
    ) -> QueueSettingsRecord | None:
        """In one write transaction: merge `changes` (any of concurrency, rate_limit,
        rate_per_ms, paused) into the queue's settings; a row left with nothing set is
        deleted. Returns the settings now in force (None: none)."""
        ...

    def finalize(
        self, outcomes: Sequence[Outcome], now_ms: int, *, label: str = "finalize"
    ) -> list[JobRow | None]: ...
    def claim_spread(self, request: SpreadRequest, now_ms: int) -> ClaimResult:
        """Claim across `request.queues` in one transaction, every cap counted in SQL in
        it; `global_blocked` when the global cap's free slots were all taken (or none
        were free), `free` per asked queue."""
        ...

    def finalize_and_claim(
        self, outcomes: Sequence[Outcome], now_ms: int, claim: ClaimRequest | SpreadRequest
    ) -> tuple[list[JobRow | None], ClaimResult | None]:
        """`finalize`, then `claim` (or `claim_spread`) on what it freed; None for the
        claim when it failed after the outcomes were committed (the caller claims again
        later)."""
        ...

    def attempts(self, job_id: str) -> list[AttemptRow]:
        """The job's ended attempts, oldest first (each written by the transaction that
        applied its outcome, or by the rescue of its dead worker as "lost")."""
        ...

    def promote_due(self, now_ms: int) -> list[str]: ...
    def next_delayed_at(self) -> int | None: ...
    def set_progress(
        self,
        job_id: str,
        worker_id: str,
        attempt: int,
        progress: float,
        detail: str | None,
        now_ms: int,
    ) -> bool: ...
    def patch_metadata(
        self, job_id: str, worker_id: str, attempt: int, patch: dict[str, Any], now_ms: int
    ) -> dict[str, Any] | None: ...
    def try_lock(self, name: str, job_id: str, worker_id: str, now_ms: int) -> bool: ...
    def release_lock(self, name: str, job_id: str, worker_id: str, attempt: int) -> None:
        """Free `name` if this attempt still holds it: fenced on the job's claim, so a
        stale attempt (its worker judged dead, the job rescued) frees nothing."""
        ...

    def writer_busy(self) -> bool:
        """Whether a writer, in any process, is inside a write transaction now (a hint for
        dispatch; False when the backend cannot tell)."""
        ...

    # -- workers ----------------------------------------------------------------------
    def register_worker(
        self, worker_id: str, hostname: str, pid: int, handlers: Sequence[str], now_ms: int
    ) -> None:
        """Insert (or restart) a started manager's row; `handlers` are "type=strategy"."""
        ...

    def heartbeat(self, worker_id: str, now_ms: int) -> bool:
        """False when the row is gone (another process recovered us as dead)."""
        ...

    def stop_worker(self, worker_id: str, now_ms: int) -> None: ...
    def list_workers(self) -> list[WorkerRow]: ...
    def unregistered_claimers(self) -> list[str]:
        """Worker ids that own `running` rows but have no worker row: claims nobody would
        ever rescue (a worker judged dead that claimed before it registered again)."""
        ...

    def recover_worker(
        self,
        worker_id: str,
        plan: Callable[[Sequence[JobRow]], RecoveryPlan],
        cancel_error: Callable[[str], str],
        now_ms: int,
    ) -> RecoveryStats:
        """In one transaction: read the worker's live rows, apply `plan(rows)` (cancel,
        reset, disown), free its durable locks and delete its row."""
        ...

    # -- the leader lease ---------------------------------------------------------------
    def read_lease(self) -> LeaseRow | None: ...
    def take_lease(
        self, worker_id: str, *, now_ms: int, ttl_ms: int, alive: Callable[[LeaseRow], bool]
    ) -> int | None:
        """The term now held, or None when another live holder (`alive`) has the lease or
        another process is taking it at this moment."""
        ...

    def renew_lease(self, worker_id: str, term: int, *, expires_at: int) -> bool: ...
    def resign_lease(self, worker_id: str, term: int) -> None: ...

    # -- schedules (`schedule_ops.ScheduleOps`) -----------------------------------------
    def insert_schedule(self, row: ScheduleRow, conn: Any | None = None) -> None: ...
    def ensure_schedule(
        self, row: ScheduleRow, changes: Callable[[ScheduleRow], Mapping[str, Any]]
    ) -> EnsuredSchedule:
        """Insert `row` unless its `(type, name)` has a schedule; else set what
        `changes(existing)` asks on that one. One transaction: concurrent callers for one
        name all get that one row, and none fails."""
        ...

    def get_schedule(self, sid: str, conn: Any | None = None) -> ScheduleRow | None: ...
    def get_schedule_by_name(
        self, type_name: str, name: str, conn: Any | None = None
    ) -> ScheduleRow | None: ...
    def schedules_of_type(self, type_name: str) -> list[ScheduleRow]: ...
    def list_schedules(self) -> list[ScheduleRow]: ...
    def update_schedule(
        self, sid: str, fields: Mapping[str, Any], conn: Any | None = None
    ) -> None: ...
    def delete_schedule(self, sid: str, now_ms: int) -> bool: ...
    def set_schedule_next_run(self, sid: str, next_ms: int | None, now_ms: int) -> None: ...
    def catch_up_schedule(
        self, sid: str, expected_next: int, following: int | None, now_ms: int
    ) -> bool: ...
    def fire_schedule(
        self,
        sid: str,
        job: NewJob | Sequence[NewJob] | None,
        *,
        expected_next: int | None,
        last_run: int,
        next_run: int | None,
        catch_up_next: int | None,
        now_ms: int,
        decide: Decide | None = None,
        missed: Sequence[NewJob] = (),
        missed_from: int | None = None,
    ) -> list[JobRow] | None: ...
    def backfill_schedule(
        self, sid: str, plan: Callable[[ScheduleRow], Sequence[NewJob]]
    ) -> tuple[list[NewJob], list[JobRow]] | None: ...
    def manual_fire(
        self, sid: str, job: NewJob, *, consume: bool, now_ms: int
    ) -> list[JobRow] | None: ...

    def release_unconfirmed_claims(self, worker_id: str, keep: Sequence[str], now_ms: int) -> int:
        """Put back to `pending` every `running` row claimed by `worker_id` except `keep`
        (the jobs it really runs): claims whose commit the worker could not confirm.
        Returns how many rows went back."""
        ...

    def request_cancel(
        self, job_id: str, reason: str | None, error: str, now_ms: int
    ) -> tuple[str | None, str | None, JobRow | None]: ...
    def force_cancel(
        self, job_id: str, worker_id: str, attempt: int, error: str, now_ms: int
    ) -> JobRow | None: ...
    def cancel_many(
        self, queue: str | None, type_name: str | None, reason: str | None, error: str, now_ms: int
    ) -> tuple[list[tuple[str, str | None]], list[JobRow]]: ...
    def cancel_requested_among(self, ids: Sequence[str]) -> list[tuple[str, str | None]]: ...

    # -- re-runs (`jobs.retry`) ---------------------------------------------------------
    def retry_job(
        self, job_id: str, payload: str | None, *, enqueued_by: str, now_ms: int
    ) -> tuple[str | None, JobRow | None]:
        """In one write transaction: read `job_id`'s row and, when it is terminal, insert
        `retry_row` of it under a fresh id (the old row is not touched). Returns the old
        row's status (None: no such row) and the new row (None: the old one is not
        terminal, and nothing was written)."""
        ...

    def retry_matching(
        self, flt: RetryFilter, limit: int, *, enqueued_by: str, now_ms: int
    ) -> builtins.list[JobRow]:
        """In one write transaction: up to `limit` terminal rows that match `flt` and that
        no row re-runs yet (so calling it again goes on where a `limit` stopped, instead
        of re-running the same rows twice), oldest first, each re-run as by `retry_job`
        with its own payload. Returns the new rows in that order."""
        ...

    def get(self, job_id: str) -> JobRow | None: ...
    def finalize_in(self, conn: Any, outcome: Outcome, now_ms: int) -> JobRow | None:
        """`finalize` of one outcome inside the caller's open write transaction on `conn`
        (`ctx.transaction()`); None where the fence did not match."""
        ...

    # -- workflows (DESIGN.md §8.8) --
    def enqueue_workflow(self, wf: NewWorkflow, conn: Any | None = None) -> bool:
        """Write the workflow's row, its jobs and its edges in one transaction (the
        caller's, with `conn`). Nothing is looked up: the rows are fresh, without keys
        or parents. False, with nothing written, when `wf.exists_ok` and a workflow
        with its id exists."""
        ...

    def get_workflow(self, workflow_id: str) -> WorkflowHead | None: ...
    def rate_room(
        self, bucket: str, limit: int, per_ms: int, now_ms: int
    ) -> tuple[int, int | None]:
        """(room left in `bucket`'s rate window now, when a start is allowed again once it
        is spent, else None): `jobs.explain`'s read of a rate limit, no write."""
        ...

    def stranded_waiting(self, limit: int) -> builtins.list[str]:
        """Ids of `waiting` jobs none of whose upstream jobs is unfinished: nothing will
        ever release them (`doctor`); [] on a schema older than workflows."""
        ...

    def retry_workflow(
        self, workflow_id: str, *, enqueued_by: str, now_ms: int
    ) -> NewWorkflow | str | None:
        """In one transaction: read the workflow, plan its re-run
        (`workflow_retry.plan_workflow_retry`) and write it. The new workflow; None for
        an unknown id; the plan's reason (a string) when there is nothing to re-run."""
        ...

    def workflow_jobs(self, workflow_id: str) -> builtins.list[JobRow]:
        """Every job of the workflow, in the order they were written."""
        ...

    def downstream_jobs(self, job_ids: Sequence[str]) -> builtins.list[JobRow]:
        """The jobs one edge downstream of any of `job_ids` (each once)."""
        ...

    def upstream_outputs(self, job_id: str) -> builtins.list[tuple[str | None, str | None, bool]]:
        """(step, output JSON, whether the step is an `add_many` one) of each upstream job
        of `job_id`, in the order they were written."""
        ...

    def cancel_workflow(self, workflow_id: str, error: str, now_ms: int) -> builtins.list[JobRow]:
        """Cancel every waiting, pending and delayed job of the workflow with `error`
        (waiting ones first, so that no cancel releases one); returns the rows it
        cancelled, and those its cancels cancelled downstream. Running jobs are left to
        the caller's `cancel`."""
        ...

    def terminal_among(self, ids: Sequence[str]) -> list[JobRow]: ...
    def list(self, flt: JobFilter, *, limit: int, offset: int) -> list[JobRow]: ...
    def count(self, flt: JobFilter, *, cap: int | None = None) -> int:
        """Rows matching `flt`; with `cap`, at most `cap` (a count that stops reading
        there: `cap` means "at least that many")."""
        ...

    def gc(self, before_ms: int, *, batch: int = 1000) -> int:
        """Delete terminal rows finished before `before_ms` (and their attempts and edges);
        also tidies what the kept counts leave behind (minutes of the throughput chart a
        day older than `before_ms`). Returns the rows deleted."""
        ...

    # -- observers (read-only) ------------------------------------------------------
    # What `_observe/read_model.py` reads, besides get/list/count (the values are in
    # `_storage/observe.py`). A store from `open_store(..., read_only=True)` serves these
    # and refuses every write.
    def schema_version(self) -> int: ...
    def queue_counts(self) -> builtins.list[QueueCounts]:
        """Every registered queue, and every queue a row names, by name."""
        ...

    def queue_settings(self) -> builtins.list[QueueSettingsRecord]:
        """What operators set for queues (`queue_settings`), by queue name."""
        ...

    def worker_records(self) -> builtins.list[WorkerRecord]: ...
    def leader_lease(self) -> LeaderLease | None: ...
    def schedule_records(self) -> builtins.list[ScheduleRecord]:
        """Every schedule, ordered by type, name, id."""
        ...

    def job_metrics(self, bounds_ms: tuple[int, ...]) -> JobMetrics:
        """What `/metrics` takes from `jobs` (histogram buckets up to each bound, in ms)
        and the totals GC has collected: from the counts the write path keeps when
        `bounds_ms` are the kept ones, else from a pass over `jobs`."""
        ...

    def throughput(self, first_minute: int, end_minute: int) -> dict[int, tuple[int, int]]:
        """(completed, failed) jobs per minute number (`finished_at // 60000`) in
        `[first_minute, end_minute)`; minutes without any are left out."""
        ...

    def count_finished_before(self, before_ms: int) -> int:
        """How many rows `gc(before_ms)` would delete now."""
        ...

    def has_job_of_type(self, type_name: str) -> bool:
        """Whether any row of `jobs`, in any state, has this type."""
        ...

    def storage_facts(self) -> StorageFacts:
        """What `doctor` checks below the tables (can be slow: SQLite's integrity check)."""
        ...

    # -- the audit log (the console's actions, DESIGN.md §8.9) ------------------------
    def record_audit(
        self, at_ms: int, actor: str, action: str, target: str, detail: str
    ) -> AuditRecord:
        """Append one row (`detail` a JSON object's text) in a write transaction of its
        own; returns it with its id."""
        ...

    def audit_records(
        self, *, limit: int, offset: int = 0, actor: str | None = None, action: str | None = None
    ) -> builtins.list[AuditRecord]:
        """Newest first; a database from before the audit log has none."""
        ...

    def count_audit(self, *, actor: str | None = None, action: str | None = None) -> int: ...

    # -- search indexes (the console's search by a JSON field, DESIGN.md §8.9) -------
    def add_search_index(self, field: SearchField, now_ms: int) -> bool:
        """Create an index serving searches by `field` (reads every row once) and record
        it; False when the field had one already. Concurrent writers wait or go on as
        the backend allows (SQLite: they wait for the write lock; PostgreSQL: the index
        is built CONCURRENTLY, writes go on)."""
        ...

    def drop_search_index(self, field: SearchField) -> bool:
        """Drop the field's index; False when it had none."""
        ...

    def search_indexes(self) -> builtins.list[SearchIndexRecord]:
        """The fields with a search index, by name; none on a database from before them."""
        ...

    # -- workflows, observed (read-only; the console, DESIGN.md §8.9) ---------------
    def list_workflows(
        self, *, limit: int, offset: int = 0, name: str | None = None
    ) -> builtins.list[WorkflowRecord]:
        """Up to `limit` workflows (only those called `name`, when given), newest first
        (by id, which is creation order), after skipping `offset`; each with its jobs
        counted per status, in one statement. A database from before workflows has none."""
        ...

    def count_workflows(self, *, name: str | None = None) -> int: ...
    def workflow_edges(self, workflow_id: str) -> builtins.list[tuple[str, str, str, bool]]:
        """(upstream job id, job id, policy, many) of every edge into a job of the
        workflow, ordered by downstream job, then upstream job. The upstream job may be
        a job of another workflow; its edges leave with a collected job."""
        ...
