"""Every SQL statement the SQLite backend runs for jobs, in one place.

Partial indexes only serve a query that spells the status as a literal, so statuses are
written into the SQL, never bound as parameters, on the hot paths.

A job is found by its key and its id, `rowid = ? AND id = ?` (`keys.py`): the key is
`keys.key_of(conn, job_id)`, and `jobs.id` has no index (schema 4). Every index ends
with the rowid, which sorts as the id does, so orderings by id are orderings by rowid.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

from jobledger._core import ids
from jobledger._core.search import Search, SearchField
from jobledger._storage import layout as L
from jobledger._storage.layout import JOB_COLUMNS, SCHEDULE_COLUMNS

# The columns a fresh row sets: id and payload, then those every row of one
# `enqueue_many` call shares (`SHARED_COLUMNS`, positions in JOB_COLUMNS).
SHARED_COLUMNS = (
    L.C_TYPE, L.C_STATUS, L.C_QUEUE, L.C_PRIORITY, L.C_MAX_ATTEMPTS, L.C_TIMEOUT, L.C_KEY,
    L.C_PARENT, L.C_SCHEDULE, L.C_METADATA, L.C_ENQUEUED_BY, L.C_SCHEDULED_AT,
    L.C_CREATED_AT, L.C_UPDATED_AT,
)  # fmt: skip
_INSERT_COLUMNS = (
    "rowid, id, payload, type, status, queue, priority, max_attempts, timeout_ms, "
    "idempotency_key, parent_id, schedule_id, metadata, enqueued_by, scheduled_at, "
    "created_at, updated_at"
)
INSERT_JOB = (
    f"INSERT INTO jobs ({_INSERT_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# `INSERT_JOB` for a row with no idempotency key and no parent (the one-statement
# enqueue, `SqliteStore.enqueue`): those two columns are left NULL, and timeout_ms and
# schedule_id, None in most rows, may be bound as `no_value()` for a None.
INSERT_PLAIN = (
    "INSERT INTO jobs (rowid, id, payload, type, status, queue, priority, max_attempts, "
    "metadata, enqueued_by, scheduled_at, created_at, updated_at, timeout_ms, schedule_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, nullif(?, x''), nullif(?, x''))"
)

# A row whose id names no row key (one not made by `ids.new_id`, which only the store's
# own callers can pass) goes below zero, after every row there, where schema 4 put the
# rows it renumbered: found through jobs_legacy_id_idx, ordered as inserted.
LEGACY_BASE = -(1 << 62)
INSERT_UNKEYED = INSERT_JOB.replace(
    "VALUES (?,",
    f"VALUES ((SELECT coalesce(max(rowid), {LEGACY_BASE}) + 1 FROM jobs WHERE rowid < 0),",
)


@functools.cache
def insert_shared_sql(n_rows: int) -> str:
    """INSERT of `n_rows` rows that differ only in id and payload (what one `enqueue_many`
    call writes): ?1..?14 are the shared columns, in `SHARED_COLUMNS` order, then each
    row's key, id and payload. Every row names the same shared parameters, so a row binds
    three values, not seventeen; that is 1.3-1.6x faster than one JSON array expanded by
    `json_each` (the payload's JSON escaped into a string, then parsed again)."""
    k = len(SHARED_COLUMNS)
    shared = ", ".join(f"?{j}" for j in range(1, k + 1))
    values = ", ".join(
        f"(?{k + 3 * i + 1}, ?{k + 3 * i + 2}, ?{k + 3 * i + 3}, {shared})" for i in range(n_rows)
    )
    return f"INSERT INTO jobs ({_INSERT_COLUMNS}) VALUES {values}"


# The status test repeats jobs_idempotency_key_uq's condition exactly (SQLite uses a
# partial index only for a query whose WHERE contains that condition's terms).
FIND_LIVE_BY_KEY = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = ? "
    "AND (status = 'pending' OR status = 'delayed' OR status = 'running')"
)
# `unique_for`: the job that ended with the key most recently, when that was at or
# after ?2. The status test repeats jobs_ended_key_idx's condition exactly.
FIND_ENDED_BY_KEY = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = ? "
    "AND (status = 'completed' OR status = 'failed' OR status = 'cancelled') "
    "AND finished_at >= ? ORDER BY finished_at DESC LIMIT 1"
)
# `debounce`: the newest waiting job stored under the key ?5 or a successor of it (below
# ?6, `interface.SUCCESSOR_END` after the key) takes the entry's payload, status and time.
# One range of jobs_idempotency_key_uq, whose condition the inner test repeats.
DEBOUNCE_WAITING = (
    "UPDATE jobs SET payload = ?1, status = ?2, scheduled_at = ?3, updated_at = ?4 "
    "WHERE rowid = (SELECT rowid FROM jobs WHERE idempotency_key >= ?5 "
    "AND idempotency_key < ?6 "
    "AND (status = 'pending' OR status = 'delayed' OR status = 'running') "
    "AND status <> 'running' ORDER BY rowid DESC LIMIT 1) "
    f"RETURNING {JOB_COLUMNS}"
)
PARENT_EXISTS = "SELECT 1 FROM jobs WHERE rowid = ? AND id = ?"
REGISTER_QUEUE = "INSERT OR IGNORE INTO queues (name, type, created_at) VALUES (?, ?, ?)"
QUEUES_SINCE = "SELECT seq, name, type FROM queues WHERE seq > ? ORDER BY seq"

COUNT_RUNNING_IN_QUEUE = "SELECT count(*) FROM jobs WHERE status = 'running' AND queue = ?"
COUNT_RUNNING = "SELECT count(*) FROM jobs WHERE status = 'running'"


