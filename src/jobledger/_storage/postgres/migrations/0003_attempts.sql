-- One record per attempt that ended (docs/design/storage.md, "Attempts"): written by the
-- transaction that moves the job (finalize; a rescue for an attempt whose worker died),
-- never by a transaction of its own, and read only by observers. Deleting a job (GC)
-- deletes its attempts through the foreign key, in the same statement.
CREATE TABLE job_attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      text COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,            -- the job's `attempt` when it ran (0-based)
    worker_id   text,
    started_at  bigint,
    finished_at bigint NOT NULL,
    outcome     text NOT NULL,               -- completed retry failed cancelled interrupted lost
    error       text,                        -- JobErrorInfo JSON, with its traceback
    logs        text                         -- JSON [[at_ms, level, message], ...]
);

CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, id);
