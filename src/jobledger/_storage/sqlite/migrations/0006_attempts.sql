-- One record per attempt that ended (docs/design/storage.md, "Attempts"): written by the
-- transaction that moves the job (finalize; a rescue for an attempt whose worker died),
-- never by a transaction of its own, and read only by observers. `job_key` is the
-- job's rowid (`ids.row_key`), so the index entry is an integer that grows as the ids
-- do. Deleting a job (GC) deletes its attempts in the same transaction.
CREATE TABLE job_attempts (
    id          INTEGER PRIMARY KEY,
    job_key     INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,            -- the job's `attempt` when it ran (0-based)
    worker_id   TEXT,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    outcome     TEXT NOT NULL,               -- completed retry failed cancelled interrupted lost
    error       TEXT,                        -- JobErrorInfo JSON, with its traceback
    logs        TEXT                         -- JSON [[at_ms, level, message], ...]
);

CREATE INDEX job_attempts_job_idx ON job_attempts (job_key);

CREATE TRIGGER jobs_collect_attempts AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_attempts WHERE job_key = old.rowid;
END;