@functools.cache
def claim_sql(n_types: int, n_excluded: int = 0, keyed: bool = False) -> str:
    """Claim up to `?` rows of one queue, restricted to the job types this worker runs;
    `keyed`: each row's rate key follows its columns.

    The outer compare-and-set is spelled `+status`: the unary plus keeps the planner from
    driving the UPDATE through an index on status (every pending row, O(backlog) per
    claim; schema version 1 had one) instead of the rowid lookup of the few rows chosen.
    The rowid comes back first, for the claim order.
    """
    excluded = (
        f"AND (enqueued_by IS NULL OR enqueued_by NOT IN ({','.join('?' * n_excluded)})) "
        if n_excluded
        else ""
    )
    return (
        "UPDATE jobs SET status = 'running', worker_id = ?, started_at = ?, updated_at = ? "
        "WHERE rowid IN (SELECT rowid FROM jobs WHERE status = 'pending' "
        "AND cancel_requested = 0 AND queue = ? AND scheduled_at <= ? "
        f"AND type IN ({','.join('?' * n_types)}) {excluded}"
        "ORDER BY priority, scheduled_at, rowid "
        "LIMIT ?) AND +status = 'pending' RETURNING rowid, id, type, queue, priority, "
        "payload, attempt, max_attempts, timeout_ms, metadata, parent_id, schedule_id, "
        "scheduled_at, started_at, workflow_id" + (", coalesce(rate_key, '')" if keyed else "")
    )


@functools.cache
def keyed_candidates_sql(n_types: int, n_excluded: int, n_blocked: int) -> str:
    """The head of one queue (as `claim_sql` orders it) with each row's rate key, skipping
    keys whose window is spent (a keyed rate limit's claim picks from these)."""
    excluded = (
        f"AND (enqueued_by IS NULL OR enqueued_by NOT IN ({','.join('?' * n_excluded)})) "
        if n_excluded
        else ""
    )
    blocked = (
        f"AND coalesce(rate_key, '') NOT IN ({','.join('?' * n_blocked)}) " if n_blocked else ""
    )
    return (
        "SELECT rowid, coalesce(rate_key, '') FROM jobs WHERE status = 'pending' "
        "AND cancel_requested = 0 AND queue = ? AND scheduled_at <= ? "
        f"AND type IN ({','.join('?' * n_types)}) {excluded}{blocked}"
        "ORDER BY priority, scheduled_at, rowid LIMIT ?"
    )


# The rows a keyed claim picked (rowids as a JSON array), in `claim_sql`'s RETURNING shape.
CLAIM_ROWIDS = (
    "UPDATE jobs SET status = 'running', worker_id = ?, started_at = ?, updated_at = ? "
    "WHERE rowid IN (SELECT value FROM json_each(?)) AND +status = 'pending' "
    "RETURNING rowid, id, type, queue, priority, payload, attempt, max_attempts, timeout_ms, "
    "metadata, parent_id, schedule_id, scheduled_at, started_at, workflow_id"
)


# Queues per `claim_spread` statement: each is one term of a compound SELECT, within
# SQLite's default bound on compound terms (500), and a claim asks for fewer slots.
SPREAD_MAX = 128


@functools.cache
def spread_counts_sql(n_queues: int) -> str:
    """The running rows of all queues, then of each of `n_queues` queues (?1..?n), in
    one statement and so one snapshot: the caps a spread claim counts."""
    each = ", ".join(f"(SELECT count(*) FROM jobs WHERE status = 'running' AND queue = ?{i})"
                     for i in range(1, n_queues + 1))  # fmt: skip
    return f"SELECT ({COUNT_RUNNING}), {each}"


# Every queue's running rows in one pass over the running index (in its order, so no
# sort): what `spread_counts_sql` counts, for all queues at once. Under a global cap the
# index holds at most about that many entries (and a claim that rides in a finalize
# comes after the finalize ended its batch's), so the pass can cost less than one search
# per queue asked (`SPREAD_SCAN_PER_QUEUE`).
RUNNING_BY_QUEUE = "SELECT queue, count(*) FROM jobs WHERE status = 'running' GROUP BY queue"
# Running rows per queue asked up to which the pass costs no more than the searches:
# over 66 queues asked of 1,000, the searches took 66-79 us, the pass 31 us over 50
# running rows, 59 over 100 and 120 over 200 (`bench/spread_claim.py --running N`).
SPREAD_SCAN_PER_QUEUE = 2


def _spread_filters(n_types: int, n_excluded: int) -> tuple[str, str, int]:
    """The spread statements' type list (?3..) and excluded owners' clause, numbered
    after ?1 worker and ?2 now, and the number of the next parameter."""
    types = ",".join(f"?{3 + i}" for i in range(n_types))
    base = 3 + n_types
    excluded = (
        "AND (enqueued_by IS NULL OR enqueued_by NOT IN "
        f"({','.join(f'?{base + i}' for i in range(n_excluded))})) "
        if n_excluded
        else ""
    )
    return types, excluded, base + n_excluded


@functools.cache
def spread_heads_sql(n_types: int, n_excluded: int = 0) -> str:
    """Claim the head row of each queue named in a JSON array, in the array's order (the
    turns), up to a total LIMIT: a spread claim's first rank, and each rank after it
    within the first turns (a queue's next row is its head once the one before is
    claimed); `spread_claim_sql` takes the turns after every asked queue's first.

    One index search per queue and no sort: the queues are the outer loop (CROSS JOIN
    keeps `json_each` outside, and its rows come in array order), each joined to its head
    row by rowid, so the LIMIT stops at the first `limit` queues that have a row and a dry
    queue costs one search. `spread_claim_sql` alone, a window sort per queue, took 2.6
    times as long (`bench/spread_claim.py`: 50 rows over 66 of 1,000 queues, 1,460
    against 570 us). Parameters: ?1 worker, ?2 now, then the types, the excluded owners,
    the queues (JSON), the total limit. The outer `+status` is `claim_sql`'s.
    """
    types, excluded, names = _spread_filters(n_types, n_excluded)
    return (
        "UPDATE jobs SET status = 'running', worker_id = ?1, started_at = ?2, updated_at = ?2 "
        f"WHERE rowid IN (SELECT head.rowid FROM json_each(?{names}) AS turn "
        "CROSS JOIN jobs AS head ON head.rowid = (SELECT rowid FROM jobs "
        "WHERE status = 'pending' AND cancel_requested = 0 AND queue = turn.value "
        f"AND scheduled_at <= ?2 AND type IN ({types}) {excluded}"
        f"ORDER BY priority, scheduled_at, rowid LIMIT 1) LIMIT ?{names + 1}) "
        "AND +status = 'pending' "
        "RETURNING rowid, id, type, queue, priority, payload, attempt, max_attempts, "
        "timeout_ms, metadata, parent_id, schedule_id, scheduled_at, started_at, workflow_id"
    )


