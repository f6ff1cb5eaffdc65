-- The ended attempts a job row cannot tell (docs/design/storage.md, "Attempts";
-- _storage/attempts.py): retries, attempts interrupted by a shutdown or lost with their
-- worker, and a final attempt's log lines. The attempt a row ended with is read from the
-- row itself, so a job that succeeds at once writes nothing here.
--
-- One B-tree, keyed (job_key, n): `job_key` is the job's rowid (`ids.row_key`), so keys
-- grow as the ids do. `n` is the attempt number for a record that ends an attempt (one
-- per number: a retry moves the job on to the next), the job's next negative number for
-- an unspent one. Retries are recorded by the trigger below inside the very UPDATE that
-- moves the row to `delayed`; the store writes the rest. Deleting a job (GC) deletes its
-- records in the same transaction.
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

CREATE TRIGGER jobs_record_retries AFTER UPDATE OF status ON jobs
WHEN old.status = 'running' AND new.status = 'delayed'
BEGIN
    INSERT OR IGNORE INTO job_attempts
        (job_key, n, attempt, worker_id, started_at, finished_at, outcome, error)
    VALUES (new.rowid, old.attempt, old.attempt, old.worker_id, old.started_at,
        new.updated_at, 'retry', new.error);
END;

CREATE TRIGGER jobs_collect_attempts AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_attempts WHERE job_key = old.rowid;
END;
