-- The kept counts without a write per claim (issue 21): migration 12's triggers upserted
-- two keys of every queue a claim took from (its pending key -1, its running key +1),
-- so a claim over 20 queues wrote 40 counter rows and a claim from one queue two.
--
-- Now pending and running rows are kept under one key, 'open', and a running row counts
-- there as the pending row it was (no run or latency bucket, `started` without its
-- current attempt). A claim moves rows between the two without changing what they add,
-- so its statement's sums net to zero and the trigger writes nothing. What the running
-- rows add beyond that is read from the rows themselves, which are few (the caps bound
-- them) and indexed (`jobs_running_idx`): `job_counts_now` is the kept counts as migration
-- 12 kept them, 'open' split into pending and running, and the readers read it
-- (`postgres/observe.py`). Still exact: every key is a sum over rows of a function of
-- the row, kept in the writing transaction.
--
-- The rows already stored: their pending and running keys are counted again from the
-- rows, with writers held off (a writer of the previous version keeps its triggers'
-- keys until it commits, and this lock waits for it).

LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

DO $migration$
DECLARE
    -- One row's key and sums, over a transition table named by %2$s, times %3$s (1 or -1).
    -- Pending and running rows share the key 'open' and a running row adds no more than
    -- the pending row it was, so a claim's statement nets to nothing here.
    contribution text := $c$
        SELECT queue,
            CASE WHEN status IN ('pending', 'running') THEN 'open' ELSE status END AS status,
            CASE WHEN status IN ('completed', 'failed') AND started_at IS NOT NULL
                AND finished_at IS NOT NULL THEN %1$s.job_bucket(finished_at - started_at)
                ELSE -1 END AS rb,
            CASE WHEN started_at IS NULL OR status = 'running' THEN -1
                ELSE %1$s.job_bucket(started_at - scheduled_at) END AS lb,
            %3$s AS jobs,
            %3$s * (attempt + CASE WHEN started_at IS NOT NULL AND status <> 'running'
                THEN 1 ELSE 0 END) AS started,
            %3$s * attempt AS retried,
            %3$s * CASE WHEN status IN ('completed', 'failed') AND started_at IS NOT NULL
                AND finished_at IS NOT NULL THEN finished_at - started_at ELSE 0 END AS run_ms,
            %3$s * CASE WHEN started_at IS NULL OR status = 'running' THEN 0
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
        CREATE OR REPLACE FUNCTION count_inserted() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            %1$s;
            %2$s;
            RETURN NULL;
        END
        $body$
    $f$, format(upsert, s, format(contribution, s, 'fresh', '1')),
        format(minutes, s, format(ended, s, 'fresh', '1')));
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION count_updated() RETURNS trigger LANGUAGE plpgsql AS $body$
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
        CREATE OR REPLACE FUNCTION count_deleted() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            %1$s;
            RETURN NULL;
        END
        $body$
    $f$, format(upsert, s, format(contribution, s, 'gone', '-1')));
END
$migration$;

DELETE FROM job_counts WHERE status IN ('pending', 'running');
INSERT INTO job_counts (queue, status, rb, lb, slot, jobs, started, retried, run_ms, latency_ms)
SELECT queue, 'open', -1, lb, 0, count(*), sum(started), sum(retried), 0, sum(latency_ms)
FROM (
    SELECT queue,
        CASE WHEN started_at IS NULL OR status = 'running' THEN -1
            ELSE job_bucket(started_at - scheduled_at) END AS lb,
        attempt + CASE WHEN started_at IS NOT NULL AND status <> 'running' THEN 1 ELSE 0 END
            AS started,
        attempt AS retried,
        CASE WHEN started_at IS NULL OR status = 'running' THEN 0
            ELSE greatest(0, started_at - scheduled_at) END AS latency_ms
    FROM jobs WHERE status IN ('pending', 'running')
) r
GROUP BY queue, lb;

-- What migration 12's table held: the kept keys, 'open' read as pending, plus each
-- running row as running less what it adds to 'open'.
CREATE VIEW job_counts_now AS
SELECT queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms
FROM job_counts WHERE status <> 'open'
UNION ALL
SELECT queue, 'pending', rb, lb, jobs, started, retried, run_ms, latency_ms
FROM job_counts WHERE status = 'open'
UNION ALL
SELECT queue, 'running', -1,
    CASE WHEN started_at IS NULL THEN -1 ELSE job_bucket(started_at - scheduled_at) END,
    1, attempt + CASE WHEN started_at IS NOT NULL THEN 1 ELSE 0 END, attempt, 0,
    CASE WHEN started_at IS NULL THEN 0 ELSE greatest(0, started_at - scheduled_at) END
FROM jobs WHERE status = 'running'
UNION ALL
SELECT queue, 'pending', -1, -1, -1, -attempt, -attempt, 0, 0
FROM jobs WHERE status = 'running';
