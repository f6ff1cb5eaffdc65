-- One record per attempt that ended (docs/design/storage.md, "Attempts"): written by the
-- transaction that moves the job (finalize; a rescue for an attempt whose worker died),
-- never by a transaction of its own, and read only by observers.
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

CREATE TRIGGER jobs_collect_attempts AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_attempts WHERE job_key = old.rowid;
END;
