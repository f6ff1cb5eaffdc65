-- The console's counts at a million rows (issue 25): what the overview, `/metrics` and
-- the throughput chart read, kept current by triggers in the writing transaction, so a
-- read costs O(queues) (and O(minutes)) instead of a pass over `jobs`.
--
-- * job_counts holds, per (queue, status, rb, lb), what the metrics pass grouped by
--   the same key summed (`sqlite/observe.metrics_scan`): rows, attempts started, retries,
--   run and queue-latency milliseconds. rb and lb are the histogram buckets of the row's
--   run time (completed/failed rows with both times) and queue latency (rows with a
--   started_at), -1 where a row is not covered; the bounds are
--   `read_model.HISTOGRAM_BUCKETS` in milliseconds, baked in as a binary CASE (changing
--   them is a migration). Every insert adds the row's contribution, every delete takes it
--   away, every update that can change the key or a sum takes the old row's away and adds
--   the new one's; a trigger's own writes (workflow release, buffered fires) fire these
--   too. So at every commit the table equals that GROUP BY over `jobs` (with zero rows
--   left behind, which readers skip); tests/integration/test_kept_counts.py checks it.
-- * job_minutes counts the jobs that ended completed or failed in each minute
--   (finished_at / 60000): the rows that say so, plus those GC has collected since (a
--   delete leaves it alone, so the chart shows what happened); `gc` drops the minutes
--   a day older than what it collects (`observe.MINUTES_KEPT`).
-- job_totals (migration 5) still keeps what collected rows contributed to the counters.
-- The console's search by error code (`queries.search_sql`): only rows with an error have
-- an entry, so the hot path writes one only for a failure or a retry. Not JSON: NULL.
CREATE INDEX jobs_error_code_idx ON jobs
    (CASE WHEN json_valid(error) THEN json_extract(error, '$.code') END)
    WHERE error IS NOT NULL;

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

CREATE TABLE job_minutes (
    minute     INTEGER PRIMARY KEY,           -- finished_at / 60000
    completed  INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0
);

INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
SELECT queue, status,
    CASE WHEN (status = 'completed' OR status = 'failed') AND started_at IS NOT NULL AND finished_at IS NOT NULL
            THEN CASE WHEN finished_at - started_at <= 2500 THEN CASE WHEN finished_at - started_at <= 100 THEN CASE WHEN finished_at - started_at <= 25 THEN CASE WHEN finished_at - started_at <= 10 THEN CASE WHEN finished_at - started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN finished_at - started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN finished_at - started_at <= 500 THEN CASE WHEN finished_at - started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN finished_at - started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN finished_at - started_at <= 60000 THEN CASE WHEN finished_at - started_at <= 10000 THEN CASE WHEN finished_at - started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN finished_at - started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN finished_at - started_at <= 900000 THEN CASE WHEN finished_at - started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN finished_at - started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END AS b1,
    CASE WHEN started_at IS NULL THEN -1
            ELSE CASE WHEN started_at - scheduled_at <= 2500 THEN CASE WHEN started_at - scheduled_at <= 100 THEN CASE WHEN started_at - scheduled_at <= 25 THEN CASE WHEN started_at - scheduled_at <= 10 THEN CASE WHEN started_at - scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN started_at - scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN started_at - scheduled_at <= 500 THEN CASE WHEN started_at - scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN started_at - scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN started_at - scheduled_at <= 60000 THEN CASE WHEN started_at - scheduled_at <= 10000 THEN CASE WHEN started_at - scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN started_at - scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN started_at - scheduled_at <= 900000 THEN CASE WHEN started_at - scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN started_at - scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END AS b2,
    count(*), sum(attempt + (started_at IS NOT NULL)), sum(attempt),
    sum(CASE WHEN (status = 'completed' OR status = 'failed') AND started_at IS NOT NULL AND finished_at IS NOT NULL THEN finished_at - started_at ELSE 0 END),
    sum(CASE WHEN started_at IS NULL THEN 0 ELSE max(0, started_at - scheduled_at) END)
FROM jobs GROUP BY queue, status, b1, b2;

INSERT INTO job_minutes (minute, completed, failed)
SELECT finished_at / 60000 AS m, sum(status = 'completed'), sum(status = 'failed') FROM jobs
WHERE (status = 'completed' OR status = 'failed') AND finished_at IS NOT NULL GROUP BY m;

