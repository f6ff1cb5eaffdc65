-- jobledger: foreign_keys=off
-- Workflows (issue 23): a graph of jobs written in one transaction, where a job whose
-- upstream jobs have not all finished waits in the new status `waiting`.
--
-- * `waiting` joins the status CHECK (spelled as comparisons, as migration 3 explains).
--   A waiting row takes no slot and is in no claim index, so it is never claimed; the
--   finalize of its last upstream job moves it to `pending` in the same transaction.
-- * `workflow_id` and `step` name the row's workflow and step (NULL on every job that
--   is not in one); `upstream_left` counts its upstream jobs not yet finished (NULL
--   outside a workflow). Only a write that ends a row with `workflow_id` set looks at
--   `job_deps`; ordinary jobs pay one NULL test in the trigger's WHEN.
-- * `job_deps` holds one edge per (upstream job, downstream job), by rowid (a lookup by
--   rowid needs no index, migration 4), with the downstream step's
--   `on_upstream_failure` policy ('cancel' or 'run'); its key leads with the upstream
--   job, which is how the release reads it.
-- * The release is a trigger (`jobs_release_downstream`, below), so every write that
--   ends a workflow job releases or cancels its downstream jobs in its own transaction.
-- * `workflows` names each graph.
--
-- SQLite cannot change a CHECK in place, so the table is rebuilt as in migration 3
-- (rowids copied, foreign keys off); on a large file this copies every row once, under
-- the writer lease. Every index and trigger on `jobs` is created again as it was.
CREATE TABLE jobs_new (
    id               TEXT NOT NULL,                 -- rowid = ids.row_key(id); migration 4
    type             TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status = 'pending' OR status = 'delayed'
                        OR status = 'running' OR status = 'completed'
                        OR status = 'failed' OR status = 'cancelled'
                        OR status = 'waiting'),
    queue            TEXT NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    payload          TEXT NOT NULL,
    output           TEXT,
    error            TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3,
    timeout_ms       INTEGER,
    idempotency_key  TEXT,
    parent_id        TEXT,                          -- set NULL by jobs_orphan_children
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
    updated_at       INTEGER NOT NULL,
    retry_of         TEXT,
    rate_key         TEXT,
    workflow_id      TEXT,
    step             TEXT,
    upstream_left    INTEGER
);
INSERT INTO jobs_new (
    rowid, id, type, status, queue, priority, payload, output, error, attempt,
    max_attempts, timeout_ms, idempotency_key, parent_id, schedule_id, metadata, progress,
    progress_detail, cancel_requested, cancel_reason, worker_id, enqueued_by,
    scheduled_at, started_at, finished_at, created_at, updated_at, retry_of, rate_key
)
SELECT
    rowid, id, type, status, queue, priority, payload, output, error, attempt,
    max_attempts, timeout_ms, idempotency_key, parent_id, schedule_id, metadata, progress,
    progress_detail, cancel_requested, cancel_reason, worker_id, enqueued_by,
    scheduled_at, started_at, finished_at, created_at, updated_at, retry_of, rate_key
FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_cancelled_idx ON jobs (status) WHERE status = 'cancelled';
CREATE INDEX jobs_claim_idx ON jobs (queue, priority, scheduled_at)
    WHERE status = 'pending' AND cancel_requested = 0;
CREATE INDEX jobs_delayed_idx ON jobs (scheduled_at) WHERE status = 'delayed';
CREATE INDEX jobs_ended_key_idx ON jobs (idempotency_key, finished_at)
    WHERE idempotency_key IS NOT NULL
        AND (status = 'completed' OR status = 'failed' OR status = 'cancelled');
CREATE INDEX jobs_failed_idx ON jobs (status) WHERE status = 'failed';
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_idempotency_key_uq ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL
        AND (status = 'pending' OR status = 'delayed' OR status = 'running');
