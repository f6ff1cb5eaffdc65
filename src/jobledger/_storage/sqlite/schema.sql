-- GENERATED: the jobledger schema with every migration applied. Do not edit.
-- After adding a migration, regenerate it from the repository root with
--   python -m jobledger._storage.sqlite.migrate \
--       > src/jobledger/_storage/sqlite/schema.sql
-- user_version = 18

CREATE INDEX audit_log_action_idx ON audit_log (action, id);

CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);

CREATE INDEX job_deps_job_idx ON job_deps (job_key);

CREATE INDEX job_schedules_enabled_next_run_idx ON job_schedules (enabled, next_run);

CREATE UNIQUE INDEX job_schedules_type_name_uq ON job_schedules (type, name);

CREATE INDEX jobs_cancelled_idx ON jobs (status) WHERE status = 'cancelled';

CREATE INDEX jobs_claim_idx ON jobs (queue, priority, scheduled_at)
    WHERE status = 'pending' AND cancel_requested = 0;

CREATE INDEX jobs_delayed_idx ON jobs (scheduled_at) WHERE status = 'delayed';

CREATE INDEX jobs_ended_key_idx ON jobs (idempotency_key, finished_at)
    WHERE idempotency_key IS NOT NULL
        AND (status = 'completed' OR status = 'failed' OR status = 'cancelled');

CREATE INDEX jobs_error_code_idx ON jobs
    (CASE WHEN json_valid(error) THEN json_extract(error, '$.code') END)
    WHERE error IS NOT NULL;

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

CREATE INDEX rate_log_unfolded_idx ON rate_log (bucket, at) WHERE keys IS NOT NULL;

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);

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

CREATE TABLE job_counts (
    queue       TEXT NOT NULL,
    status      TEXT NOT NULL,
    rb          INTEGER NOT NULL,
    lb          INTEGER NOT NULL,
    jobs        INTEGER NOT NULL,
    started     INTEGER NOT NULL,
    retried     INTEGER NOT NULL,
    run_ms      INTEGER NOT NULL,
    latency_ms  INTEGER NOT NULL,
    PRIMARY KEY (queue, status, rb, lb)
) WITHOUT ROWID;

CREATE TABLE job_deps (
    upstream_key  INTEGER NOT NULL,               -- the upstream job's rowid
    job_key       INTEGER NOT NULL,               -- the downstream (waiting) job's rowid
    policy        TEXT NOT NULL CHECK (policy = 'cancel' OR policy = 'run'),
    many          INTEGER NOT NULL DEFAULT 0,     -- 1: the upstream step is an add_many
    PRIMARY KEY (upstream_key, job_key)
) WITHOUT ROWID;

CREATE TABLE job_minutes (
    minute     INTEGER PRIMARY KEY,           -- finished_at / 60000
    completed  INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE job_schedules (
    id          TEXT PRIMARY KEY,
    type        TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',          -- '' is the type's singleton
    trigger     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    catch_up    TEXT NOT NULL,
    enabled     INTEGER NOT NULL DEFAULT 1,
    next_run    INTEGER,
    last_run    INTEGER,
    fire_count  INTEGER NOT NULL DEFAULT 0,        -- natural fires, so cron limits survive restarts
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
, overlap TEXT NOT NULL DEFAULT 'allow', jitter_ms INTEGER NOT NULL DEFAULT 0, skipped_count INTEGER NOT NULL DEFAULT 0);

CREATE TABLE job_totals (
    queue    TEXT NOT NULL,
    status   TEXT NOT NULL,
    jobs     INTEGER NOT NULL DEFAULT 0,
    started  INTEGER NOT NULL DEFAULT 0,
    retried  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, status)
) WITHOUT ROWID;

CREATE TABLE "jobs" (
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
, tally INTEGER);

