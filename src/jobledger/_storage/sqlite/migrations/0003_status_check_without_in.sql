-- jobledger: foreign_keys=off
-- The status CHECK spelled as comparisons (issue 7). SQLite compiles `x IN (a, b, c, ...)`
-- with three or more values into a temporary B-tree that it builds afresh on every
-- execution of the statement, and a CHECK runs on every INSERT and on every UPDATE that
-- sets the column: the six-value list cost about 35,000 CPU instructions per enqueue
-- (a quarter of SQLite's whole work for one), and again per claim and per finalize
-- statement. `status = 'a' OR status = 'b' ...` accepts exactly the same values and
-- compiles to six comparisons. The same goes for the condition of the idempotency
-- key's partial index, which `FIND_LIVE_BY_KEY` must repeat word for word.
--
-- SQLite cannot change a CHECK in place: the table is rebuilt (its documented twelve
-- steps), with foreign keys off, since dropping the old table would otherwise run
-- `ON DELETE SET NULL` on the rows that reference it. Rowids are copied, so the table's
-- order is unchanged. The runner checks `foreign_key_check` before COMMIT. On a large
-- file this copies every row once, under the writer lease.
CREATE TABLE jobs_new (
    id               TEXT PRIMARY KEY,
    type             TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status = 'pending' OR status = 'delayed'
                        OR status = 'running' OR status = 'completed'
                        OR status = 'failed' OR status = 'cancelled'),
    queue            TEXT NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    payload          TEXT NOT NULL,
    output           TEXT,
    error            TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3,
    timeout_ms       INTEGER,
    idempotency_key  TEXT,
    parent_id        TEXT REFERENCES jobs (id) ON DELETE SET NULL,
    schedule_id      TEXT REFERENCES job_schedules (id) ON DELETE SET NULL,
    metadata         TEXT NOT NULL DEFAULT '{}',
    progress         REAL,
    progress_detail  TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    cancel_reason    TEXT,
    worker_id        TEXT,                          -- the claim's owner while running
    enqueued_by      TEXT,                          -- the manager that wrote the row
    scheduled_at     INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
INSERT INTO jobs_new (
    rowid, id, type, status, queue, priority, payload, output, error, attempt,
    max_attempts, timeout_ms, idempotency_key, parent_id, schedule_id, metadata, progress,
    progress_detail, cancel_requested, cancel_reason, worker_id, enqueued_by,
    scheduled_at, started_at, finished_at, created_at, updated_at
)
SELECT
    rowid, id, type, status, queue, priority, payload, output, error, attempt,
    max_attempts, timeout_ms, idempotency_key, parent_id, schedule_id, metadata, progress,
    progress_detail, cancel_requested, cancel_reason, worker_id, enqueued_by,
    scheduled_at, started_at, finished_at, created_at, updated_at
FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
-- The indexes of schema version 2; the idempotency key's is spelled without IN too
-- (SQLite evaluates its condition for every keyed row written).
CREATE INDEX jobs_claim_idx ON jobs (queue, priority, scheduled_at, id)
    WHERE status = 'pending' AND cancel_requested = 0;
CREATE INDEX jobs_running_idx ON jobs (queue, worker_id) WHERE status = 'running';
CREATE INDEX jobs_delayed_idx ON jobs (scheduled_at) WHERE status = 'delayed';
CREATE UNIQUE INDEX jobs_idempotency_key_uq ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL
        AND (status = 'pending' OR status = 'delayed' OR status = 'running');
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_schedule_idx ON jobs (schedule_id, finished_at) WHERE schedule_id IS NOT NULL;
CREATE INDEX jobs_parent_idx ON jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_failed_idx ON jobs (id) WHERE status = 'failed';
CREATE INDEX jobs_cancelled_idx ON jobs (id) WHERE status = 'cancelled';