@functools.cache
def spread_claim_sql(n_queues: int, n_types: int, n_excluded: int = 0, turn: int = 1) -> str:
    """Claim across `n_queues` queues in one statement, taking turns: each queue's head
    rows (at most its own LIMIT), ranked within the queue (`rn`) after the rows it took
    already in this claim (its `skip`), so that its turn (`turn` ranks make one) is
    `(skip + rn - 1) / turn`; ordered by turn, then the queue's place (`ord`), then rank,
    up to the total LIMIT. So the rows go a turn per queue before any gets another.

    Parameters: ?1 worker, ?2 now, then the types, the excluded owners, the total limit,
    then per queue its name, its limit and its skip. The outer `+status` is `claim_sql`'s.
    """
    types, excluded, total = _spread_filters(n_types, n_excluded)
    terms = []
    for i in range(n_queues):
        name, limit, skip = total + 1 + 3 * i, total + 2 + 3 * i, total + 3 + 3 * i
        terms.append(
            f"SELECT {i} AS ord, rid, ?{skip} + row_number() OVER (ORDER BY priority, "
            "scheduled_at, rid) AS rn FROM (SELECT rowid AS rid, priority, scheduled_at FROM "
            f"jobs WHERE status = 'pending' AND cancel_requested = 0 AND queue = ?{name} "
            f"AND scheduled_at <= ?2 AND type IN ({types}) {excluded}"
            f"ORDER BY priority, scheduled_at, rowid LIMIT ?{limit})"
        )
    return (
        "UPDATE jobs SET status = 'running', worker_id = ?1, started_at = ?2, updated_at = ?2 "
        f"WHERE rowid IN (SELECT rid FROM ({' UNION ALL '.join(terms)}) "
        f"ORDER BY (rn - 1) / {int(turn)}, ord, rn LIMIT ?{total}) AND +status = 'pending' "
        "RETURNING rowid, id, type, queue, priority, payload, attempt, max_attempts, "
        "timeout_ms, metadata, parent_id, schedule_id, scheduled_at, started_at, workflow_id"
    )


_FENCE = "WHERE rowid = ? AND id = ? AND status = 'running' AND worker_id = ? AND attempt = ?"
# Reading the row back costs about as much as the write; FINISH_NO_ROW is for outcomes
# nobody is waiting on (`Outcome.want_row`), and reports through rowcount.
# Its output, error, progress and detail may be bound as `no_value()` for a None: most
# outcomes have no error and no progress.
FINISH_NO_ROW = (
    "UPDATE jobs SET status = ?, output = nullif(?, x''), error = nullif(?, x''), "
    "finished_at = ?, updated_at = ?, progress = coalesce(nullif(?, x''), progress), "
    f"progress_detail = coalesce(nullif(?, x''), progress_detail) {_FENCE}"
)
FINISH = f"{FINISH_NO_ROW} RETURNING {JOB_COLUMNS}"
# Whether FINISH's fence holds now: a group commit's block reads it under the write lock
# its group holds until the commit, which then writes the finalize (`sqlite/group.py`).
FENCE_HOLDS = f"SELECT 1 FROM jobs {_FENCE}"
# Outcomes per `finish_many_sql` statement: 1 + 11 * 50 parameters, within SQLite's oldest
# bound-parameter limit (999).
FINISH_CHUNK = 50


# JOB_COLUMNS named on `jobs`: in `finish_many_sql`'s UPDATE .. FROM, `o` has columns of
# the same names.
_JOBS_COLUMNS = ", ".join(f"jobs.{c}" for c in JOB_COLUMNS.split(", "))


# What a fenced finalize returns for an outcome that carries its claim
# (`Outcome.claimed`), so that the terminal row is built, not read whole
# (`store.terminal_row`): the columns the claim did not return, and those another
# writer may move while the job runs (a cancel request, `ctx.patch_metadata`, progress,
# a deleted parent or schedule, a disown's `enqueued_by`, a reset and re-claim's
# `started_at`). The rest is the claim's (FROM_THE_CLAIM), the outcome's or the
# finalize's time; tests/unit/test_terminal_row_rule.py fails on a new statement that
# moves a claim's column on a running row. Reading a column back costs about 1,100
# instructions in CPython 3.11's sqlite3 (it releases and retakes the GIL around each),
# so 13 columns instead of 28 took a sixth off what awaiting a handle cost over a plain
# finalize (docs/benchmarks.md, seventeenth round).
FINISHED_PARTS = (
    "id", "idempotency_key", "parent_id", "schedule_id", "metadata", "progress",
    "progress_detail", "cancel_requested", "started_at", "created_at", "enqueued_by",
    "retry_of", "step",
)  # fmt: skip
# The columns `terminal_row` takes from the claim: no statement may change them on a
# running row (tests/unit/test_terminal_row_rule.py).
FROM_THE_CLAIM = (
    "type", "queue", "priority", "payload", "max_attempts", "timeout_ms", "scheduled_at",
    "workflow_id",
)  # fmt: skip