CREATE TABLE leader (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    worker_id   TEXT NOT NULL,
    term        INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

CREATE TABLE locks (
    name         TEXT PRIMARY KEY,
    job_id       TEXT NOT NULL,
    worker_id    TEXT NOT NULL,
    acquired_at  INTEGER NOT NULL
, job_rowid INTEGER NOT NULL DEFAULT 0);

CREATE TABLE ownership (
    key    TEXT PRIMARY KEY,
    owner  TEXT NOT NULL,
    at_ms  INTEGER NOT NULL
);

CREATE TABLE queue_settings (
    queue        TEXT PRIMARY KEY,
    concurrency  INTEGER,
    rate_limit   INTEGER,                 -- starts per window, with rate_per_ms
    rate_per_ms  INTEGER,
    paused       INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE queues (
    seq         INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    type        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE rate_log (
    bucket  TEXT NOT NULL,
    cum     INTEGER NOT NULL,
    at      INTEGER NOT NULL, keys TEXT,
    -- One B-tree: `at` grows with `cum`, so (at, cum) order is cum order too.
    PRIMARY KEY (bucket, at, cum)
) WITHOUT ROWID;

CREATE TABLE search_indexes (
    field TEXT PRIMARY KEY,
    index_name TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE workers (
    id            TEXT PRIMARY KEY,
    hostname      TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    handlers      TEXT NOT NULL DEFAULT '[]',     -- job type names it can run
    started_at    INTEGER NOT NULL,
    heartbeat_at  INTEGER NOT NULL,
    stopped_at    INTEGER
);

CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
, retry_of TEXT);

CREATE TRIGGER jobs_cancel_downstream AFTER UPDATE OF status ON jobs
WHEN new.workflow_id IS NOT NULL AND old.status <> new.status
    AND (new.status = 'failed' OR new.status = 'cancelled')
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

CREATE TRIGGER jobs_collect_attempts AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_attempts WHERE job_key = old.rowid;
END;

CREATE TRIGGER jobs_collect_deps AFTER DELETE ON jobs
WHEN old.step IS NOT NULL
BEGIN
    DELETE FROM job_deps WHERE job_key = old.rowid;
    DELETE FROM job_deps WHERE upstream_key = old.rowid;
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

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
BEGIN
    INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
    VALUES (old.queue, CASE WHEN old.status = 'pending' OR old.status = 'running' THEN 'open' ELSE old.status END,
        CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL
            THEN CASE WHEN old.finished_at - old.started_at <= 2500 THEN CASE WHEN old.finished_at - old.started_at <= 100 THEN CASE WHEN old.finished_at - old.started_at <= 25 THEN CASE WHEN old.finished_at - old.started_at <= 10 THEN CASE WHEN old.finished_at - old.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.finished_at - old.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.finished_at - old.started_at <= 500 THEN CASE WHEN old.finished_at - old.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.finished_at - old.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.finished_at - old.started_at <= 60000 THEN CASE WHEN old.finished_at - old.started_at <= 10000 THEN CASE WHEN old.finished_at - old.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.finished_at - old.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.finished_at - old.started_at <= 900000 THEN CASE WHEN old.finished_at - old.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.finished_at - old.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN old.started_at IS NULL OR old.status = 'running' THEN -1
            ELSE CASE WHEN old.started_at - old.scheduled_at <= 2500 THEN CASE WHEN old.started_at - old.scheduled_at <= 100 THEN CASE WHEN old.started_at - old.scheduled_at <= 25 THEN CASE WHEN old.started_at - old.scheduled_at <= 10 THEN CASE WHEN old.started_at - old.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 500 THEN CASE WHEN old.started_at - old.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 60000 THEN CASE WHEN old.started_at - old.scheduled_at <= 10000 THEN CASE WHEN old.started_at - old.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 900000 THEN CASE WHEN old.started_at - old.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        -1, -(old.attempt + (old.started_at IS NOT NULL AND old.status <> 'running')), -old.attempt,
        -(CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL THEN old.finished_at - old.started_at ELSE 0 END),
        -(CASE WHEN old.started_at IS NULL OR old.status = 'running' THEN 0 ELSE max(0, old.started_at - old.scheduled_at) END))
    ON CONFLICT (queue, status, rb, lb) DO UPDATE SET jobs = jobs + excluded.jobs,
        started = started + excluded.started, retried = retried + excluded.retried,
        run_ms = run_ms + excluded.run_ms, latency_ms = latency_ms + excluded.latency_ms;
END;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
    VALUES (new.queue, CASE WHEN new.status = 'pending' OR new.status = 'running' THEN 'open' ELSE new.status END,
        CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL
            THEN CASE WHEN new.finished_at - new.started_at <= 2500 THEN CASE WHEN new.finished_at - new.started_at <= 100 THEN CASE WHEN new.finished_at - new.started_at <= 25 THEN CASE WHEN new.finished_at - new.started_at <= 10 THEN CASE WHEN new.finished_at - new.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.finished_at - new.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.finished_at - new.started_at <= 500 THEN CASE WHEN new.finished_at - new.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.finished_at - new.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.finished_at - new.started_at <= 60000 THEN CASE WHEN new.finished_at - new.started_at <= 10000 THEN CASE WHEN new.finished_at - new.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.finished_at - new.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.finished_at - new.started_at <= 900000 THEN CASE WHEN new.finished_at - new.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.finished_at - new.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN new.started_at IS NULL OR new.status = 'running' THEN -1
            ELSE CASE WHEN new.started_at - new.scheduled_at <= 2500 THEN CASE WHEN new.started_at - new.scheduled_at <= 100 THEN CASE WHEN new.started_at - new.scheduled_at <= 25 THEN CASE WHEN new.started_at - new.scheduled_at <= 10 THEN CASE WHEN new.started_at - new.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 500 THEN CASE WHEN new.started_at - new.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 60000 THEN CASE WHEN new.started_at - new.scheduled_at <= 10000 THEN CASE WHEN new.started_at - new.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 900000 THEN CASE WHEN new.started_at - new.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        1, (new.attempt + (new.started_at IS NOT NULL AND new.status <> 'running')), new.attempt,
        (CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL THEN new.finished_at - new.started_at ELSE 0 END),
        (CASE WHEN new.started_at IS NULL OR new.status = 'running' THEN 0 ELSE max(0, new.started_at - new.scheduled_at) END))
    ON CONFLICT (queue, status, rb, lb) DO UPDATE SET jobs = jobs + excluded.jobs,
        started = started + excluded.started, retried = retried + excluded.retried,
        run_ms = run_ms + excluded.run_ms, latency_ms = latency_ms + excluded.latency_ms;
    INSERT INTO job_minutes (minute, completed, failed)
    SELECT new.finished_at / 60000, new.status = 'completed', new.status = 'failed'
    WHERE (new.status = 'completed' OR new.status = 'failed') AND new.finished_at IS NOT NULL
    ON CONFLICT (minute) DO UPDATE SET completed = completed + excluded.completed,
        failed = failed + excluded.failed;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, queue, attempt, started_at, finished_at,
    scheduled_at ON jobs
WHEN (old.status IS NOT new.status OR old.queue IS NOT new.queue OR old.attempt IS NOT new.attempt
    OR old.started_at IS NOT new.started_at OR old.finished_at IS NOT new.finished_at
    OR (old.scheduled_at IS NOT new.scheduled_at AND new.started_at IS NOT NULL))
    -- A move that leaves the row's contribution as it was (a claim, pending to running,
    -- or a reset or a requeue, running to pending) writes nothing: the condition is
    -- cheap where the body's upserts are not.
    AND NOT ((old.status = 'pending' OR old.status = 'running')
        AND (new.status = 'pending' OR new.status = 'running')
        AND old.queue IS new.queue AND old.attempt IS new.attempt
        AND (old.started_at IS NULL OR old.status = 'running')
        AND (new.started_at IS NULL OR new.status = 'running'))
    -- A batched finalize counts the rows it ends from a claim's shape itself, and says
    -- so by moving their tally to 1 or 2 (`sqlite/counts.py`).
    AND NOT (new.tally IS NOT old.tally AND (new.tally = 1 OR new.tally = 2))
BEGIN
    INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
    VALUES (old.queue, CASE WHEN old.status = 'pending' OR old.status = 'running' THEN 'open' ELSE old.status END,
        CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL
            THEN CASE WHEN old.finished_at - old.started_at <= 2500 THEN CASE WHEN old.finished_at - old.started_at <= 100 THEN CASE WHEN old.finished_at - old.started_at <= 25 THEN CASE WHEN old.finished_at - old.started_at <= 10 THEN CASE WHEN old.finished_at - old.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.finished_at - old.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.finished_at - old.started_at <= 500 THEN CASE WHEN old.finished_at - old.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.finished_at - old.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.finished_at - old.started_at <= 60000 THEN CASE WHEN old.finished_at - old.started_at <= 10000 THEN CASE WHEN old.finished_at - old.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.finished_at - old.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.finished_at - old.started_at <= 900000 THEN CASE WHEN old.finished_at - old.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.finished_at - old.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN old.started_at IS NULL OR old.status = 'running' THEN -1
            ELSE CASE WHEN old.started_at - old.scheduled_at <= 2500 THEN CASE WHEN old.started_at - old.scheduled_at <= 100 THEN CASE WHEN old.started_at - old.scheduled_at <= 25 THEN CASE WHEN old.started_at - old.scheduled_at <= 10 THEN CASE WHEN old.started_at - old.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 500 THEN CASE WHEN old.started_at - old.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 60000 THEN CASE WHEN old.started_at - old.scheduled_at <= 10000 THEN CASE WHEN old.started_at - old.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 900000 THEN CASE WHEN old.started_at - old.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        -1, -(old.attempt + (old.started_at IS NOT NULL AND old.status <> 'running')), -old.attempt,
        -(CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL THEN old.finished_at - old.started_at ELSE 0 END),
        -(CASE WHEN old.started_at IS NULL OR old.status = 'running' THEN 0 ELSE max(0, old.started_at - old.scheduled_at) END)),
    (new.queue, CASE WHEN new.status = 'pending' OR new.status = 'running' THEN 'open' ELSE new.status END,
        CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL
            THEN CASE WHEN new.finished_at - new.started_at <= 2500 THEN CASE WHEN new.finished_at - new.started_at <= 100 THEN CASE WHEN new.finished_at - new.started_at <= 25 THEN CASE WHEN new.finished_at - new.started_at <= 10 THEN CASE WHEN new.finished_at - new.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.finished_at - new.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.finished_at - new.started_at <= 500 THEN CASE WHEN new.finished_at - new.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.finished_at - new.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.finished_at - new.started_at <= 60000 THEN CASE WHEN new.finished_at - new.started_at <= 10000 THEN CASE WHEN new.finished_at - new.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.finished_at - new.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.finished_at - new.started_at <= 900000 THEN CASE WHEN new.finished_at - new.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.finished_at - new.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN new.started_at IS NULL OR new.status = 'running' THEN -1
            ELSE CASE WHEN new.started_at - new.scheduled_at <= 2500 THEN CASE WHEN new.started_at - new.scheduled_at <= 100 THEN CASE WHEN new.started_at - new.scheduled_at <= 25 THEN CASE WHEN new.started_at - new.scheduled_at <= 10 THEN CASE WHEN new.started_at - new.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 500 THEN CASE WHEN new.started_at - new.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 60000 THEN CASE WHEN new.started_at - new.scheduled_at <= 10000 THEN CASE WHEN new.started_at - new.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 900000 THEN CASE WHEN new.started_at - new.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        1, (new.attempt + (new.started_at IS NOT NULL AND new.status <> 'running')), new.attempt,
        (CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL THEN new.finished_at - new.started_at ELSE 0 END),
        (CASE WHEN new.started_at IS NULL OR new.status = 'running' THEN 0 ELSE max(0, new.started_at - new.scheduled_at) END))
    ON CONFLICT (queue, status, rb, lb) DO UPDATE SET jobs = jobs + excluded.jobs,
        started = started + excluded.started, retried = retried + excluded.retried,
        run_ms = run_ms + excluded.run_ms, latency_ms = latency_ms + excluded.latency_ms;
    -- An ended row that moves leaves its minute (only a hand-made write does that:
    -- terminal rows stay terminal), then the row is counted where it ended.
    INSERT INTO job_minutes (minute, completed, failed)
    SELECT old.finished_at / 60000, -(old.status = 'completed'), -(old.status = 'failed')
    WHERE (old.status = 'completed' OR old.status = 'failed') AND old.finished_at IS NOT NULL
        AND (old.status IS NOT new.status OR old.finished_at IS NOT new.finished_at)
    ON CONFLICT (minute) DO UPDATE SET completed = completed + excluded.completed,
        failed = failed + excluded.failed;
    INSERT INTO job_minutes (minute, completed, failed)
    SELECT new.finished_at / 60000, new.status = 'completed', new.status = 'failed'
    WHERE (new.status = 'completed' OR new.status = 'failed') AND new.finished_at IS NOT NULL
        AND (old.status IS NOT new.status OR old.finished_at IS NOT new.finished_at)
    ON CONFLICT (minute) DO UPDATE SET completed = completed + excluded.completed,
        failed = failed + excluded.failed;
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

CREATE TRIGGER jobs_release_buffered_fire AFTER UPDATE OF status ON jobs
WHEN new.schedule_id IS NOT NULL AND old.status <> new.status
    AND (new.status = 'completed' OR new.status = 'failed' OR new.status = 'cancelled')
BEGIN
    UPDATE jobs SET status = 'pending', scheduled_at = min(scheduled_at, new.updated_at),
        updated_at = new.updated_at
    WHERE schedule_id = new.schedule_id AND finished_at IS NULL AND status = 'waiting'
        AND workflow_id IS NULL AND step IS NULL
        -- Never a second live row under one key (the unique index would fail the
        -- ending write): such a row stays waiting, where `doctor` reports it.
        AND (idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs k
            WHERE k.idempotency_key = jobs.idempotency_key
            AND (k.status = 'pending' OR k.status = 'delayed' OR k.status = 'running')))
        AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.schedule_id = new.schedule_id
            AND o.finished_at IS NULL
            AND (o.status = 'pending' OR o.status = 'delayed' OR o.status = 'running'));
