-- The console's counts at a million rows (issue 25); the same tables as SQLite's
-- migration 16, which explains them (job_counts: what the metrics pass over `jobs`
-- grouped by (queue, status, run bucket, latency bucket) summed, -1 for a row a
-- histogram does not cover; job_minutes: jobs that ended completed/failed per minute).
--
-- Kept by statement-level triggers with transition tables: one upsert per key a
-- statement changed, not one per row (a claim of 50 rows of one queue writes two or
-- three counter rows), netted so an UPDATE that moves nothing counted (progress,
-- metadata) writes none.
--
-- Concurrency. Every claim and finalize changes the same few keys of its queue; one row
-- per key would make each transaction wait for the previous one's commit on that row
-- (the claims of N workers in a line), and two transactions that change the same two
-- keys in opposite orders (a finalize-then-claim against a claim) would deadlock. So
-- each key has a row per session: `slot` is the writing backend's pid, and no two live
-- sessions share a pid, so no writer ever waits for another on these tables. Readers
-- sum over the slots. `PostgresStore.gc` folds the rows of sessions that are gone into
-- slot 0 (`Queries.FOLD_COUNTS`): it only takes rows with FOR UPDATE SKIP LOCKED, so it
-- never waits either, and a pid reused by a new session meanwhile just adds to its row.
-- The console's search by error code, as SQLite's jobs_error_code_idx: rows with an
-- error only; an error that is not JSON reads NULL instead of failing the write. Not
-- PARALLEL SAFE: its exception block is a subtransaction, which a parallel index build
-- (this migration's, on a big table) cannot start.
-- STRICT: the planner then knows a match has an error, which the index's condition needs.
-- The index ends with the listing's order, so a page of matches is one backward scan.
CREATE FUNCTION error_code(error text) RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
BEGIN
    RETURN error::jsonb ->> 'code';
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
CREATE INDEX jobs_error_code_idx ON jobs (error_code(error), created_at, id)
    WHERE error IS NOT NULL;

CREATE TABLE job_counts (
    queue       text COLLATE "C" NOT NULL,
    status      text NOT NULL,
    rb          integer NOT NULL,
    lb          integer NOT NULL,
    slot        integer NOT NULL,        -- pg_backend_pid() of the writer; 0: folded
    jobs        bigint NOT NULL,
    started     bigint NOT NULL,
    retried     bigint NOT NULL,
    run_ms      bigint NOT NULL,
    latency_ms  bigint NOT NULL,
    PRIMARY KEY (queue, status, rb, lb, slot)
);
CREATE TABLE job_minutes (
    minute     bigint NOT NULL,          -- finished_at / 60000
    slot       integer NOT NULL,
    completed  bigint NOT NULL,
    failed     bigint NOT NULL,
    PRIMARY KEY (minute, slot)
);

-- A row's histogram buckets: the index of the first bound (ms) at or above the value,
-- `read_model.HISTOGRAM_BUCKETS`; width_bucket counts the thresholds at or below its
-- operand, so each threshold is its bound + 1. Inlined by the planner (one expression).
CREATE FUNCTION job_bucket(v bigint) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN width_bucket(v, ARRAY[6, 11, 26, 51, 101, 251, 501, 1001, 2501, 5001, 10001, 30001,
    60001, 300001, 900001, 3600001]::bigint[]);

DO $migration$
DECLARE
    -- One row's key and sums, over a transition table named by %2$s, times %3$s (1 or -1).
    contribution text := $c$
        SELECT queue, status,
            CASE WHEN status IN ('completed', 'failed') AND started_at IS NOT NULL
                AND finished_at IS NOT NULL THEN %1$s.job_bucket(finished_at - started_at)
                ELSE -1 END AS rb,
            CASE WHEN started_at IS NULL THEN -1
                ELSE %1$s.job_bucket(started_at - scheduled_at) END AS lb,
            %3$s AS jobs,
            %3$s * (attempt + CASE WHEN started_at IS NOT NULL THEN 1 ELSE 0 END) AS started,
            %3$s * attempt AS retried,
            %3$s * CASE WHEN status IN ('completed', 'failed') AND started_at IS NOT NULL
                AND finished_at IS NOT NULL THEN finished_at - started_at ELSE 0 END AS run_ms,
            %3$s * CASE WHEN started_at IS NULL THEN 0
                ELSE greatest(0, started_at - scheduled_at) END AS latency_ms
        FROM %2$s
    $c$;
    -- Add the summed deltas of `d` to this session's rows, keys in one order.
    upsert text := $u$
        INSERT INTO %1$s.job_counts AS c
            (queue, status, rb, lb, slot, jobs, started, retried, run_ms, latency_ms)
        SELECT queue, status, rb, lb, pg_backend_pid(), sum(jobs), sum(started),
            sum(retried), sum(run_ms), sum(latency_ms)
        FROM (%2$s) d
        GROUP BY queue, status, rb, lb
        HAVING sum(jobs) <> 0 OR sum(started) <> 0 OR sum(retried) <> 0
            OR sum(run_ms) <> 0 OR sum(latency_ms) <> 0
        ORDER BY queue, status, rb, lb
        ON CONFLICT (queue, status, rb, lb, slot) DO UPDATE SET
            jobs = c.jobs + excluded.jobs, started = c.started + excluded.started,
            retried = c.retried + excluded.retried, run_ms = c.run_ms + excluded.run_ms,
            latency_ms = c.latency_ms + excluded.latency_ms
    $u$;
    -- The ended (completed/failed) rows per minute of `%2$s`, times %3$s: the statement's
    -- new rows count +1, its old rows -1, so an update that ends a job adds it to its
    -- minute and one that leaves an ended row where it was nets to nothing. No join of
    -- the two transition tables: they have no statistics, and a nested loop over them
    -- costs O(rows^2) for a big statement.
    ended text := $e$
        SELECT finished_at / 60000 AS minute,
            %3$s * (status = 'completed')::int AS completed,
            %3$s * (status = 'failed')::int AS failed
        FROM %2$s WHERE status IN ('completed', 'failed') AND finished_at IS NOT NULL
    $e$;
    minutes text := $m$
        INSERT INTO %1$s.job_minutes AS m (minute, slot, completed, failed)
        SELECT minute, pg_backend_pid(), sum(completed), sum(failed)
        FROM (%2$s) d
        GROUP BY minute HAVING sum(completed) <> 0 OR sum(failed) <> 0 ORDER BY minute
        ON CONFLICT (minute, slot) DO UPDATE SET completed = m.completed + excluded.completed,
            failed = m.failed + excluded.failed
    $m$;
    s text := quote_ident(current_schema());
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION count_inserted() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            %1$s;
            %2$s;
            RETURN NULL;
        END
        $body$
    $f$, format(upsert, s, format(contribution, s, 'fresh', '1')),
        format(minutes, s, format(ended, s, 'fresh', '1')));
    EXECUTE format($f$
        CREATE FUNCTION count_updated() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            %1$s;
            %2$s;
            RETURN NULL;
        END
        $body$
    $f$, format(upsert, s, format(contribution, s, 'old_rows', '-1') || ' UNION ALL '
            || format(contribution, s, 'new_rows', '1')),
        format(minutes, s, format(ended, s, 'old_rows', '-1') || ' UNION ALL '
            || format(ended, s, 'new_rows', '1')));
    EXECUTE format($f$
        CREATE FUNCTION count_deleted() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            %1$s;
            RETURN NULL;
        END
        $body$
    $f$, format(upsert, s, format(contribution, s, 'gone', '-1')));
