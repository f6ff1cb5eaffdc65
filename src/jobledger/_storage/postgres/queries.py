"""Every SQL statement the PostgreSQL backend runs, in one place.

Statements are templates over the schema name (`{s}`, replaced once per store by the
quoted identifier), so every object lives in the store's schema and a user's own tables
are never shadowed: nothing relies on `search_path`. Placeholders are psycopg's `%s`.

`Queries(schema)` names its statements as `sqlite/queries.py` does wherever both
backends share an implementation (`_storage/schedule_ops.py`); row tuples are
column-for-column the shared layout (`_storage/layout.py`: integers for flags and epoch-ms
times, JSON as text), so a row reads the same from either backend.

As in SQLite, statuses are spelled as literals on hot paths so the planner can match the
partial indexes.
"""

from __future__ import annotations

import re

from jobledger._storage.layout import JOB_COLUMNS, SCHEDULE_COLUMNS

__all__ = [
    "JOB_COLUMNS",
    "SCHEDULE_COLUMNS",
    "Queries",
    "check_schema_name",
    "quote_ident",
]

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,49}$")
_LIVE = "('pending', 'delayed', 'running')"
_TERMINAL = "('completed', 'failed', 'cancelled')"
_J_COLUMNS = ", ".join(f"j.{c.strip()}" for c in JOB_COLUMNS.split(","))
_N_COLUMNS = len(JOB_COLUMNS.split(","))
# What ENQUEUE_PLAIN and ENQUEUE_SOLO write of an entry without a key or a parent.
_PLAIN_COLUMNS = (
    "id, type, status, queue, priority, payload, max_attempts, timeout_ms, schedule_id, "
    "metadata, enqueued_by, scheduled_at, created_at, updated_at"
)
_CLAIMED = (
    "j.id, j.type, j.queue, j.priority, j.payload, j.attempt, j.max_attempts, j.timeout_ms, "
    "j.metadata, j.parent_id, j.schedule_id, j.scheduled_at, j.started_at, j.workflow_id"
)
_FENCE = "WHERE id = %s AND status = 'running' AND worker_id = %s AND attempt = %s"
ATTEMPT_COLUMNS = "attempt, worker_id, started_at, finished_at, outcome, error, logs"
_RECORD_VALUES = "%s::int, %s::text, %s::bigint, %s::bigint, %s::text, %s::text, %s::text"
# The records an outcome stores beyond its row (_storage/attempts.py), in the statement
# that applies it and only when its fence matched (`f` is that statement's UPDATE): no
# extra round trip. A record that ends an attempt (n = its number; parameters: job id,
# n, ATTEMPT_COLUMNS, then whether to write it at all):
_RECORD_ENDED = (
    ", a AS (INSERT INTO {s}.job_attempts (job_id, n, " + ATTEMPT_COLUMNS + ") "
    "SELECT %s::text, %s::int, " + _RECORD_VALUES + " "
    "WHERE EXISTS (SELECT 1 FROM f) AND %s::bool ON CONFLICT DO NOTHING)"
)
# An unspent attempt's (interrupted): the job's next negative n (parameters: job id,
# ATTEMPT_COLUMNS).
_RECORD_UNSPENT = (
    ", a AS (INSERT INTO {s}.job_attempts (job_id, n, " + ATTEMPT_COLUMNS + ") "
    "SELECT j, (SELECT coalesce(min(n), 0) - 1 FROM {s}.job_attempts WHERE job_id = j "
    "AND n < 0), " + _RECORD_VALUES + " FROM (SELECT %s::text AS j) x "
    "WHERE EXISTS (SELECT 1 FROM f))"
)