@functools.cache
def finish_many_sql(n_rows: int, rows: bool | Literal["parts"] = False) -> str:
    """FINISH_NO_ROW for `n_rows` outcomes in one statement: ?1 is the time, then per
    outcome its key, id, worker_id, attempt, status, output, error, progress,
    progress_detail, and the claim's queue and scheduled_at (NULL when unknown).
    RETURNING names the rows whose fence matched; with `rows`, it returns those rows
    whole (FINISH's answer, for outcomes a handle waits on), so a waited-on job costs no
    statement of its own; with "parts", FINISHED_PARTS. Its last column is the row's
    `started_at` where the statement counts the row itself (`sqlite/counts.py`: the row
    had the shape the claim left, so `tally` moved to 1 or 2 and the count trigger's body
    did not run), else NULL (`tally` 0: the trigger counted it).

    One statement instead of one per job halves the finalize's SQL cost (binding and
    stepping a statement per row is what costs, not the B-tree work); the outcomes are
    bound values in a VALUES list rather than a JSON array that every column's
    `json_extract` parses again.

    The values that may be None (output to scheduled_at) may be bound as `no_value()`.
    """
    values = ", ".join(
        "("
        + ", ".join(_finish_value(2 + FINISH_VALUES * i + j, j) for j in range(FINISH_VALUES))
        + ")"
        for i in range(n_rows)
    )
    return (
        "WITH o (key, id, worker_id, attempt, status, output, error, progress, detail, "
        f"queue, scheduled_at) AS NOT MATERIALIZED (VALUES {values}) "
        "UPDATE jobs SET status = o.status, output = o.output, error = o.error, "
        "finished_at = ?1, updated_at = ?1, progress = coalesce(o.progress, jobs.progress), "
        "progress_detail = coalesce(o.detail, jobs.progress_detail), "
        "tally = CASE WHEN jobs.finished_at IS NULL AND jobs.started_at IS NOT NULL "
        "AND jobs.queue IS o.queue AND jobs.scheduled_at IS o.scheduled_at "
        "THEN CASE WHEN jobs.tally = 1 THEN 2 ELSE 1 END ELSE 0 END FROM o "
        "WHERE jobs.rowid = o.key AND jobs.id = o.id AND jobs.status = 'running' "
        "AND jobs.worker_id = o.worker_id AND jobs.attempt = o.attempt "
        f"RETURNING {_returning(rows)}, "
        "CASE WHEN jobs.tally = 0 THEN NULL ELSE jobs.started_at END"
    )


# Bound values per outcome in `finish_many_sql`; from the sixth on (output, error,
# progress, progress_detail, queue, scheduled_at) a None is bound as `no_value()`.
FINISH_VALUES = 11
_FIRST_NULLABLE = 5


def _finish_value(n: int, j: int) -> str:
    return f"nullif(?{n}, x'')" if j >= _FIRST_NULLABLE else f"?{n}"


def no_value() -> bytearray:
    """What the hot statements (`finish_many_sql`, FINISH_NO_ROW, INSERT_PLAIN) are
    given for a None in a column that may be NULL: a zero-length blob, which their
    `nullif(?, x'')` makes NULL again. None of those columns ever holds a blob.

    CPython 3.11's sqlite3 binds None through its adapter registry, looking up
    `__adapt__` on a type that lacks it, and formats and drops that AttributeError each
    time: about 2,000 instructions a None, three a job of a no-op drain and four an
    enqueue (docs/benchmarks.md, thirtieth round). A bytearray it binds directly. A new
    one each statement: a bytearray is mutable, so none is shared."""
    return bytearray()


def _returning(rows: bool | Literal["parts"]) -> str:
    if rows == "parts":
        return ", ".join(f"jobs.{c}" for c in FINISHED_PARTS)
    return _JOBS_COLUMNS if rows else "jobs.id"


ATTEMPT_COLUMNS = "attempt, worker_id, started_at, finished_at, outcome, error, logs"
# See _storage/attempts.py for what is stored, `n` and the order.
ATTEMPTS_OF = (
    f"SELECT n, {ATTEMPT_COLUMNS} FROM job_attempts WHERE job_key = ? ORDER BY attempt, n >= 0, -n"
)
# A record that ends an attempt (n = its number): parameters key, then ATTEMPT_COLUMNS.
# OR IGNORE: a fenced outcome ends each number at most once, so the key is free; were it
# ever taken, losing the record beats failing the finalize that moves the job.
INSERT_ENDED_ATTEMPT = (
    f"INSERT OR IGNORE INTO job_attempts (job_key, n, {ATTEMPT_COLUMNS}) "
    "VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
)
# An unspent attempt's record (interrupted, lost): the job's next negative n.
INSERT_UNSPENT_ATTEMPT = (
    f"INSERT INTO job_attempts (job_key, n, {ATTEMPT_COLUMNS}) VALUES (?1, "
    "(SELECT coalesce(min(n), 0) - 1 FROM job_attempts WHERE job_key = ?1 AND n < 0), "
    "?2, ?3, ?4, ?5, ?6, ?7, ?8)"
)
# A retry's log lines, added to the record the retry's trigger wrote
# (migrations/0006_attempts.sql).
SET_ATTEMPT_LOGS = "UPDATE job_attempts SET logs = ? WHERE job_key = ? AND n = ?"


RETRY = (
    "UPDATE jobs SET status = 'delayed', attempt = attempt + 1, error = ?, scheduled_at = ?, "
    "started_at = NULL, worker_id = NULL, updated_at = ? "
    f"{_FENCE} AND cancel_requested = 0 RETURNING {JOB_COLUMNS}"
)
# A retryable failure of a row whose cancel was requested (by another process, before
# this worker fired the token) is a cancel: never retried, and no claim would take it.
CANCEL_INSTEAD_OF_RETRY = (
    "UPDATE jobs SET status = 'cancelled', error = json_object('code', 'JOB_CANCELLED', "
    "'message', coalesce(cancel_reason, 'Cancelled by user'), 'retryable', json('false'), "
    "'params', json_object('reason', 'cancel')), finished_at = ?, updated_at = ?, "
    "progress = coalesce(?, progress), progress_detail = coalesce(?, progress_detail) "
    f"{_FENCE} AND cancel_requested = 1 RETURNING {JOB_COLUMNS}"
)
# Shutdown interrupted the attempt: the row is work again, claimable at once by any
# worker (no owner, so no sweep waits for it), its attempt not spent.
REQUEUE = (
    "UPDATE jobs SET status = 'pending', started_at = NULL, worker_id = NULL, "
    "enqueued_by = NULL, updated_at = ?, progress = coalesce(?, progress), "
    "progress_detail = coalesce(?, progress_detail) "
    f"{_FENCE} AND cancel_requested = 0 RETURNING {JOB_COLUMNS}"
)
RELEASE_JOB_LOCKS = "DELETE FROM locks WHERE job_id = ? AND worker_id = ?"
SET_PROGRESS = f"UPDATE jobs SET progress = ?, progress_detail = ?, updated_at = ? {_FENCE}"
GET_METADATA_FENCED = f"SELECT metadata FROM jobs {_FENCE}"
SET_METADATA_FENCED = f"UPDATE jobs SET metadata = ?, updated_at = ? {_FENCE}"