CREATE INDEX jobs_legacy_id_idx ON jobs (id) WHERE rowid < 0;
CREATE INDEX jobs_parent_idx ON jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_retry_of_idx ON jobs (retry_of) WHERE retry_of IS NOT NULL;
CREATE INDEX jobs_running_idx ON jobs (queue, worker_id) WHERE status = 'running';
CREATE INDEX jobs_schedule_idx ON jobs (schedule_id, finished_at) WHERE schedule_id IS NOT NULL;
CREATE INDEX jobs_workflow_idx ON jobs (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE TRIGGER jobs_collect_attempts AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_attempts WHERE job_key = old.rowid;
END;
CREATE TRIGGER jobs_collect_totals AFTER DELETE ON jobs
WHEN old.status = 'completed' OR old.status = 'failed' OR old.status = 'cancelled'
BEGIN
    INSERT INTO job_totals (queue, status, jobs, started, retried)
    VALUES (old.queue, old.status, 1, old.attempt + (old.started_at IS NOT NULL), old.attempt)
    ON CONFLICT (queue, status) DO UPDATE SET
        jobs = jobs + 1,
        started = started + excluded.started,
        retried = retried + excluded.retried;
END;
CREATE TRIGGER jobs_orphan_children AFTER DELETE ON jobs BEGIN
    UPDATE jobs SET parent_id = NULL WHERE parent_id = old.id;
END;
CREATE TRIGGER jobs_record_retries AFTER UPDATE OF status ON jobs
WHEN old.status = 'running' AND new.status = 'delayed'
BEGIN
    INSERT OR IGNORE INTO job_attempts
        (job_key, n, attempt, worker_id, started_at, finished_at, outcome, error)
    VALUES (new.rowid, old.attempt, old.attempt, old.worker_id, old.started_at,
        new.updated_at, 'retry', new.error);
END;
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE TABLE job_deps (
    upstream_key  INTEGER NOT NULL,               -- the upstream job's rowid
    job_key       INTEGER NOT NULL,               -- the downstream (waiting) job's rowid
    policy        TEXT NOT NULL CHECK (policy = 'cancel' OR policy = 'run'),
    many          INTEGER NOT NULL DEFAULT 0,     -- 1: the upstream step is an add_many
    PRIMARY KEY (upstream_key, job_key)
) WITHOUT ROWID;
CREATE INDEX job_deps_job_idx ON job_deps (job_key);
-- A collected workflow job takes its edges with it (only rows of a workflow have any).
CREATE TRIGGER jobs_collect_deps AFTER DELETE ON jobs
WHEN old.workflow_id IS NOT NULL
BEGIN
    DELETE FROM job_deps WHERE job_key = old.rowid;
    DELETE FROM job_deps WHERE upstream_key = old.rowid;
END;
-- The release, in the transaction of whatever write ended a workflow job (a finalize,
-- a cancel, a recovery): its waiting downstream jobs take one upstream job off
-- `upstream_left`, and those reaching 0 become `pending`. When it ended `failed` or
-- `cancelled`, the downstream jobs whose step's policy is 'cancel' are cancelled, and
-- with them, transitively, theirs (`doomed`, a recursive query: SQLite does not fire a
-- trigger from its own body, so the whole closure is taken here at once); the jobs
-- downstream of a doomed one with the policy 'run' count it as finished.
-- Rows outside a workflow fail the WHEN at once: an ordinary finalize runs none of it.
CREATE TRIGGER jobs_release_downstream AFTER UPDATE OF status ON jobs
WHEN new.workflow_id IS NOT NULL AND old.status <> new.status
    AND (new.status = 'completed' OR new.status = 'failed' OR new.status = 'cancelled')
BEGIN
    UPDATE jobs SET
        upstream_left = upstream_left - (
            SELECT count(*) FROM job_deps d WHERE d.job_key = jobs.rowid AND d.upstream_key IN (
                SELECT new.rowid UNION ALL SELECT key FROM (
                    WITH RECURSIVE doomed(key) AS (
                        SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                            AND d.policy = 'cancel' AND new.status <> 'completed'
                        UNION
                        SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                            WHERE d.policy = 'cancel'
                    ) SELECT key FROM doomed))),
        updated_at = new.updated_at
    WHERE rowid IN (
        SELECT d.job_key FROM job_deps d WHERE d.upstream_key IN (
            SELECT new.rowid UNION ALL SELECT key FROM (
                WITH RECURSIVE doomed(key) AS (
                    SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                        AND d.policy = 'cancel' AND new.status <> 'completed'
                    UNION
                    SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                        WHERE d.policy = 'cancel'
                ) SELECT key FROM doomed)))
        AND rowid NOT IN (
            WITH RECURSIVE doomed(key) AS (
                SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                    AND d.policy = 'cancel' AND new.status <> 'completed'
                UNION
                SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                    WHERE d.policy = 'cancel'
            ) SELECT key FROM doomed)
        AND status = 'waiting';
    UPDATE jobs SET status = 'pending', updated_at = new.updated_at
    WHERE rowid IN (SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid)
        AND status = 'waiting' AND upstream_left <= 0;
    UPDATE jobs SET status = 'pending', updated_at = new.updated_at
    WHERE new.status <> 'completed' AND status = 'waiting' AND upstream_left <= 0
        AND rowid IN (SELECT d.job_key FROM job_deps d WHERE d.upstream_key IN (
            WITH RECURSIVE doomed(key) AS (
                SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                    AND d.policy = 'cancel'
                UNION
                SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                    WHERE d.policy = 'cancel'
            ) SELECT key FROM doomed));
    UPDATE jobs SET status = 'cancelled', finished_at = new.updated_at,
        updated_at = new.updated_at, upstream_left = 0,
        error = json_object('code', 'JOB_CANCELLED',
            'message', 'an upstream job of this workflow step ended ' || new.status,
            'retryable', json('false'),
            'params', json_object('reason', 'upstream', 'upstream_id', new.id,
                'upstream_status', new.status))
    WHERE new.status <> 'completed' AND status = 'waiting' AND rowid IN (
        WITH RECURSIVE doomed(key) AS (
            SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                AND d.policy = 'cancel'
            UNION
            SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                WHERE d.policy = 'cancel'
        ) SELECT key FROM doomed);
END;
