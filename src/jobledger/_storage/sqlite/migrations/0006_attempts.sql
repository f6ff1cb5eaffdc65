-- One record per attempt that ended (docs/design/storage.md, "Attempts"): written by the
-- transaction that moves the job (finalize; a rescue for an attempt whose worker died),
-- never by a transaction of its own, and read only by observers.
--
-- The record of an attempt that ends the hot way (a worker's fenced finalize: completed,
-- failed, cancelled, or a retry to `delayed`) is written by the trigger below, inside the
-- very UPDATE that moves the row: a statement of its own per finalize cost about 14% of
-- the drain (docs/benchmarks.md), the trigger's insert almost nothing. The store adds
-- what the row does not hold (the attempt's log lines; the handler's error when a retry
-- met a cancel request) and writes the rare records itself (interrupted, lost).
--
-- One B-tree, keyed (job_key, n): `job_key` is the job's rowid (`ids.row_key`), so keys
-- grow as the ids do, and finalize appends without a second index. `n` is the attempt
-- number for the record that ends an attempt (completed, retry, failed, cancelled: one
-- per attempt, since a retry moves the job to its next number), so the hot path writes
-- it without reading; an attempt interrupted by a shutdown or lost with its worker is
-- not spent, so its record takes the next negative `n` of the job (-1, -2, ...), read in
-- the same statement. Deleting a job (GC) deletes its records in the same transaction.
CREATE TABLE job_attempts (
    job_key     INTEGER NOT NULL,
    n           INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,            -- the job's `attempt` when it ran (0-based)
    worker_id   TEXT,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    outcome     TEXT NOT NULL,               -- completed retry failed cancelled interrupted lost
    error       TEXT,                        -- JobErrorInfo JSON, with its traceback
    logs        TEXT,                        -- JSON [[at_ms, level, message], ...]
    PRIMARY KEY (job_key, n)
) WITHOUT ROWID;

-- Statuses as OR of literals, not IN: see 0003_status_check_without_in.sql.
CREATE TRIGGER jobs_record_attempts AFTER UPDATE OF status ON jobs
WHEN old.status = 'running' AND (new.status = 'completed' OR new.status = 'failed'
    OR new.status = 'cancelled' OR new.status = 'delayed')
BEGIN
    INSERT OR IGNORE INTO job_attempts
        (job_key, n, attempt, worker_id, started_at, finished_at, outcome, error)
    VALUES (new.rowid, old.attempt, old.attempt, old.worker_id, old.started_at,
        new.updated_at, CASE WHEN new.status = 'delayed' THEN 'retry' ELSE new.status END,
        new.error);
END;

CREATE TRIGGER jobs_collect_attempts AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_attempts WHERE job_key = old.rowid;
END;