PROMOTE_DUE = (
    "UPDATE jobs SET status = 'pending', updated_at = ? "
    "WHERE status = 'delayed' AND scheduled_at <= ? RETURNING queue"
)
NEXT_DELAYED_AT = "SELECT min(scheduled_at) FROM jobs WHERE status = 'delayed'"

REQUEST_CANCEL = (
    "UPDATE jobs SET cancel_requested = 1, cancel_reason = coalesce(cancel_reason, ?), "
    "updated_at = ? WHERE rowid = ? AND id = ? "
    "AND status IN ('pending', 'delayed', 'running', 'waiting') RETURNING status, worker_id"
)
CANCEL_WAITING = (
    "UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, updated_at = ? "
    "WHERE rowid = ? AND id = ? AND status IN ('pending', 'delayed', 'waiting') "
    f"RETURNING {JOB_COLUMNS}"
)
FORCE_CANCEL_RUNNING = (
    "UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, updated_at = ?, "
    f"output = NULL {_FENCE} RETURNING {JOB_COLUMNS}"
)
CANCEL_MANY_REQUEST = (
    "UPDATE jobs SET cancel_requested = 1, cancel_reason = coalesce(cancel_reason, ?), "
    "updated_at = ? WHERE status = 'running' AND {where} RETURNING id, worker_id"
)
# `{statuses}`: 'waiting' first, then 'pending', 'delayed' (CANCEL_WORKFLOW_STATUS says
# why); each cancel of a workflow job propagates by its trigger.
CANCEL_MANY_WAITING = (
    "UPDATE jobs SET status = 'cancelled', cancel_requested = 1, error = ?, finished_at = ?, "
    "updated_at = ? WHERE status IN ({statuses}) AND {where} "
    f"RETURNING {JOB_COLUMNS}"
)
NOT_RUNNING_YET = ("'waiting'", "'pending', 'delayed'")
CANCEL_REQUESTED_AMONG = (
    "SELECT id, cancel_reason FROM jobs WHERE rowid IN ({keys}) AND id IN ({ids}) "
    "AND cancel_requested = 1"
)

GET_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE rowid = ? AND id = ?"