-- The triggers' WHEN leaves out updates that change nothing counted (progress, metadata,
-- a debounced pending row's time).
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
    VALUES (new.queue, new.status,
        CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL
            THEN CASE WHEN new.finished_at - new.started_at <= 2500 THEN CASE WHEN new.finished_at - new.started_at <= 100 THEN CASE WHEN new.finished_at - new.started_at <= 25 THEN CASE WHEN new.finished_at - new.started_at <= 10 THEN CASE WHEN new.finished_at - new.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.finished_at - new.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.finished_at - new.started_at <= 500 THEN CASE WHEN new.finished_at - new.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.finished_at - new.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.finished_at - new.started_at <= 60000 THEN CASE WHEN new.finished_at - new.started_at <= 10000 THEN CASE WHEN new.finished_at - new.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.finished_at - new.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.finished_at - new.started_at <= 900000 THEN CASE WHEN new.finished_at - new.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.finished_at - new.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN new.started_at IS NULL THEN -1
            ELSE CASE WHEN new.started_at - new.scheduled_at <= 2500 THEN CASE WHEN new.started_at - new.scheduled_at <= 100 THEN CASE WHEN new.started_at - new.scheduled_at <= 25 THEN CASE WHEN new.started_at - new.scheduled_at <= 10 THEN CASE WHEN new.started_at - new.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 500 THEN CASE WHEN new.started_at - new.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 60000 THEN CASE WHEN new.started_at - new.scheduled_at <= 10000 THEN CASE WHEN new.started_at - new.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 900000 THEN CASE WHEN new.started_at - new.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        1, (new.attempt + (new.started_at IS NOT NULL)), new.attempt,
        (CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL THEN new.finished_at - new.started_at ELSE 0 END),
        (CASE WHEN new.started_at IS NULL THEN 0 ELSE max(0, new.started_at - new.scheduled_at) END))
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
WHEN old.status IS NOT new.status OR old.queue IS NOT new.queue OR old.attempt IS NOT new.attempt
    OR old.started_at IS NOT new.started_at OR old.finished_at IS NOT new.finished_at
    OR (old.scheduled_at IS NOT new.scheduled_at AND new.started_at IS NOT NULL)