def check_schema_name(schema: str) -> str:
    """Lower-case letters, digits and `_`, at most 50 characters (the NOTIFY channel is
    `jobledger_<schema>` and must fit PostgreSQL's 63-byte identifiers)."""
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ValueError(
            f"schema must match {_SCHEMA_RE.pattern} (lower case, at most 50 chars): {schema!r}"
        )
    return schema


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Queries:
    """The statements of one schema. Class attributes are the templates.

    Row positions are the shared layout's (`_storage/layout.py`).
    """

    JOB_COLUMNS = JOB_COLUMNS
    SCHEDULE_COLUMNS = SCHEDULE_COLUMNS

    # -- jobs: enqueue ---------------------------------------------------------------
    # One statement per entry with a key or a parent (the others: ENQUEUE_PLAIN, below):
    # insert unless the key is live or the parent is missing;
    # on an idempotency conflict return the live row. The existing row is read from the
    # statement's snapshot, so a conflict with a row committed *during* the statement
    # returns nothing; the store then re-reads with a fresh snapshot.
    ENQUEUE_ONE = (
        "WITH ins AS ("
        "INSERT INTO {s}.jobs (id, type, status, queue, priority, payload, max_attempts, "
        "timeout_ms, idempotency_key, parent_id, schedule_id, metadata, enqueued_by, "
        "scheduled_at, created_at, updated_at) "
        "SELECT %(id)s, %(type)s, %(status)s, %(queue)s, %(priority)s, %(payload)s, "
        "%(max_attempts)s, %(timeout_ms)s, %(key)s, %(parent)s, %(schedule)s, %(metadata)s, "
        "%(enqueued_by)s, %(scheduled_at)s, %(created_at)s, %(created_at)s "
        "WHERE %(parent)s::text IS NULL "
        "OR EXISTS (SELECT 1 FROM {s}.jobs p WHERE p.id = %(parent)s::text) "
        "ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL "
        f"AND status IN {_LIVE} DO NOTHING RETURNING {JOB_COLUMNS}) "
        f"SELECT true, {JOB_COLUMNS} FROM ins "
        f"UNION ALL SELECT false, {_J_COLUMNS} FROM {{s}}.jobs j "
        "WHERE %(key)s::text IS NOT NULL AND j.idempotency_key = %(key)s::text "
        f"AND j.status IN {_LIVE} AND NOT EXISTS (SELECT 1 FROM ins)"
    )
    # ENQUEUE_ONE for the one-round-trip path: an entry that neither inserted nor found a
    # live row raises SQLSTATE JLMIS (`enqueue_missed()`), which aborts the transaction;
    # the store then redoes the batch with ENQUEUE_ONE and fresh snapshots.
    ENQUEUE_STRICT = (
        ENQUEUE_ONE
        + f" UNION ALL SELECT {{s}}.enqueue_missed(), {', '.join(['NULL'] * _N_COLUMNS)} "
        "WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM {s}.jobs m "
        "WHERE %(key)s::text IS NOT NULL AND m.idempotency_key = %(key)s::text "
        f"AND m.status IN {_LIVE})"
    )
    # Many entries without a key or a parent (nothing to conflict with, nothing to
    # check) in one statement: the statement-level count triggers (migration 12) then
    # run once for the batch instead of once an entry, most of what an entry cost the
    # server. The entries as one jsonb array of arrays, in `_plain_batch`'s order
    # (store.py), parsed once; the texts in it come back exactly as sent.
    ENQUEUE_PLAIN = (
        f"INSERT INTO {{s}}.jobs ({_PLAIN_COLUMNS}) "
        "SELECT e->>0, e->>1, e->>2, e->>3, (e->>4)::bigint, e->>5, (e->>6)::bigint, "
        "(e->>7)::bigint, e->>8, e->>9, e->>10, (e->>11)::bigint, (e->>12)::bigint, "
        "(e->>12)::bigint FROM jsonb_array_elements(%s::jsonb) e "
        f"RETURNING {JOB_COLUMNS}"
    )
    # One entry of ENQUEUE_PLAIN's kind to a queue already registered, in one autocommit
    # statement with its change note: no BEGIN, no COMMIT, no statement for the note (a
    # web request's `enqueue`, the common call, in one statement instead of four).
    ENQUEUE_SOLO = (
        f"WITH ins AS (INSERT INTO {{s}}.jobs ({_PLAIN_COLUMNS}) "
        "VALUES (%(id)s, %(type)s, %(status)s, %(queue)s, %(priority)s, %(payload)s, "
        "%(max_attempts)s, %(timeout_ms)s, %(schedule)s, %(metadata)s, %(enqueued_by)s, "
        "%(scheduled_at)s, %(created_at)s, %(created_at)s) "
        f"RETURNING {JOB_COLUMNS}) "
        "SELECT ins.* FROM ins, (SELECT {s}.note_change()) AS noted"
    )
    FIND_LIVE_BY_KEY = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE idempotency_key = %s AND status IN {_LIVE}"
    )
    # `unique_for`: the job that ended with the key most recently, when that was at or
    # after the second parameter (jobs_ended_key_idx).
    FIND_ENDED_BY_KEY = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE idempotency_key = %s "
        f"AND status IN {_TERMINAL} AND finished_at >= %s ORDER BY finished_at DESC LIMIT 1"
    )
    # ENQUEUE_ONE that also inserts nothing while its snapshot shows a job that ended with
    # the key at or after %(since)s: one that ended after the store looked for it.
    ENQUEUE_UNLESS_ENDED = ENQUEUE_ONE.replace(
        "WHERE %(parent)s::text IS NULL "
        "OR EXISTS (SELECT 1 FROM {s}.jobs p WHERE p.id = %(parent)s::text) ",
        "WHERE (%(parent)s::text IS NULL "
        "OR EXISTS (SELECT 1 FROM {s}.jobs p WHERE p.id = %(parent)s::text)) "
        "AND NOT EXISTS (SELECT 1 FROM {s}.jobs e WHERE e.idempotency_key = %(key)s::text "
        f"AND e.status IN {_TERMINAL} AND e.finished_at >= %(since)s::bigint) ",
    )
    # Takes back a row this transaction just inserted (`_unique_for`).
    DELETE_INSERTED = "DELETE FROM {s}.jobs WHERE id = %s"
    # `debounce`: the newest waiting job stored under the key or a successor of it (below
    # %(end)s, `interface.SUCCESSOR_END` after the key; a range of jobs_idempotency_key_uq
    # under the "C" collation) takes the entry's payload, status and time. Locked first:
    # a claim that took it meanwhile leaves it out (READ COMMITTED re-checks the status),
    # and a claim after skips it.
    DEBOUNCE_WAITING = (
        "UPDATE {s}.jobs SET payload = %(payload)s, status = %(status)s, "
        "scheduled_at = %(scheduled_at)s, updated_at = %(created_at)s "
        "WHERE id = (SELECT id FROM {s}.jobs WHERE idempotency_key >= %(key)s::text "
        "AND idempotency_key < %(end)s::text AND status IN ('pending', 'delayed') "
        "ORDER BY id DESC LIMIT 1 FOR UPDATE) AND status IN ('pending', 'delayed') "
        f"RETURNING {JOB_COLUMNS}"
    )
    PARENT_EXISTS = "SELECT 1 FROM {s}.jobs WHERE id = %s"
    # Queue rows are numbered in commit order: the store takes `queues_lock_key` (held to
    # COMMIT) first, so a reader that saw seq N never sees a row below N appear later
    # (`queues_since` relies on it).
    REGISTER_QUEUE = (
        "INSERT INTO {s}.queues (name, type, created_at) VALUES (%s, %s, %s) "
        "ON CONFLICT (name) DO NOTHING"
    )
    # Registers the queue only if one of `ids` (the batch's entries for it) was inserted:
    # an idempotency hit registers nothing, as on SQLite.
    REGISTER_QUEUE_IF_INSERTED = (
        "INSERT INTO {s}.queues (name, type, created_at) SELECT %s, %s, %s "
        "WHERE EXISTS (SELECT 1 FROM {s}.jobs WHERE id = ANY(%s)) ON CONFLICT (name) DO NOTHING"
    )
    QUEUES_SINCE = "SELECT seq, name, type FROM {s}.queues WHERE seq > %s ORDER BY seq"

    # -- jobs: dispatch --------------------------------------------------------------
    ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
    COUNT_RUNNING_IN_QUEUE = "SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND queue = %s"
    COUNT_RUNNING = "SELECT count(*) FROM {s}.jobs WHERE status = 'running'"
    # Runs after the queue and global advisory locks were taken by earlier statements, so
    # its snapshot (taken at statement start) sees every committed claim: both counts are
    # exact. Always returns one row (the counts) even when nothing was claimed.
    # The UPDATE names its rows by primary key only: `picked` locked them in this very
    # statement after re-checking `status = 'pending'` on their latest version, so a
    # status test there is redundant, and harmful: with stale statistics (a burst of
    # enqueues since the last ANALYZE, or a fresh table) the planner drove the UPDATE
    # from the status index and filtered every pending row on each claim.
    CLAIM = (
        "WITH counts AS (SELECT "
        "(SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND queue = %(queue)s) AS in_q, "
        "(SELECT count(*) FROM {s}.jobs WHERE status = 'running') AS total), "
        # The queue's settings (DESIGN.md §8.7): one row even when none are set. A rate
        # limit set there takes nothing here: the store claims that queue on its rate
        # path (`PostgresStore._claim_rated`), which counts the window.
        "qs AS (SELECT max(concurrency) AS cap, coalesce(bool_or(paused), false) AS paused, "
        "max(rate_limit) AS rl FROM {s}.queue_settings WHERE queue = %(queue)s), "
        "picked AS (SELECT id FROM {s}.jobs WHERE status = 'pending' AND cancel_requested = 0 "
        "AND queue = %(queue)s AND scheduled_at <= %(now)s AND type = ANY(%(types)s) "
        "ORDER BY priority, scheduled_at, id "
        "LIMIT (SELECT CASE WHEN qs.paused OR qs.rl IS NOT NULL THEN 0 ELSE greatest(0, "
        "least(coalesce(qs.cap, %(qcap)s) - in_q, %(gcap)s - total, %(limit)s)) END "
        "FROM counts, qs) FOR UPDATE SKIP LOCKED), "
        "claimed AS (UPDATE {s}.jobs j SET status = 'running', worker_id = %(worker)s, "
        "started_at = %(now)s, updated_at = %(now)s "
        "WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) "
        f"RETURNING {_CLAIMED}) "
        "SELECT counts.in_q, counts.total, qs.cap, qs.paused, qs.rl, claimed.* "
        "FROM counts CROSS JOIN qs LEFT JOIN claimed ON true"
    )
    # Before the recovery sweep: rows enqueued by dead workers wait for it.
    CLAIM_EXCLUDING = CLAIM.replace(
        "AND type = ANY(%(types)s) ",
        "AND type = ANY(%(types)s) AND (enqueued_by IS NULL "
        "OR NOT (enqueued_by = ANY(%(excluded)s))) ",
    )
    # A worker's claim takes rows only while its worker row exists and is not stopped;
    # otherwise it takes none and answers -1 for the global count (`ClaimResult
    # .unregistered`).
    CLAIM_REGISTERED, CLAIM_REGISTERED_EXCLUDING = (
        sql.replace(
            "ORDER BY priority, scheduled_at, id ",
            "AND EXISTS (SELECT 1 FROM {s}.workers w WHERE w.id = %(worker)s "
            "AND w.stopped_at IS NULL) ORDER BY priority, scheduled_at, id ",
        ).replace(
            "SELECT counts.in_q, counts.total, qs.cap",
            "SELECT counts.in_q, CASE WHEN EXISTS (SELECT 1 FROM {s}.workers w "
            "WHERE w.id = %(worker)s AND w.stopped_at IS NULL) THEN counts.total ELSE -1 END, "
            "qs.cap",
        )
        for sql in (CLAIM, CLAIM_EXCLUDING)
    )
    # A claim across queues (`claim_spread`), in one statement after the advisory locks
    # (so its snapshot sees every committed claim, as CLAIM's). `cand` are the queues in
    # turn order with their caps; each gives at most its free slots (`free`) of its head
    # rows, ranked within the queue (`rn`); the rows go a turn (`turn` ranks) per queue
    # in turn order before any gets a second, up to this worker's limit and the global
    # cap's free slots (`allow`). One row per asked queue (its free slots and the total
    # running count), joined with what it claimed. Each queue's first turn is locked
    # first (`heads`: in turn order, then claim order, so its LIMIT cuts where the turns
    # do), the rows after it (`rest`, of the queues that took a whole turn) only while
    # the heads leave slots: with a
    # LIMIT of its free slots each asked queue locked up to a cap's worth of rows, five
    # times what the claim took at 1,000 queues (`bench/spread_claim.py --backend
    # postgres`, 50 rows over 66 queues: 618 WAL records and 2.3 ms that way, 354 and
    # 1.9 ms this way). `heads` stops at the rows the claim may take: the engine asks
    # 16 queues more than that (`SPREAD_SLACK`) for those that turn out dry or locked,
    # and each head it locks beyond them was a lock and a WAL record for nothing. It
    # stops at the first queues in turn because `cand` keeps the turn order: a nested
    # loop over the unnest, each queue's settings looked up on its own (`OFFSET 0` keeps
    # the planner from hashing them, which gave the rows in hash order;
    # tests/conformance/test_claim_spread.py checks the order under a limit).
    CLAIM_SPREAD = (
        "WITH cand AS (SELECT c.queue, CASE WHEN qs.paused OR qs.rate_limit IS NOT NULL "
        "THEN -1000000000 ELSE coalesce(qs.concurrency, c.cap) END AS cap, c.ord, "
        "coalesce(qs.concurrency, c.cap) AS shown, coalesce(qs.paused, false) AS paused, "
        "qs.rate_limit AS rl FROM unnest(%(names)s::text[], "
        "%(caps)s::int[]) WITH ORDINALITY AS c(queue, cap, ord) "
        "LEFT JOIN LATERAL (SELECT * FROM {s}.queue_settings s WHERE s.queue = c.queue "
        "OFFSET 0) qs ON true), "
        "total AS (SELECT count(*) AS n FROM {s}.jobs WHERE status = 'running'), "
        "free AS (SELECT c.ord, c.queue, c.shown, c.paused, c.rl, c.cap - (SELECT count(*) "
        "FROM {s}.jobs WHERE status = 'running' AND queue = c.queue) AS free FROM cand c), "
        "allow AS (SELECT greatest(0, least(%(limit)s, %(gcap)s - n)) AS n FROM total), "
        "heads AS (SELECT f.ord, f.queue, f.free, h.id FROM free f CROSS JOIN LATERAL ("
        "SELECT id FROM {s}.jobs WHERE status = 'pending' "
        "AND cancel_requested = 0 AND queue = f.queue AND scheduled_at <= %(now)s "
        "AND type = ANY(%(types)s) ORDER BY priority, scheduled_at, id "
        "LIMIT least(%(turn)s, greatest(0, least(f.free, (SELECT n FROM allow)))) "
        "FOR UPDATE SKIP LOCKED) h LIMIT (SELECT n FROM allow)), "
        "turned AS (SELECT ord, queue, free, count(*) AS n, array_agg(id) AS ids "
        "FROM heads GROUP BY ord, queue, free), "
        "rest AS (SELECT p.id, h.ord, h.n + row_number() OVER (PARTITION BY h.ord "
        "ORDER BY p.priority, p.scheduled_at, p.id) AS rn FROM turned h CROSS JOIN LATERAL ("
        "SELECT id, priority, scheduled_at FROM {s}.jobs WHERE status = 'pending' "
        "AND cancel_requested = 0 AND queue = h.queue AND scheduled_at <= %(now)s "
        "AND type = ANY(%(types)s) AND id <> ALL(h.ids) ORDER BY priority, scheduled_at, id "
        "LIMIT greatest(0, least(h.free - h.n, (SELECT n FROM allow) - (SELECT count(*) "
        "FROM heads))) FOR UPDATE SKIP LOCKED) p WHERE h.n = %(turn)s), "
        "chosen AS (SELECT id FROM (SELECT id, ord, 0 AS rn FROM heads UNION ALL "
        "SELECT id, ord, rn FROM rest) c ORDER BY (rn + %(turn)s - 1) / %(turn)s, ord, rn "
        "LIMIT (SELECT n FROM allow)), "
        "claimed AS (UPDATE {s}.jobs j SET status = 'running', worker_id = %(worker)s, "
        "started_at = %(now)s, updated_at = %(now)s "
        "WHERE j.id = ANY(ARRAY(SELECT id FROM chosen)) "
        f"RETURNING {_CLAIMED}) "
        "SELECT total.n, f.queue, f.free, f.shown, f.paused, f.rl, claimed.* "
        "FROM total CROSS JOIN free f "
        "LEFT JOIN claimed ON claimed.queue = f.queue ORDER BY f.ord"
    )
    CLAIM_SPREAD_EXCLUDING = CLAIM_SPREAD.replace(
        "AND type = ANY(%(types)s) ",
        "AND type = ANY(%(types)s) AND (enqueued_by IS NULL "
        "OR NOT (enqueued_by = ANY(%(excluded)s))) ",
    )
    # As CLAIM_REGISTERED: no rows and -1 for the total while the worker has no live row.
    CLAIM_SPREAD_REGISTERED, CLAIM_SPREAD_REGISTERED_EXCLUDING = (
        sql.replace(
            "ORDER BY priority, scheduled_at, id LIMIT",
            "AND EXISTS (SELECT 1 FROM {s}.workers w WHERE w.id = %(worker)s "
            "AND w.stopped_at IS NULL) ORDER BY priority, scheduled_at, id LIMIT",
        ).replace(
            "SELECT total.n, f.queue",
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM {s}.workers w WHERE w.id = %(worker)s "
            "AND w.stopped_at IS NULL) THEN total.n ELSE -1 END, f.queue",
        )
        for sql in (CLAIM_SPREAD, CLAIM_SPREAD_EXCLUDING)
    )
    # -- keyed rate limits: the claim picks rows in Python (`PostgresStore._keyed_take`) --
    KEYED_COUNTS = (
        "SELECT (SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND queue = %s), "
        "(SELECT count(*) FROM {s}.jobs WHERE status = 'running'), "
        "EXISTS (SELECT 1 FROM {s}.workers w WHERE w.id = %s AND w.stopped_at IS NULL)"
    )
    KEYED_CANDIDATES = (
        "SELECT id, coalesce(rate_key, '') FROM {s}.jobs WHERE status = 'pending' "
        "AND cancel_requested = 0 AND queue = %s AND scheduled_at <= %s AND type = ANY(%s) "
        "AND (enqueued_by IS NULL OR NOT (enqueued_by = ANY(%s))) "
        "AND NOT (coalesce(rate_key, '') = ANY(%s)) "
        "ORDER BY priority, scheduled_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
    )
    SET_RATE_KEY = "UPDATE {s}.jobs SET rate_key = %s WHERE id = %s"
    CLAIM_IDS = (
        "UPDATE {s}.jobs j SET status = 'running', worker_id = %s, started_at = %s, "
        f"updated_at = %s WHERE j.id = ANY(%s) AND j.status = 'pending' RETURNING {_CLAIMED}"
    )

    # -- queue settings (DESIGN.md §8.7) ------------------------------------------------
    QUEUE_SETTINGS_ROW = (
        "SELECT concurrency, paused, rate_limit, rate_per_ms FROM {s}.queue_settings "
        "WHERE queue = %s"
    )
    QUEUE_SETTINGS_MANY = (
        "SELECT queue, concurrency, paused, rate_limit, rate_per_ms FROM {s}.queue_settings "
        "WHERE queue = ANY(%s)"
    )
    QUEUE_SETTINGS_FULL = (
        "SELECT concurrency, rate_limit, rate_per_ms, paused, updated_at "
        "FROM {s}.queue_settings WHERE queue = %s"
    )
    UPSERT_QUEUE_SETTINGS = (
        "INSERT INTO {s}.queue_settings (queue, concurrency, rate_limit, rate_per_ms, paused, "
        "updated_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (queue) DO UPDATE SET "
        "concurrency = excluded.concurrency, rate_limit = excluded.rate_limit, "
        "rate_per_ms = excluded.rate_per_ms, paused = excluded.paused, "
        "updated_at = excluded.updated_at"
    )
    DELETE_QUEUE_SETTINGS = "DELETE FROM {s}.queue_settings WHERE queue = %s"
    RUNNING_BY_QUEUE = (
        "SELECT queue, count(*) FROM {s}.jobs WHERE status = 'running' AND queue = ANY(%s) "
        "GROUP BY queue"
    )
    UNREGISTERED_CLAIMERS = (
        "SELECT DISTINCT worker_id FROM {s}.jobs j WHERE status = 'running' "
        "AND NOT EXISTS (SELECT 1 FROM {s}.workers w WHERE w.id = j.worker_id)"
    )

    # -- jobs: finalize (fenced on the claim) ---------------------------------------
    # The locks are released only when the fence matched: a stale attempt's finalize must
    # not free locks that a re-claim of the same job holds now.
    FINISH = (
        "WITH f AS (UPDATE {s}.jobs SET status = %s, output = %s, error = %s, "
        "finished_at = %s, updated_at = %s, progress = coalesce(%s, progress), "
        f"progress_detail = coalesce(%s, progress_detail) {_FENCE} RETURNING {JOB_COLUMNS}), "
        "d AS (DELETE FROM {s}.locks WHERE %s AND job_id = %s AND worker_id = %s "
        "AND EXISTS (SELECT 1 FROM f))"
        f"{_RECORD_ENDED} SELECT * FROM f"
    )
    # For outcomes nobody waits on (`Outcome.want_row=False`): reports only that it applied.
    FINISH_NO_ROW = (
        "WITH f AS (UPDATE {s}.jobs SET status = %s, output = %s, error = %s, "
        "finished_at = %s, updated_at = %s, progress = coalesce(%s, progress), "
        f"progress_detail = coalesce(%s, progress_detail) {_FENCE} RETURNING 1), "
        "d AS (DELETE FROM {s}.locks WHERE %s AND job_id = %s AND worker_id = %s "
        "AND EXISTS (SELECT 1 FROM f))"
        f"{_RECORD_ENDED} SELECT 1 FROM f"
    )
    # FINISH for many outcomes in one statement (each ends its job and holds no locks):
    # the outcomes as one JSON array of arrays, [id, worker_id, attempt, status, output,
    # error, progress, progress_detail, started_at, logs] each; then the time, three
    # times. One statement fires the statement-level count triggers (migration 12) once
    # for the batch instead of once per job, which is most of what a finalize cost the
    # server. JSON, not one array parameter a column: psycopg dumps a text array in
    # Python, element by element (about 4x the cost of the statement for 17 outcomes).
    # Parsed once, as jsonb: a `json` value is text, which each `->>` parses again (ten
    # times an outcome; a third of the statement's time for 50 outcomes). The elements
    # read are strings and numbers, which jsonb keeps as sent (an output or an error is
    # JSON text inside a string, so its key order and spacing are untouched).
    # The same text for any number of outcomes, so it is prepared once. FINISH_MANY
    # returns the ids whose fence matched, FINISH_MANY_ROWS those rows whole (FINISH's
    # answer, for outcomes a handle waits on).
    FINISH_MANY = (
        "WITH o AS (SELECT e->>0 AS id, e->>1 AS worker_id, (e->>2)::bigint AS attempt, "
        "e->>3 AS status, e->>4 AS output, e->>5 AS error, (e->>6)::float8 AS progress, "
        "e->>7 AS detail, (e->>8)::bigint AS started_at, e->>9 AS logs "
        "FROM jsonb_array_elements(%s::jsonb) e), "
        "f AS (UPDATE {s}.jobs j SET status = o.status, output = o.output, error = o.error, "
        "finished_at = %s, updated_at = %s, progress = coalesce(o.progress, j.progress), "
        "progress_detail = coalesce(o.detail, j.progress_detail) FROM o "
        "WHERE j.id = o.id AND j.status = 'running' AND j.worker_id = o.worker_id "
        "AND j.attempt = o.attempt RETURNING j.id), "
        "a AS (INSERT INTO {s}.job_attempts (job_id, n, " + ATTEMPT_COLUMNS + ") "
        "SELECT o.id, o.attempt, o.attempt, o.worker_id, o.started_at, %s, o.status, o.error, "
        "o.logs FROM o JOIN f ON f.id = o.id WHERE o.logs IS NOT NULL ON CONFLICT DO NOTHING) "
        "SELECT * FROM f"
    )
    FINISH_MANY_ROWS = FINISH_MANY.replace(
        "RETURNING j.id)", "RETURNING " + ", ".join(f"j.{c}" for c in JOB_COLUMNS.split(", ")) + ")"
    )
    RETRY = (
        "WITH f AS (UPDATE {s}.jobs SET status = 'delayed', attempt = attempt + 1, error = %s, "
        "scheduled_at = %s, started_at = NULL, worker_id = NULL, updated_at = %s "
        f"{_FENCE} AND cancel_requested = 0 RETURNING {JOB_COLUMNS}), "
        "d AS (DELETE FROM {s}.locks WHERE %s AND job_id = %s AND worker_id = %s "
        "AND EXISTS (SELECT 1 FROM f))"
        f"{_RECORD_ENDED} SELECT * FROM f"
    )
    # A retryable failure of a row whose cancel was requested (by another process, before
    # this worker fired the token) is a cancel: never retried. Exclusive with RETRY on
    # `cancel_requested`, so the store sends both and at most one applies.
    CANCEL_INSTEAD_OF_RETRY = (
        "WITH f AS (UPDATE {s}.jobs SET status = 'cancelled', error = json_build_object("
        "'code', 'JOB_CANCELLED', 'message', coalesce(cancel_reason, 'Cancelled by user'), "
        "'retryable', false, 'params', json_build_object('reason', 'cancel'))::text, "
        "finished_at = %s, updated_at = %s, progress = coalesce(%s, progress), "
        "progress_detail = coalesce(%s, progress_detail) "
        f"{_FENCE} AND cancel_requested = 1 RETURNING {JOB_COLUMNS}), "
        "d AS (DELETE FROM {s}.locks WHERE %s AND job_id = %s AND worker_id = %s "
        "AND EXISTS (SELECT 1 FROM f))"
        f"{_RECORD_ENDED} SELECT * FROM f"
    )
    # Shutdown interrupted the attempt: pending again, unowned, its attempt not spent.
    REQUEUE = (
        "WITH f AS (UPDATE {s}.jobs SET status = 'pending', started_at = NULL, "
        "worker_id = NULL, enqueued_by = NULL, updated_at = %s, "
        "progress = coalesce(%s, progress), progress_detail = coalesce(%s, progress_detail) "
        f"{_FENCE} AND cancel_requested = 0 RETURNING {JOB_COLUMNS}), "
        "d AS (DELETE FROM {s}.locks WHERE %s AND job_id = %s AND worker_id = %s "
        "AND EXISTS (SELECT 1 FROM f))"
        f"{_RECORD_UNSPENT} SELECT * FROM f"
    )
    RELEASE_JOB_LOCKS = "DELETE FROM {s}.locks WHERE job_id = %s AND worker_id = %s"
    # See _storage/attempts.py for what is stored, `n` and the order.
    ATTEMPTS_OF = (
        f"SELECT n, {ATTEMPT_COLUMNS} FROM {{s}}.job_attempts WHERE job_id = %s "
        "ORDER BY attempt, n >= 0, -n"
    )
    # A rescue's records (lost): one that ends the attempt (n = its number), or an unspent
    # one (the job's next negative n).
    INSERT_ENDED_ATTEMPT = (
        f"INSERT INTO {{s}}.job_attempts (job_id, n, {ATTEMPT_COLUMNS}) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
    )
    INSERT_UNSPENT_ATTEMPT = (
        f"INSERT INTO {{s}}.job_attempts (job_id, n, {ATTEMPT_COLUMNS}) VALUES (%s, "
        "(SELECT coalesce(min(n), 0) - 1 FROM {s}.job_attempts WHERE job_id = %s AND n < 0), "
        "%s, %s, %s, %s, %s, %s, %s)"
    )
    # Claims whose commit the worker could not confirm, put back (ids in %s are kept).
    RELEASE_UNCONFIRMED = (
        "UPDATE {s}.jobs SET status = 'pending', started_at = NULL, worker_id = NULL, "
        "updated_at = %s WHERE id = ANY(ARRAY(SELECT id FROM {s}.jobs WHERE status = 'running' "
        "AND worker_id = %s AND NOT (id = ANY(%s)) ORDER BY id FOR UPDATE)) "
        "AND status = 'running' AND worker_id = %s"
    )
    SET_PROGRESS = (
        f"UPDATE {{s}}.jobs SET progress = %s, progress_detail = %s, updated_at = %s {_FENCE}"
    )
    GET_METADATA_FENCED = f"SELECT metadata FROM {{s}}.jobs {_FENCE} FOR UPDATE"
    SET_METADATA_FENCED = f"UPDATE {{s}}.jobs SET metadata = %s, updated_at = %s {_FENCE}"

    # Rows are locked in id order, so two promoters never deadlock; a row promoted by the
    # other one meanwhile fails the re-check and is skipped. Multi-row writes name their
    # rows as `id = ANY(ARRAY(subquery))`: an index scan on the primary key, where
    # `IN (subquery)` lets the planner hash-join against every row of the status.
    PROMOTE_DUE = (
        "UPDATE {s}.jobs SET status = 'pending', updated_at = %s WHERE id = ANY(ARRAY("
        "SELECT id FROM {s}.jobs WHERE status = 'delayed' AND scheduled_at <= %s "
        "ORDER BY id FOR UPDATE)) AND status = 'delayed' RETURNING queue"
    )
    NEXT_DELAYED_AT = "SELECT min(scheduled_at) FROM {s}.jobs WHERE status = 'delayed'"

    # -- cancellation ----------------------------------------------------------------
    REQUEST_CANCEL = (
        "UPDATE {s}.jobs SET cancel_requested = 1, cancel_reason = coalesce(cancel_reason, %s), "
        "updated_at = %s WHERE id = %s AND status IN ('pending', 'delayed', 'running', "
        "'waiting') RETURNING status, worker_id"
    )
    CANCEL_WAITING = (
        "UPDATE {s}.jobs SET status = 'cancelled', error = %s, finished_at = %s, updated_at = %s "
        f"WHERE id = %s AND status IN ('pending', 'delayed', 'waiting') RETURNING {JOB_COLUMNS}"
    )
    FORCE_CANCEL_RUNNING = (
        "WITH f AS (UPDATE {s}.jobs SET status = 'cancelled', error = %s, finished_at = %s, "
        f"updated_at = %s, output = NULL {_FENCE} RETURNING {JOB_COLUMNS}), "
        "d AS (DELETE FROM {s}.locks WHERE job_id = %s AND worker_id = %s "
        "AND EXISTS (SELECT 1 FROM f)) SELECT * FROM f"
    )
    # `{where}` is filled by the store from fixed column names only.
    CANCEL_MANY_REQUEST = (
        "UPDATE {s}.jobs SET cancel_requested = 1, cancel_reason = coalesce(cancel_reason, %s), "
        "updated_at = %s WHERE id = ANY(ARRAY(SELECT id FROM {s}.jobs WHERE status = 'running' "
        "AND {where} ORDER BY id FOR UPDATE)) AND status = 'running' RETURNING id, worker_id"
    )
    # `{statuses}` as on SQLite: waiting rows first, then pending and delayed ones.
    CANCEL_MANY_WAITING = (
        "UPDATE {s}.jobs j SET status = 'cancelled', cancel_requested = 1, error = %s, "
        "finished_at = %s, updated_at = %s WHERE j.id = ANY(ARRAY(SELECT id FROM {s}.jobs "
        "WHERE status IN ({statuses}) AND {where} ORDER BY id FOR UPDATE)) "
        f"AND j.status IN ({{statuses}}) RETURNING {_J_COLUMNS}"
    )
    CANCEL_REQUESTED_AMONG = (
        "SELECT id, cancel_reason FROM {s}.jobs WHERE cancel_requested = 1 AND id = ANY(%s)"
    )

    # -- reads -----------------------------------------------------------------------
    GET_JOB = f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE id = %s"

    TERMINAL_AMONG = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE id = ANY(%s) AND status IN {_TERMINAL}"
    )
    LIST_JOBS = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs{{where}} "
        "ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s"
    )
    COUNT_JOBS = "SELECT count(*) FROM {s}.jobs{where}"
    # A count that stops at a cap (the console's page total): reads no more rows.
    COUNT_JOBS_UP_TO = "SELECT count(*) FROM (SELECT 1 FROM {s}.jobs{where} LIMIT %s) AS m"

    # -- re-runs (`jobs.retry`) -------------------------------------------------------
    # Every re-run takes this transaction-scoped lock first, so two concurrent
    # `retry_matching` calls cannot both find one row "not re-run yet": the second one's
    # read (a later statement, so a later READ COMMITTED snapshot) sees the first's rows.
    # The old rows are read FOR KEY SHARE: GC (FOR UPDATE SKIP LOCKED) leaves them alone
    # until COMMIT, and nothing else changes a terminal row.
    RETRY_SOURCE = f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE id = %s FOR KEY SHARE"
    RETRY_MATCHING = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs j WHERE {{status}}{{where}} "
        "AND NOT EXISTS (SELECT 1 FROM {s}.jobs r WHERE r.retry_of = j.id) "
        "ORDER BY created_at, id LIMIT %s FOR KEY SHARE"
    )
    # enqueue's columns and `retry_of`. A parent collected since the read becomes NULL,
    # as its ON DELETE SET NULL would have made it.
    INSERT_RETRY = (
        "INSERT INTO {s}.jobs (id, type, status, queue, priority, payload, max_attempts, "
        "timeout_ms, idempotency_key, parent_id, schedule_id, metadata, enqueued_by, "
        "scheduled_at, created_at, updated_at, retry_of, step) VALUES (%s, %s, %s, %s, %s, %s, "
        "%s, %s, %s, (SELECT p.id FROM {s}.jobs p WHERE p.id = %s), %s, %s, %s, %s, %s, %s, %s, "
        f"%s) RETURNING {JOB_COLUMNS}"
    )
    # As on SQLite (migration 12 there): a re-run of a workflow step takes the old job's
    # edges from its ended upstream jobs.
    COPY_DEPS = (
        "INSERT INTO {s}.job_deps (upstream_id, job_id, policy, many) "
        "SELECT d.upstream_id, %s, d.policy, d.many FROM {s}.job_deps d "
        "JOIN {s}.jobs u ON u.id = d.upstream_id WHERE d.job_id = %s "
        f"AND u.status IN {_TERMINAL}"
    )
    # Workflows (migrations 8 and 9).
    INSERT_WORKFLOW = (
        "INSERT INTO {s}.workflows (id, name, created_at, retry_of) VALUES (%s, %s, %s, %s)"
    )
    # A second writer of the id waits for the first to commit, then writes nothing.
    INSERT_WORKFLOW_ONCE = INSERT_WORKFLOW + " ON CONFLICT (id) DO NOTHING RETURNING 1"
    INSERT_WORKFLOW_JOB = (
        "INSERT INTO {s}.jobs (id, type, status, queue, priority, payload, max_attempts, "
        "timeout_ms, idempotency_key, parent_id, schedule_id, metadata, enqueued_by, "
        "scheduled_at, created_at, updated_at, workflow_id, step, upstream_left, retry_of) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    )
    INSERT_JOB_DEP = (
        "INSERT INTO {s}.job_deps (upstream_id, job_id, policy, many) VALUES (%s, %s, %s, %s)"
    )
    GET_WORKFLOW = "SELECT id, name, created_at, retry_of FROM {s}.workflows WHERE id = %s"
    WORKFLOW_JOBS = f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE workflow_id = %s ORDER BY id"
    DOWNSTREAM_JOBS = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE id IN "
        "(SELECT d.job_id FROM {s}.job_deps d WHERE d.upstream_id = ANY(%s))"
    )
    UPSTREAM_OUTPUTS = (
        "SELECT u.step, u.output, d.many FROM {s}.job_deps d "
        "JOIN {s}.jobs u ON u.id = d.upstream_id "
        "WHERE d.job_id = %s ORDER BY u.id"
    )
    CANCEL_WORKFLOW_STATUS = (
        "UPDATE {s}.jobs SET status = 'cancelled', finished_at = %s, updated_at = %s, "
        "error = %s WHERE workflow_id = %s AND status = %s "
        f"RETURNING {JOB_COLUMNS}"
    )
    # As on SQLite: waiting rows that nothing will release (`doctor`).
    STRANDED_WAITING = (
        "SELECT j.id FROM {s}.jobs j WHERE j.status = 'waiting' AND NOT EXISTS (SELECT 1 "
        "FROM {s}.job_deps d JOIN {s}.jobs u ON u.id = d.upstream_id WHERE d.job_id = j.id "
        "AND u.status IN ('waiting', 'pending', 'delayed', 'running')) "
        "AND NOT (j.schedule_id IS NOT NULL AND j.workflow_id IS NULL AND j.step IS NULL "
        "AND EXISTS (SELECT 1 FROM {s}.jobs o WHERE o.schedule_id = j.schedule_id "
        "AND o.finished_at IS NULL AND o.status IN ('pending', 'delayed', 'running'))) "
        "ORDER BY j.id LIMIT %s"
    )
    HAS_JOB_DEPS = "SELECT to_regclass('{s}.job_deps') IS NOT NULL"
    # As on SQLite: workflows whose every job was collected.
    GC_WORKFLOWS = (
        "DELETE FROM {s}.workflows w WHERE NOT EXISTS "
        "(SELECT 1 FROM {s}.jobs j WHERE j.workflow_id = w.id)"
    )
    # As on SQLite: a workflow job whose output a job yet to end will read is kept. A
    # re-run writes new edges to old jobs; GC takes the re-runs' advisory lock first, so
    # its statement sees every such edge that committed.
    GC_TERMINAL = (
        "DELETE FROM {s}.jobs WHERE id = ANY(ARRAY(SELECT id FROM {s}.jobs j "
        "WHERE finished_at IS NOT NULL "
        f"AND finished_at < %s AND status IN {_TERMINAL} "
        "AND (step IS NULL OR NOT EXISTS (SELECT 1 FROM {s}.job_deps d JOIN {s}.jobs w "
        "ON w.id = d.job_id WHERE d.upstream_id = j.id "
        "AND w.status IN ('waiting', 'pending', 'delayed', 'running'))) "
        "LIMIT %s FOR UPDATE SKIP LOCKED))"
    )

    # The kept counts (migration 12). Rows of sessions that are gone fold into slot 0:
    # rows taken FOR UPDATE SKIP LOCKED, so the fold never waits for a writer (the
    # migration says why none can be waiting for it in a cycle), keys in one order so two
    # folds cannot deadlock on slot 0. Zero rows of any session go too.
    FOLD_COUNTS = (
        "WITH moved AS (DELETE FROM {s}.job_counts WHERE (queue, status, rb, lb, slot) IN ("
        "SELECT queue, status, rb, lb, slot FROM {s}.job_counts WHERE slot <> 0 AND (slot "
        "NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL) OR (jobs = 0 "
        "AND started = 0 AND retried = 0 AND run_ms = 0 AND latency_ms = 0)) "
        "FOR UPDATE SKIP LOCKED) "
        "RETURNING queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms) "
        "INSERT INTO {s}.job_counts AS c "
        "(queue, status, rb, lb, slot, jobs, started, retried, run_ms, latency_ms) "
        "SELECT queue, status, rb, lb, 0, sum(jobs), sum(started), sum(retried), sum(run_ms), "
        "sum(latency_ms) FROM moved GROUP BY queue, status, rb, lb "
        "ORDER BY queue, status, rb, lb "
        "ON CONFLICT (queue, status, rb, lb, slot) DO UPDATE SET "
        "jobs = c.jobs + excluded.jobs, started = c.started + excluded.started, "
        "retried = c.retried + excluded.retried, run_ms = c.run_ms + excluded.run_ms, "
        "latency_ms = c.latency_ms + excluded.latency_ms"
    )
    FOLD_MINUTES = (
        "WITH moved AS (DELETE FROM {s}.job_minutes WHERE (minute, slot) IN ("
        "SELECT minute, slot FROM {s}.job_minutes WHERE slot <> 0 AND slot NOT IN "
        "(SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL) FOR UPDATE SKIP LOCKED) "
        "RETURNING minute, completed, failed) "
        "INSERT INTO {s}.job_minutes AS m (minute, slot, completed, failed) "
        "SELECT minute, 0, sum(completed), sum(failed) FROM moved GROUP BY minute "
        "ORDER BY minute ON CONFLICT (minute, slot) DO UPDATE SET "
        "completed = m.completed + excluded.completed, failed = m.failed + excluded.failed"
    )
    # As on SQLite: the chart's minutes a day older than what GC collects.
    GC_MINUTES = "DELETE FROM {s}.job_minutes WHERE minute < %s"
    HAS_JOB_COUNTS = "SELECT to_regclass('{s}.job_counts') IS NOT NULL"

    # -- durable named locks (layer 3) ------------------------------------------------
    # A lock is free when no row exists, or when its holder job no longer runs under the
    # claim that took it. Taking a held lock is three statements on purpose: the holder is
    # checked *after* its row is locked, with a fresh snapshot (READ COMMITTED), so a
    # holder whose claim committed while we waited is seen as running.
    LOCK_INSERT = (
        "INSERT INTO {s}.locks (name, job_id, worker_id, acquired_at) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (name) DO NOTHING RETURNING 1"
    )
    LOCK_HOLDER = "SELECT job_id, worker_id FROM {s}.locks WHERE name = %s FOR UPDATE"
    LOCK_HOLDER_RUNNING = (
        "SELECT 1 FROM {s}.jobs WHERE id = %s AND status = 'running' AND worker_id = %s"
    )
    LOCK_TAKE_OVER = (
        "UPDATE {s}.locks SET job_id = %s, worker_id = %s, acquired_at = %s WHERE name = %s"
    )
    # Fenced on the claim: a stale attempt must not free the lock a rescuer holds now.
    RELEASE_LOCK = (
        "DELETE FROM {s}.locks l WHERE l.name = %s AND l.job_id = %s AND l.worker_id = %s "
        "AND EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = l.job_id AND j.status = 'running' "
        "AND j.worker_id = l.worker_id AND j.attempt = %s)"
    )

    # -- change notification ---------------------------------------------------------
    NOTE_CHANGE = "SELECT {s}.note_change()"
    CHANGE_VERSION = "SELECT {s}.change_version()"

    # -- workers and recovery (same names as sqlite/queries.py) ----------------------
    REGISTER_WORKER = (
        "INSERT INTO {s}.workers (id, hostname, pid, handlers, started_at, heartbeat_at, "
        "stopped_at) VALUES (%s, %s, %s, %s, %s, %s, NULL) ON CONFLICT (id) DO UPDATE SET "
        "hostname = excluded.hostname, pid = excluded.pid, handlers = excluded.handlers, "
        "started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, "
        "stopped_at = NULL"
    )
    HEARTBEAT = "UPDATE {s}.workers SET heartbeat_at = %s WHERE id = %s AND stopped_at IS NULL"
    STOP_WORKER = "UPDATE {s}.workers SET stopped_at = %s, heartbeat_at = %s WHERE id = %s"
    LIST_WORKERS = (
        "SELECT id, hostname, pid, handlers, started_at, heartbeat_at, stopped_at FROM {s}.workers"
    )
    DELETE_WORKER = "DELETE FROM {s}.workers WHERE id = %s"
    WORKER_EXISTS = "SELECT 1 FROM {s}.workers WHERE id = %s"
    # Locked, so no other process claims or cancels these rows while recovery decides.
    LIVE_ROWS_OF_WORKER = (
        f"SELECT {JOB_COLUMNS} FROM {{s}}.jobs WHERE "
        "(status = 'running' AND worker_id = %s) "
        "OR (status IN ('pending', 'delayed') AND enqueued_by = %s) ORDER BY id FOR UPDATE"
    )
    RELEASE_WORKER_LOCKS = "DELETE FROM {s}.locks WHERE worker_id = %s"
    RESET_RUNNING = (
        "UPDATE {s}.jobs SET status = 'pending', worker_id = NULL, started_at = NULL, "
        "updated_at = %s, enqueued_by = NULL WHERE id = %s AND status = 'running' "
        "AND worker_id = %s"
    )
    DISOWN = (
        "UPDATE {s}.jobs SET enqueued_by = NULL WHERE id = %s AND status IN ('pending', 'delayed')"
    )
    CANCEL_RECOVERED = (
        "UPDATE {s}.jobs SET status = 'cancelled', error = %s, finished_at = %s, updated_at = %s, "
        f"output = NULL WHERE id = %s AND status IN {_LIVE} RETURNING {JOB_COLUMNS}"
    )

    # -- persistent schedules (same names and parameters as sqlite/queries.py) --------
    INSERT_SCHEDULE = (
        f"INSERT INTO {{s}}.job_schedules ({SCHEDULE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, "
        "%s, NULL, NULL, 0, %s, %s, %s, %s, %s, 0)"
    )
    # A concurrent insert of the same (type, name) makes this one wait for its commit and
    # then do nothing; the caller's next statement (a fresh snapshot under READ
    # COMMITTED) reads the winner's row.
    ENSURE_SCHEDULE = f"{INSERT_SCHEDULE} ON CONFLICT (type, name) DO NOTHING"
    GET_SCHEDULE = f"SELECT {SCHEDULE_COLUMNS} FROM {{s}}.job_schedules WHERE id = %s"
    GET_SCHEDULE_BY_NAME = (
        f"SELECT {SCHEDULE_COLUMNS} FROM {{s}}.job_schedules WHERE type = %s AND name = %s"
    )
    SCHEDULES_OF_TYPE = (
        f"SELECT {SCHEDULE_COLUMNS} FROM {{s}}.job_schedules WHERE type = %s "
        "ORDER BY created_at, id"
    )
    LIST_SCHEDULES = f"SELECT {SCHEDULE_COLUMNS} FROM {{s}}.job_schedules ORDER BY created_at, id"
    DELETE_SCHEDULE = "DELETE FROM {s}.job_schedules WHERE id = %s"
    SET_NEXT_RUN = "UPDATE {s}.job_schedules SET next_run = %s, updated_at = %s WHERE id = %s"
    MARK_FIRED = (
        "UPDATE {s}.job_schedules SET last_run = %s, next_run = %s, "
        "fire_count = fire_count + 1, updated_at = %s WHERE id = %s AND enabled = 1 "
        "AND next_run <= %s"
    )
    MARK_FIRED_FROM = f"{MARK_FIRED} AND next_run = %s"
    MARK_MANUAL = (
        "UPDATE {s}.job_schedules SET last_run = %s, next_run = %s, updated_at = %s WHERE id = %s"
    )
    # A NULL expected `next_run` never matches, exactly as in SQLite.
    CATCH_UP_CAS = (
        "UPDATE {s}.job_schedules SET next_run = %s, updated_at = %s WHERE id = %s "
        "AND next_run = %s"
    )
    # A backfill decides from the row: two at once for one schedule take turns.
    GET_SCHEDULE_FOR_WRITE = (
        f"SELECT {SCHEDULE_COLUMNS} FROM {{s}}.job_schedules WHERE id = %s FOR UPDATE"
    )
    # Locked (in id order), so that a finalize ending one of them either committed before
    # the fire looks (which then sees it ended) or sees the fire's waiting row when its
    # release trigger runs (migration 0010).
    LIVE_SCHEDULE_JOBS = (
        "SELECT status, status = 'waiting' AND workflow_id IS NULL AND step IS NULL "
        "FROM {s}.jobs "
        "WHERE schedule_id = %s AND finished_at IS NULL "
        "AND status IN ('pending', 'delayed', 'running', 'waiting') ORDER BY id FOR UPDATE"
    )
    SKIP_FIRE = "UPDATE {s}.job_schedules SET skipped_count = skipped_count + 1 WHERE id = %s"
    RELEASE_BUFFERED = (
        "UPDATE {s}.jobs SET status = 'pending', scheduled_at = least(scheduled_at, %s), "
        "updated_at = %s WHERE schedule_id = %s AND finished_at IS NULL "
        "AND status = 'waiting' AND workflow_id IS NULL AND step IS NULL"
    )
    KEY_STORED = (
        "SELECT 1 FROM {s}.jobs WHERE idempotency_key = %s "
        "AND status IN ('pending', 'delayed', 'running') "
        "UNION ALL SELECT 1 FROM {s}.jobs WHERE schedule_id = %s AND finished_at IS NULL "
        "AND status = 'waiting' AND idempotency_key = %s "
        "UNION ALL SELECT 1 FROM {s}.jobs WHERE idempotency_key = %s "
        "AND status IN ('completed', 'failed', 'cancelled') LIMIT 1"
    )

    # -- the leader lease (same names as sqlite/queries.py) ---------------------------
    LEADER_WITH_HOLDER = (
        "SELECT l.worker_id, l.term, l.expires_at, w.id IS NOT NULL, w.hostname, w.pid, "
        "w.stopped_at FROM {s}.leader l LEFT JOIN {s}.workers w ON w.id = l.worker_id "
        "WHERE l.id = 1"
    )
    TAKE_LEADER = (
        "INSERT INTO {s}.leader (id, worker_id, term, expires_at) VALUES (1, %s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET worker_id = excluded.worker_id, term = excluded.term, "
        "expires_at = excluded.expires_at"
    )
    RENEW_LEADER = (
        "UPDATE {s}.leader SET expires_at = %s WHERE id = 1 AND worker_id = %s AND term = %s"
    )
    RESIGN_LEADER = (
        "UPDATE {s}.leader SET expires_at = 0 WHERE id = 1 AND worker_id = %s AND term = %s"
    )

    def __init__(self, schema: str, *, older_columns: str | None = None) -> None:
        """`older_columns`: what to read for JOB_COLUMNS from a schema no worker has
        migrated to `retry_of` or the workflow columns yet (`layout.older_job_columns`:
        the missing columns read NULL)."""
        self.schema = check_schema_name(schema)
        s = quote_ident(self.schema)
        for name, value in vars(Queries).items():
            if name.isupper() and isinstance(value, str):
                if older_columns is not None:
                    value = value.replace(JOB_COLUMNS, older_columns)
                setattr(self, name, value.replace("{s}", s))
        # Advisory-lock keys and the NOTIFY channel, all scoped to the schema.
        self.channel = f"jobledger_{self.schema}"
        self.queues_lock_key = f"jobledger:{self.schema}:queues"
        self.global_claim_key = f"jobledger:{self.schema}:claim"
        self.leader_lock_key = f"jobledger:{self.schema}:leader"
        self.retry_lock_key = f"jobledger:{self.schema}:retry"

    def key_lock_key(self, key: str) -> str:
        """The lock that serialises `unique_for` and `debounce` enqueues of one key."""
        return f"jobledger:{self.schema}:key:{key}"

    def queue_claim_key(self, queue: str) -> str:
        return f"jobledger:{self.schema}:queue:{queue}"

    def recover_key(self, worker_id: str) -> str:
        return f"jobledger:{self.schema}:recover:{worker_id}"

    def update_schedule_sql(self, columns: list[str] | tuple[str, ...]) -> str:
        """`UPDATE job_schedules SET c1 = %s, ... WHERE id = %s` for known column names."""
        allowed = {c.strip() for c in SCHEDULE_COLUMNS.split(",")}
        bad = [c for c in columns if c not in allowed]
        if bad or not columns:
            raise ValueError(f"not schedule columns: {bad or columns}")
        sets = ", ".join(f"{c} = %s" for c in columns)
        return f"UPDATE {quote_ident(self.schema)}.job_schedules SET {sets} WHERE id = %s"