# Re-runs (`jobs.retry`): enqueue's INSERT, and `retry_of` too. Only this path names the
# column, so enqueue's statements and their parameters are unchanged.
INSERT_RETRY = (
    f"INSERT INTO jobs ({_INSERT_COLUMNS}, retry_of, step) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A re-run of a workflow step (migration 12) takes the old job's edges from its ended
# upstream jobs, so its `ctx.upstream` is the old one's; nothing waits on it.
COPY_DEPS = (
    "INSERT INTO job_deps (upstream_key, job_key, policy, many) "
    "SELECT d.upstream_key, ?, d.policy, d.many FROM job_deps d "
    "JOIN jobs u ON u.rowid = d.upstream_key WHERE d.job_key = ? "
    "AND u.status IN ('completed', 'failed', 'cancelled')"
)


def retry_matching_sql(
    statuses: tuple[str, ...], queue: bool, type_name: bool, search: str | None = None
) -> str:
    """Terminal rows of `statuses` (with `queue = ?`, `type = ?` and the condition
    `search` (`search_sql`'s, its parameters after those) when asked) that no row
    re-runs yet (jobs_retry_of_idx), oldest first, `LIMIT ?`. The statuses are literals,
    so a single `failed` or `cancelled` reads its partial index, in rowid order."""
    if not statuses or any(s not in ("completed", "failed", "cancelled") for s in statuses):
        raise ValueError(f"not terminal statuses: {statuses!r}")
    literals = ", ".join(f"'{s}'" for s in sorted(set(statuses)))
    parts = [f"status = {literals}" if len(set(statuses)) == 1 else f"status IN ({literals})"]
    if queue:
        parts.append("queue = ?")
    if type_name:
        parts.append("type = ?")
    if search is not None:
        parts.append(f"({search})")
    parts.append("NOT EXISTS (SELECT 1 FROM jobs r WHERE r.retry_of = jobs.id)")
    return f"SELECT {JOB_COLUMNS} FROM jobs WHERE {' AND '.join(parts)} ORDER BY rowid LIMIT ?"


_STATUSES = frozenset(
    ("pending", "delayed", "running", "completed", "failed", "cancelled", "waiting")
)
# Statuses with a partial index of their own; a listing of only these reads those indexes
# (few rows, sorted) instead of walking every row. `failed` and `cancelled` are indexed
# by status alone, so their entries are in rowid order and a listing needs no sort.
_INDEXED = frozenset(("delayed", "running", "failed", "cancelled"))
_BY_ID = frozenset(("failed", "cancelled"))


# The indexed error code (migration 16): NULL for an error that is not JSON, so a
# hostile row cannot make a write fail on the index.
ERROR_CODE = "CASE WHEN json_valid(error) THEN json_extract(error, '$.code') END"


def field_expr(field: SearchField) -> str:
    """The JSON value at `field` as text, NULL where the row's JSON does not parse (a
    hand-written row must not fail a search) or has no such field. Booleans are spelled
    by `json_type`, as PostgreSQL's `#>>` writes them.

    The path is a literal, never a parameter: a search index (`search_index.py`) is an
    index on this very text, and SQLite uses it only for a query that spells the same
    expression. The field's segments are checked names (`_core/search.py`)."""
    col = field.kind  # "payload" or "metadata"
    path = "$." + ".".join(f'"{p}"' for p in field.path)
    return (
        f"CASE WHEN json_valid({col}) THEN CASE json_type({col}, '{path}') "
        "WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
        f"ELSE CAST(json_extract({col}, '{path}') AS TEXT) END END"
    )


def search_sql(term: Search) -> tuple[str, list[Any]]:
    """The condition of a console search (`_core/search.py`). A JSON value is compared
    as text (`field_expr`)."""
    if term.kind == "id":
        # The rows keyed by ids that can start with the prefix are one rowid range
        # (`ids.key_range`); rows from before schema 4 sit below zero (keys.py).
        keys = ids.key_range(term.value)
        if keys is None:
            return "rowid < 0 AND id LIKE ? ESCAPE '\\'", [term.like_prefix()]
        return (
            "(rowid BETWEEN ? AND ? OR rowid < 0) AND id LIKE ? ESCAPE '\\'",
            [*keys, term.like_prefix()],
        )
    if term.kind == "error":
        # jobs_error_code_idx's expression and condition, as SQLite needs them spelled.
        return f"error IS NOT NULL AND {ERROR_CODE} = ?", [term.value]
    assert term.field is not None
    return f"({field_expr(term.field)}) = ?", [term.value]


@dataclass(frozen=True, slots=True)
class JobsWhere:
    """A job listing's filters as SQL: `list_sql` and `count_sql` take `params` in order."""

    status: tuple[str, ...] = ()
    queue: str | None = None
    type_name: str | None = None
    schedule_id: str | None = None
    parent_id: str | None = None
    workflow_id: str | None = None
    search: Search | None = None

    def _clause(self) -> tuple[str, list[Any], str]:
        parts: list[str] = []
        params: list[Any] = []
        order = "rowid DESC"
        statuses = sorted(set(self.status))
        if statuses:
            unknown = [s for s in statuses if s not in _STATUSES]
            if unknown:  # matches nothing; bound, never spliced into the SQL
                parts.append(f"status IN ({','.join('?' * len(statuses))})")
                params.extend(statuses)
            elif len(statuses) == 1:
                # Known statuses are literals: a partial index serves only a query that
                # names its status in the SQL text.
                parts.append(f"status = '{statuses[0]}'")
                if statuses[0] in _INDEXED and statuses[0] not in _BY_ID:
                    order = "+rowid DESC"  # keeps the planner on the partial index
            elif all(s in _INDEXED for s in statuses):
                union = " UNION ALL ".join(
                    f"SELECT rowid FROM jobs WHERE status = '{s}'" for s in statuses
                )
                parts.append(f"rowid IN ({union})")
                order = "+rowid DESC"
            else:
                literals = ", ".join(f"'{s}'" for s in statuses)
                parts.append(f"status IN ({literals})")
        for column, value in (
            ("queue", self.queue),
            ("type", self.type_name),
            ("schedule_id", self.schedule_id),
            ("parent_id", self.parent_id),
            ("workflow_id", self.workflow_id),
        ):
            if value is not None:
                parts.append(f"{column} = ?")
                params.append(value)
        if self.search is not None:
            sql, bound = search_sql(self.search)
            parts.append(sql)
            params.extend(bound)
        return (" WHERE " + " AND ".join(parts) if parts else ""), params, order

    def list_sql(self, *, limit: int, offset: int) -> tuple[str, tuple[Any, ...]]:
        """Newest first. Ids carry `created_at`'s millisecond in their top bits, and the
        rowid sorts as the id, so `rowid DESC` is the contract's `created_at DESC, id
        DESC` (schema 0002, 0004)."""
        where, params, order = self._clause()
        sql = f"SELECT {JOB_COLUMNS} FROM jobs{where} ORDER BY {order} LIMIT ? OFFSET ?"
        return sql, (*params, limit, offset)

    def count_sql(self, cap: int | None = None) -> tuple[str, tuple[Any, ...]]:
        """The count; with `cap`, of at most `cap` rows (reading no more than that)."""
        where, params, _ = self._clause()
        if cap is None:
            return f"SELECT count(*) FROM jobs{where}", tuple(params)
        return (
            f"SELECT count(*) FROM (SELECT 1 FROM jobs{where} LIMIT ?)",
            (*params, cap),
        )


# Workflows (migration 11). A workflow's rows are inserted with their row keys, their
# workflow and step, and `upstream_left`; their edges by row key.
INSERT_WORKFLOW = "INSERT INTO workflows (id, name, created_at, retry_of) VALUES (?, ?, ?, ?)"
INSERT_WORKFLOW_JOB = (
    f"INSERT INTO jobs ({_INSERT_COLUMNS}, workflow_id, step, upstream_left, retry_of) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_JOB_DEP = "INSERT INTO job_deps (upstream_key, job_key, policy, many) VALUES (?, ?, ?, ?)"
GET_WORKFLOW = "SELECT id, name, created_at, retry_of FROM workflows WHERE id = ?"
WORKFLOW_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs WHERE workflow_id = ? ORDER BY rowid"
DOWNSTREAM_JOBS = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE rowid IN (SELECT d.job_key FROM job_deps d "
    "WHERE d.upstream_key IN (SELECT value FROM json_each(?)))"
)
UPSTREAM_OUTPUTS = (
    "SELECT u.step, u.output, d.many FROM job_deps d JOIN jobs u ON u.rowid = d.upstream_key "
    "WHERE d.job_key = ? ORDER BY u.rowid"
)
# Waiting rows first, so that no pending row's cancel can release one (its trigger
# finds it cancelled already).
CANCEL_WORKFLOW_STATUS = (
    "UPDATE jobs SET status = 'cancelled', finished_at = ?1, updated_at = ?1, error = ?2 "
    "WHERE workflow_id = ?3 AND status = ?4 RETURNING " + JOB_COLUMNS
)

# `doctor`: waiting rows none of whose upstream jobs is unfinished, which nothing will
# release (the release trigger makes none; a hand-edited table can), and fires a schedule
# held back (`buffer_one`) while none of its jobs is left to end. A scan of the table:
# `doctor` is no hot path.
STRANDED_WAITING = (
    "SELECT j.id FROM jobs j WHERE j.status = 'waiting' AND NOT EXISTS (SELECT 1 FROM "
    "job_deps d JOIN jobs u ON u.rowid = d.upstream_key WHERE d.job_key = j.rowid "
    "AND u.status IN ('waiting', 'pending', 'delayed', 'running')) "
    "AND NOT (j.schedule_id IS NOT NULL AND j.workflow_id IS NULL AND j.step IS NULL "
    "AND EXISTS (SELECT 1 FROM jobs o WHERE o.schedule_id = j.schedule_id "
    "AND o.finished_at IS NULL AND o.status IN ('pending', 'delayed', 'running'))) "
    "ORDER BY j.rowid LIMIT ?"
)
HAS_JOB_DEPS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'job_deps'"

# A workflow whose every job GC collected (its rows and edges went with them). A workflow
# commits with its jobs, so one being written is never seen without them.
GC_WORKFLOWS = (
    "DELETE FROM workflows WHERE NOT EXISTS "
    "(SELECT 1 FROM jobs WHERE jobs.workflow_id = workflows.id)"
)

# The ids are compared by the caller, on the few rows this returns: an `id IN` list
# beside the keys cost SQLite an index of the list per statement, more than the lookups
# (`Store.terminal_among` reads every awaited handle's row).
TERMINAL_AMONG = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE rowid IN ({{keys}}) "
    "AND status IN ('completed', 'failed', 'cancelled')"
)
# A workflow job whose output a job yet to end will read (`ctx.upstream`) is kept past
# the retention; a job outside every workflow has no `step` and pays one NULL test.
# The throughput chart's minutes (migration 16) older than what GC collects by more than
# `observe.MINUTES_KEPT`: the chart reads at most that far back.
GC_MINUTES = "DELETE FROM job_minutes WHERE minute < ?"
GC_TERMINAL = (
    "DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs j WHERE finished_at IS NOT NULL "
    "AND finished_at < ? AND status IN ('completed', 'failed', 'cancelled') "
    "AND (step IS NULL OR NOT EXISTS (SELECT 1 FROM job_deps d JOIN jobs w "
    "ON w.rowid = d.job_key WHERE d.upstream_key = j.rowid "
    "AND w.status IN ('waiting', 'pending', 'delayed', 'running'))) LIMIT ?)"
)

# Durable named locks. A lock is free when no row exists, or when its holder job no
# longer runs under the claim that took it (finished, rescued, or its worker is gone).
TRY_LOCK = (
    "INSERT INTO locks (name, job_id, job_rowid, worker_id, acquired_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET job_id = excluded.job_id, "
    "job_rowid = excluded.job_rowid, worker_id = excluded.worker_id, "
    "acquired_at = excluded.acquired_at "
    "WHERE (locks.job_id = excluded.job_id AND locks.worker_id = excluded.worker_id) "
    "OR NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.rowid = locks.job_rowid "
    "AND jobs.id = locks.job_id "
    "AND jobs.status = 'running' AND jobs.worker_id = locks.worker_id)"
)
# Fenced on the claim: a stale attempt must not free the lock a rescuer holds now.
RELEASE_LOCK = (
    "DELETE FROM locks WHERE name = ? AND job_id = ? AND worker_id = ? AND EXISTS ("
    "SELECT 1 FROM jobs WHERE jobs.rowid = locks.job_rowid AND jobs.id = locks.job_id "
    "AND jobs.status = 'running' AND jobs.worker_id = locks.worker_id AND jobs.attempt = ?)"
)
# Claims whose commit the worker could not confirm, put back (`?` ids are kept).
RELEASE_UNCONFIRMED = (
    "UPDATE jobs SET status = 'pending', started_at = NULL, worker_id = NULL, updated_at = ? "
    "WHERE status = 'running' AND worker_id = ? AND id NOT IN (SELECT value FROM json_each(?))"
)

# Workers and recovery.
REGISTER_WORKER = (
    "INSERT OR REPLACE INTO workers (id, hostname, pid, handlers, started_at, heartbeat_at, "
    "stopped_at) VALUES (?, ?, ?, ?, ?, ?, NULL)"
)
HEARTBEAT = "UPDATE workers SET heartbeat_at = ? WHERE id = ? AND stopped_at IS NULL"
STOP_WORKER = "UPDATE workers SET stopped_at = ?, heartbeat_at = ? WHERE id = ?"
LIST_WORKERS = (
    "SELECT id, hostname, pid, handlers, started_at, heartbeat_at, stopped_at FROM workers"
)
DELETE_WORKER = "DELETE FROM workers WHERE id = ?"
WORKER_REGISTERED = "SELECT 1 FROM workers WHERE id = ? AND stopped_at IS NULL"
UNREGISTERED_CLAIMERS = (
    "SELECT DISTINCT worker_id FROM jobs WHERE status = 'running' "
    "AND worker_id NOT IN (SELECT id FROM workers)"
)
LIVE_ROWS_OF_WORKER = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE "
    "(status = 'running' AND worker_id = ?) "
    "OR (status IN ('pending', 'delayed') AND enqueued_by = ?)"
)
RELEASE_WORKER_LOCKS = "DELETE FROM locks WHERE worker_id = ?"
RESET_RUNNING = (
    "UPDATE jobs SET status = 'pending', worker_id = NULL, started_at = NULL, updated_at = ?, "
    "enqueued_by = NULL WHERE rowid = ? AND id = ? AND status = 'running' AND worker_id = ?"
)
DISOWN = (
    "UPDATE jobs SET enqueued_by = NULL WHERE rowid = ? AND id = ? "
    "AND status IN ('pending', 'delayed')"
)
CANCEL_RECOVERED = (
    "UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, updated_at = ?, "
    "output = NULL WHERE rowid = ? AND id = ? AND status IN ('pending', 'delayed', 'running') "
    f"RETURNING {JOB_COLUMNS}"
)

