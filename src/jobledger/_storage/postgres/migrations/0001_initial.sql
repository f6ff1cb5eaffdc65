-- jobledger schema for PostgreSQL, version 1.
-- Run by migrate.py inside one transaction with `SET LOCAL search_path` pointing at the
-- target schema, so every name below lands in that schema.
-- Column-for-column the SQLite schema: times are bigint epoch milliseconds (UTC), JSON
-- is text (byte-for-byte what the library wrote), flags are 0/1 integers, and ids, queue,
-- type and schedule names use the "C" collation so they sort byte-wise as in SQLite.

CREATE TABLE job_schedules (
    id          text COLLATE "C" PRIMARY KEY,
    type        text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL DEFAULT '',   -- '' is the type's singleton
    trigger     text NOT NULL,
    payload     text NOT NULL,
    catch_up    text NOT NULL,
    enabled     integer NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    next_run    bigint,
    last_run    bigint,
    fire_count  bigint NOT NULL DEFAULT 0,
    metadata    text NOT NULL DEFAULT '{}',
    created_at  bigint NOT NULL,
    updated_at  bigint NOT NULL
);
CREATE UNIQUE INDEX job_schedules_type_name_uq ON job_schedules (type, name);
CREATE INDEX job_schedules_enabled_next_run_idx ON job_schedules (enabled, next_run);

-- fillfactor leaves room on each page so progress/metadata updates stay HOT.
CREATE TABLE jobs (
    id               text COLLATE "C" PRIMARY KEY,
    type             text COLLATE "C" NOT NULL,
    status           text NOT NULL CHECK (status IN
                        ('pending', 'delayed', 'running', 'completed', 'failed', 'cancelled')),
    queue            text COLLATE "C" NOT NULL,
    priority         bigint NOT NULL DEFAULT 0,
    payload          text NOT NULL,
    output           text,
    error            text,
    attempt          bigint NOT NULL DEFAULT 0,
    max_attempts     bigint NOT NULL DEFAULT 3,
    timeout_ms       bigint,
    idempotency_key  text COLLATE "C",
    parent_id        text COLLATE "C" REFERENCES jobs (id) ON DELETE SET NULL,
    schedule_id      text COLLATE "C" REFERENCES job_schedules (id) ON DELETE SET NULL,
    metadata         text NOT NULL DEFAULT '{}',
    progress         double precision,
    progress_detail  text,
    cancel_requested integer NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    cancel_reason    text,
    worker_id        text COLLATE "C",
    enqueued_by      text COLLATE "C",
    scheduled_at     bigint NOT NULL,
    started_at       bigint,
    finished_at      bigint,
    created_at       bigint NOT NULL,
    updated_at       bigint NOT NULL
) WITH (fillfactor = 80);
-- The claim reads the head of this index: O(log n) in the backlog.
CREATE INDEX jobs_claim_idx ON jobs (queue, priority, scheduled_at, id)
    WHERE status = 'pending' AND cancel_requested = 0;
-- Caps count running rows only; this keeps both counts cheap.
CREATE INDEX jobs_running_idx ON jobs (queue, worker_id) WHERE status = 'running';
CREATE INDEX jobs_delayed_idx ON jobs (scheduled_at) WHERE status = 'delayed';
CREATE UNIQUE INDEX jobs_idempotency_key_uq ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'delayed', 'running');
CREATE INDEX jobs_created_idx ON jobs (created_at, id);
CREATE INDEX jobs_status_created_idx ON jobs (status, created_at);
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_schedule_idx ON jobs (schedule_id, finished_at) WHERE schedule_id IS NOT NULL;
CREATE INDEX jobs_parent_idx ON jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_enqueued_by_idx ON jobs (enqueued_by) WHERE status IN ('pending', 'delayed');

-- Every queue any process has written a job to, numbered in commit order (see
-- queries.REGISTER_QUEUE), so workers discover new queues by reading past the last seq.
CREATE TABLE queues (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text COLLATE "C" NOT NULL UNIQUE,
    type        text COLLATE "C" NOT NULL,
    created_at  bigint NOT NULL
);

-- One row per started JobManager; heartbeat_at says it is alive.
CREATE TABLE workers (
    id            text COLLATE "C" PRIMARY KEY,
    hostname      text NOT NULL,
    pid           bigint NOT NULL,
    handlers      text NOT NULL DEFAULT '[]',
    started_at    bigint NOT NULL,
    heartbeat_at  bigint NOT NULL,
    stopped_at    bigint
);

-- Durable named locks (layer 3), held by a running job.
CREATE TABLE locks (
    name         text COLLATE "C" PRIMARY KEY,
    job_id       text COLLATE "C" NOT NULL,
    worker_id    text COLLATE "C" NOT NULL,
    acquired_at  bigint NOT NULL
);
CREATE INDEX locks_job_idx ON locks (job_id);
CREATE INDEX locks_worker_idx ON locks (worker_id);

-- The leader lease: one row, a term that grows on every change of holder.
CREATE TABLE leader (
    id          integer PRIMARY KEY CHECK (id = 1),
    worker_id   text COLLATE "C" NOT NULL,
    term        bigint NOT NULL,
    expires_at  bigint NOT NULL
);

-- Change notification (`PostgresStore.data_version`). Every write other processes care
-- about calls note_change() inside its transaction: NOTIFY (delivered at COMMIT) for
-- listeners, and a bump of `changes` for pollers. A sequence is not transactional, so
-- the bump is visible before COMMIT; the shared advisory lock held to COMMIT lets
-- change_version() tell "no write in flight" (it gets the exclusive lock) from "a write
-- may still be committing" (it returns NULL, which the poller counts as a change).
CREATE SEQUENCE changes;

-- The functions are created with the schema's names baked in (a `SET search_path`
-- clause would cost a GUC save/restore on every call, doubling the price of a write).
DO $migration$
DECLARE
    lock_key bigint := hashtextextended('jobledger:' || current_schema() || ':changes', 0);
    seq text := quote_ident(current_schema()) || '.changes';
    channel text := 'jobledger_' || current_schema();
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION note_change() RETURNS void LANGUAGE plpgsql AS $body$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(%1$s);
            PERFORM nextval(%2$L);
            PERFORM pg_notify(%3$L, '');
        END
        $body$
    $f$, lock_key, seq, channel);
    EXECUTE format($f$
        CREATE FUNCTION change_version() RETURNS bigint LANGUAGE plpgsql AS $body$
        BEGIN
            IF pg_try_advisory_xact_lock(%1$s) THEN
                RETURN (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %2$s);
            END IF;
            RETURN NULL;
        END
        $body$
    $f$, lock_key, seq);
END
$migration$;

-- Raised inside the one-round-trip enqueue when an entry neither inserted nor found a
-- live row with its key (a missing parent, or a key race): aborts the transaction so the
-- store redoes the batch on its careful path. Never seen by callers.
CREATE FUNCTION enqueue_missed() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'jobledger: an enqueue entry neither inserted nor found a live row'
        USING ERRCODE = 'JLMIS';
END
$$;