BEGIN
    INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
    VALUES (old.queue, old.status,
        CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL
            THEN CASE WHEN old.finished_at - old.started_at <= 2500 THEN CASE WHEN old.finished_at - old.started_at <= 100 THEN CASE WHEN old.finished_at - old.started_at <= 25 THEN CASE WHEN old.finished_at - old.started_at <= 10 THEN CASE WHEN old.finished_at - old.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.finished_at - old.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.finished_at - old.started_at <= 500 THEN CASE WHEN old.finished_at - old.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.finished_at - old.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.finished_at - old.started_at <= 60000 THEN CASE WHEN old.finished_at - old.started_at <= 10000 THEN CASE WHEN old.finished_at - old.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.finished_at - old.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.finished_at - old.started_at <= 900000 THEN CASE WHEN old.finished_at - old.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.finished_at - old.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN old.started_at IS NULL THEN -1
            ELSE CASE WHEN old.started_at - old.scheduled_at <= 2500 THEN CASE WHEN old.started_at - old.scheduled_at <= 100 THEN CASE WHEN old.started_at - old.scheduled_at <= 25 THEN CASE WHEN old.started_at - old.scheduled_at <= 10 THEN CASE WHEN old.started_at - old.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 500 THEN CASE WHEN old.started_at - old.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 60000 THEN CASE WHEN old.started_at - old.scheduled_at <= 10000 THEN CASE WHEN old.started_at - old.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 900000 THEN CASE WHEN old.started_at - old.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        -1, -(old.attempt + (old.started_at IS NOT NULL)), -old.attempt,
        -(CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL THEN old.finished_at - old.started_at ELSE 0 END),
        -(CASE WHEN old.started_at IS NULL THEN 0 ELSE max(0, old.started_at - old.scheduled_at) END)),
    (new.queue, new.status,
        CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL
            THEN CASE WHEN new.finished_at - new.started_at <= 2500 THEN CASE WHEN new.finished_at - new.started_at <= 100 THEN CASE WHEN new.finished_at - new.started_at <= 25 THEN CASE WHEN new.finished_at - new.started_at <= 10 THEN CASE WHEN new.finished_at - new.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.finished_at - new.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.finished_at - new.started_at <= 500 THEN CASE WHEN new.finished_at - new.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.finished_at - new.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.finished_at - new.started_at <= 60000 THEN CASE WHEN new.finished_at - new.started_at <= 10000 THEN CASE WHEN new.finished_at - new.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.finished_at - new.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.finished_at - new.started_at <= 900000 THEN CASE WHEN new.finished_at - new.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.finished_at - new.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN new.started_at IS NULL THEN -1
            ELSE CASE WHEN new.started_at - new.scheduled_at <= 2500 THEN CASE WHEN new.started_at - new.scheduled_at <= 100 THEN CASE WHEN new.started_at - new.scheduled_at <= 25 THEN CASE WHEN new.started_at - new.scheduled_at <= 10 THEN CASE WHEN new.started_at - new.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 500 THEN CASE WHEN new.started_at - new.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 60000 THEN CASE WHEN new.started_at - new.scheduled_at <= 10000 THEN CASE WHEN new.started_at - new.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN new.started_at - new.scheduled_at <= 900000 THEN CASE WHEN new.started_at - new.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN new.started_at - new.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        1, (new.attempt + (new.started_at IS NOT NULL)), new.attempt,
        (CASE WHEN (new.status = 'completed' OR new.status = 'failed') AND new.started_at IS NOT NULL AND new.finished_at IS NOT NULL THEN new.finished_at - new.started_at ELSE 0 END),
        (CASE WHEN new.started_at IS NULL THEN 0 ELSE max(0, new.started_at - new.scheduled_at) END))
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

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
BEGIN
    INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
    VALUES (old.queue, old.status,
        CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL
            THEN CASE WHEN old.finished_at - old.started_at <= 2500 THEN CASE WHEN old.finished_at - old.started_at <= 100 THEN CASE WHEN old.finished_at - old.started_at <= 25 THEN CASE WHEN old.finished_at - old.started_at <= 10 THEN CASE WHEN old.finished_at - old.started_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.finished_at - old.started_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.finished_at - old.started_at <= 500 THEN CASE WHEN old.finished_at - old.started_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.finished_at - old.started_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.finished_at - old.started_at <= 60000 THEN CASE WHEN old.finished_at - old.started_at <= 10000 THEN CASE WHEN old.finished_at - old.started_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.finished_at - old.started_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.finished_at - old.started_at <= 900000 THEN CASE WHEN old.finished_at - old.started_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.finished_at - old.started_at <= 3600000 THEN 15 ELSE 16 END END END END
            ELSE -1 END,
        CASE WHEN old.started_at IS NULL THEN -1
            ELSE CASE WHEN old.started_at - old.scheduled_at <= 2500 THEN CASE WHEN old.started_at - old.scheduled_at <= 100 THEN CASE WHEN old.started_at - old.scheduled_at <= 25 THEN CASE WHEN old.started_at - old.scheduled_at <= 10 THEN CASE WHEN old.started_at - old.scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 500 THEN CASE WHEN old.started_at - old.scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 60000 THEN CASE WHEN old.started_at - old.scheduled_at <= 10000 THEN CASE WHEN old.started_at - old.scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN old.started_at - old.scheduled_at <= 900000 THEN CASE WHEN old.started_at - old.scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN old.started_at - old.scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END,
        -1, -(old.attempt + (old.started_at IS NOT NULL)), -old.attempt,
        -(CASE WHEN (old.status = 'completed' OR old.status = 'failed') AND old.started_at IS NOT NULL AND old.finished_at IS NOT NULL THEN old.finished_at - old.started_at ELSE 0 END),
        -(CASE WHEN old.started_at IS NULL THEN 0 ELSE max(0, old.started_at - old.scheduled_at) END))
    ON CONFLICT (queue, status, rb, lb) DO UPDATE SET jobs = jobs + excluded.jobs,
        started = started + excluded.started, retried = retried + excluded.retried,
        run_ms = run_ms + excluded.run_ms, latency_ms = latency_ms + excluded.latency_ms;
END;