END
$migration$;

-- What the rows already stored hold, in slot 0 (written under the migration's lock).
INSERT INTO job_counts (queue, status, rb, lb, slot, jobs, started, retried, run_ms, latency_ms)
SELECT queue, status, rb, lb, 0, count(*), sum(started), sum(retried), sum(run_ms),
    sum(latency_ms)
FROM (
    SELECT queue, status,
        CASE WHEN status IN ('completed', 'failed') AND started_at IS NOT NULL
            AND finished_at IS NOT NULL THEN job_bucket(finished_at - started_at)
            ELSE -1 END AS rb,
        CASE WHEN started_at IS NULL THEN -1 ELSE job_bucket(started_at - scheduled_at) END AS lb,
        attempt + CASE WHEN started_at IS NOT NULL THEN 1 ELSE 0 END AS started,
        attempt AS retried,
        CASE WHEN status IN ('completed', 'failed') AND started_at IS NOT NULL
            AND finished_at IS NOT NULL THEN finished_at - started_at ELSE 0 END AS run_ms,
        CASE WHEN started_at IS NULL THEN 0
            ELSE greatest(0, started_at - scheduled_at) END AS latency_ms
    FROM jobs
) r
GROUP BY queue, status, rb, lb;
INSERT INTO job_minutes (minute, slot, completed, failed)
SELECT finished_at / 60000, 0, count(*) FILTER (WHERE status = 'completed'),
    count(*) FILTER (WHERE status = 'failed')
FROM jobs WHERE status IN ('completed', 'failed') AND finished_at IS NOT NULL GROUP BY 1;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS fresh
    FOR EACH STATEMENT EXECUTE FUNCTION count_inserted();
CREATE TRIGGER jobs_count_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_updated();
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION count_deleted();
