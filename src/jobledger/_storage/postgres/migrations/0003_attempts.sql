-- The ended attempts a job row cannot tell (docs/design/storage.md, "Attempts";
-- _storage/attempts.py): retries, attempts interrupted by a shutdown or lost with their
-- worker, and a final attempt's log lines. The attempt a row ended with is read from the
-- row itself, so a job that succeeds at once writes nothing here. `n` is the attempt
-- number for a record that ends an attempt, the job's next negative number for an unspent
-- one. Deleting a job (GC) deletes its records through the foreign key.
CREATE TABLE job_attempts (
    job_id      text COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    n           integer NOT NULL,
    attempt     integer NOT NULL,            -- the job's `attempt` when it ran (0-based)
    worker_id   text,
    started_at  bigint,
    finished_at bigint NOT NULL,
    outcome     text NOT NULL,               -- completed retry failed cancelled interrupted lost
    error       text,                        -- JobErrorInfo JSON, with its traceback
    logs        text,                        -- JSON [[at_ms, level, message], ...]
    PRIMARY KEY (job_id, n)
);