# Persistent schedules (`SCHEDULE_COLUMNS` is the shared layout's).
INSERT_SCHEDULE = (
    f"INSERT INTO job_schedules ({SCHEDULE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, 0, "
    "?, ?, ?, ?, ?, 0)"
)
# `ensure_schedule`: insert unless `(type, name)` has a schedule (job_schedules_type_name_uq,
# schema 0001); the caller then reads the one that is there.
ENSURE_SCHEDULE = f"{INSERT_SCHEDULE} ON CONFLICT (type, name) DO NOTHING"
GET_SCHEDULE = f"SELECT {SCHEDULE_COLUMNS} FROM job_schedules WHERE id = ?"
GET_SCHEDULE_BY_NAME = f"SELECT {SCHEDULE_COLUMNS} FROM job_schedules WHERE type = ? AND name = ?"
SCHEDULES_OF_TYPE = (
    f"SELECT {SCHEDULE_COLUMNS} FROM job_schedules WHERE type = ? ORDER BY created_at, id"
)
LIST_SCHEDULES = f"SELECT {SCHEDULE_COLUMNS} FROM job_schedules ORDER BY created_at, id"
DELETE_SCHEDULE = "DELETE FROM job_schedules WHERE id = ?"
SET_NEXT_RUN = "UPDATE job_schedules SET next_run = ?, updated_at = ? WHERE id = ?"
# A natural fire at T applies only while the persisted calendar is not past T
# (`next_run <= T`), and moves it past T: two processes that both fire T cannot both win.
# Not `= T`: a row left behind the timer's calendar (a fire whose write outlasted a period)
# would make every later fire lose.
MARK_FIRED = (
    "UPDATE job_schedules SET last_run = ?, next_run = ?, fire_count = fire_count + 1, "
    "updated_at = ? WHERE id = ? AND enabled = 1 AND next_run <= ?"
)
# MARK_FIRED from the `next_run` the fire read: only then are the points before T it
# skipped (fires whose writes failed) known to be unwritten, and `AllMissed` writes them.
MARK_FIRED_FROM = f"{MARK_FIRED} AND next_run = ?"
MARK_MANUAL = "UPDATE job_schedules SET last_run = ?, next_run = ?, updated_at = ? WHERE id = ?"
CATCH_UP_CAS = "UPDATE job_schedules SET next_run = ?, updated_at = ? WHERE id = ? AND next_run = ?"
# The schedule read by a write that decides from it (a backfill); SQLite's BEGIN IMMEDIATE
# already holds the one write lock.
GET_SCHEDULE_FOR_WRITE = GET_SCHEDULE
# The overlap decision's look at the schedule's jobs that have not ended (one seek of
# jobs_schedule_idx: only ended rows have `finished_at`), and whether each waiting one is
# a fire `buffer_one` held back (no workflow) rather than a workflow's step.
LIVE_SCHEDULE_JOBS = (
    "SELECT status, status = 'waiting' AND workflow_id IS NULL AND step IS NULL FROM jobs "
    "WHERE schedule_id = ? AND finished_at IS NULL AND status IN "
    "('pending', 'delayed', 'running', 'waiting')"
)
SKIP_FIRE = "UPDATE job_schedules SET skipped_count = skipped_count + 1 WHERE id = ?"
# A deleted schedule's held-back fire would wait for ever (its jobs lose `schedule_id`):
# it runs now instead, in the deleting transaction.
RELEASE_BUFFERED = (
    "UPDATE jobs SET status = 'pending', scheduled_at = min(scheduled_at, ?), updated_at = ? "
    "WHERE schedule_id = ? AND finished_at IS NULL AND status = 'waiting' "
    "AND workflow_id IS NULL AND step IS NULL"
)
# Whether a job stored under the key exists, live, waiting (a held-back fire of the
# schedule) or ended: a backfill writes a fire only once while its job is kept.
# Parameters (key, schedule id, key, key). Each branch repeats the condition of the index
# it seeks (jobs_idempotency_key_uq, jobs_schedule_idx, jobs_ended_key_idx).
KEY_STORED = (
    "SELECT 1 FROM jobs WHERE idempotency_key = ? "
    "AND (status = 'pending' OR status = 'delayed' OR status = 'running') "
    "UNION ALL SELECT 1 FROM jobs WHERE schedule_id = ? AND finished_at IS NULL "
    "AND status = 'waiting' AND idempotency_key = ? "
    "UNION ALL SELECT 1 FROM jobs WHERE idempotency_key = ? "
    "AND (status = 'completed' OR status = 'failed' OR status = 'cancelled') LIMIT 1"
)