END;

CREATE TRIGGER jobs_release_downstream AFTER UPDATE OF status ON jobs
WHEN new.workflow_id IS NOT NULL AND old.status <> new.status AND new.status = 'completed'
BEGIN
    UPDATE jobs SET
        upstream_left = upstream_left - 1,
        status = CASE WHEN upstream_left <= 1 THEN 'pending' ELSE 'waiting' END,
        updated_at = new.updated_at
    WHERE rowid IN (SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid)
        AND status = 'waiting';
END;

CREATE VIEW job_counts_now AS
SELECT queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms
FROM job_counts WHERE status <> 'open'
UNION ALL
SELECT queue, 'pending', rb, lb, jobs, started, retried, run_ms, latency_ms
FROM job_counts WHERE status = 'open'
UNION ALL
SELECT queue, 'running', -1,
    CASE WHEN started_at IS NULL THEN -1 ELSE CASE WHEN started_at - scheduled_at <= 2500 THEN CASE WHEN started_at - scheduled_at <= 100 THEN CASE WHEN started_at - scheduled_at <= 25 THEN CASE WHEN started_at - scheduled_at <= 10 THEN CASE WHEN started_at - scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN started_at - scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN started_at - scheduled_at <= 500 THEN CASE WHEN started_at - scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN started_at - scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN started_at - scheduled_at <= 60000 THEN CASE WHEN started_at - scheduled_at <= 10000 THEN CASE WHEN started_at - scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN started_at - scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN started_at - scheduled_at <= 900000 THEN CASE WHEN started_at - scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN started_at - scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
    1, attempt + (started_at IS NOT NULL), attempt, 0,
    CASE WHEN started_at IS NULL THEN 0 ELSE max(0, started_at - scheduled_at) END
FROM jobs WHERE status = 'running'
UNION ALL
SELECT queue, 'pending', -1, -1, -1, -attempt, -attempt, 0, 0
FROM jobs WHERE status = 'running';