# The leader lease (see `_runtime/leader.py`): one row, a term that grows on every change
# of holder. A resigned or expired lease keeps its row, so the term never goes back.
LEADER_WITH_HOLDER = (
    "SELECT l.worker_id, l.term, l.expires_at, w.id IS NOT NULL, w.hostname, w.pid, "
    "w.stopped_at FROM leader l LEFT JOIN workers w ON w.id = l.worker_id WHERE l.id = 1"
)
TAKE_LEADER = (
    "INSERT INTO leader (id, worker_id, term, expires_at) VALUES (1, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET worker_id = excluded.worker_id, term = excluded.term, "
    "expires_at = excluded.expires_at"
)
RENEW_LEADER = "UPDATE leader SET expires_at = ? WHERE id = 1 AND worker_id = ? AND term = ?"
RESIGN_LEADER = "UPDATE leader SET expires_at = 0 WHERE id = 1 AND worker_id = ? AND term = ?"


def update_schedule_sql(columns: list[str] | tuple[str, ...]) -> str:
    """`UPDATE job_schedules SET c1 = ?, ... WHERE id = ?` for known column names."""
    allowed = {c.strip() for c in SCHEDULE_COLUMNS.split(",")}
    bad = [c for c in columns if c not in allowed]
    if bad or not columns:
        raise ValueError(f"not schedule columns: {bad or columns}")
    sets = ", ".join(f"{c} = ?" for c in columns)
    return f"UPDATE job_schedules SET {sets} WHERE id = ?"
