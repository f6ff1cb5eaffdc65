-- The kept counts without a write per claim or per batched end (issue 21).
--
-- Migration 16's triggers moved every claimed row from its queue's pending key to its
-- running key, two counter upserts per row (a claim from 20 queues wrote 40 counter rows,
-- on 20 pages), and the same for a running row reset or requeued.
--
-- Now pending and running rows are kept under one key, 'open' (as PostgreSQL's migration
-- 14 keeps them), and a running row counts
-- there as the pending row it was (no latency bucket, `started` without its current
-- attempt). A claim moves a row between the two without changing what it adds, so the
-- update trigger's condition is false and its body does not run. What the running rows
-- add beyond that is read from the rows themselves, which are few (the caps bound them)
-- and indexed (`jobs_running_idx`): `job_counts_now` is the kept counts as migration 16
-- kept them, 'open' split into pending and running, and the readers read it
-- (`sqlite/observe.py`). Still exact: every key is a sum over rows of a function of the
-- row, kept in the writing transaction (tests/integration/test_kept_counts.py).
--
-- A job's end, too, runs no trigger body when the batched finalize ends it from the
-- shape its claim left. `tally` says which statement counted a row's last move. Only
-- `queries.finish_many_sql` writes it: to 1 or 2 (never what it was) for a row it ends
-- running, with `started_at` set, `finished_at` unset and the claim's queue and
-- `scheduled_at`, which it then counts per key in one statement (`sqlite/counts.py`),
-- and to 0 for any other row. The update trigger runs its body unless the write moved
-- `tally` to 1 or 2, so every other write, a hand-made one included, is counted by the
-- trigger as before. `tally` is NULL until a batched finalize writes it: with no
-- default an insert stores nothing for it (NOT NULL DEFAULT 0 cost an enqueue about
-- 2,200 instructions more).
--
-- The rows already stored: their pending and running keys are counted again from the
-- rows, in this migration's transaction (under the writer lease).
ALTER TABLE jobs ADD COLUMN tally INTEGER;

DROP TRIGGER jobs_count_insert;
DROP TRIGGER jobs_count_update;
DROP TRIGGER jobs_count_delete;

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

DELETE FROM job_counts WHERE status = 'pending' OR status = 'running';
INSERT INTO job_counts (queue, status, rb, lb, jobs, started, retried, run_ms, latency_ms)
SELECT queue, 'open', -1, b, count(*), sum(started), sum(retried), 0, sum(latency_ms)
FROM (
    SELECT queue,
        CASE WHEN started_at IS NULL OR status = 'running' THEN -1
            ELSE CASE WHEN started_at - scheduled_at <= 2500 THEN CASE WHEN started_at - scheduled_at <= 100 THEN CASE WHEN started_at - scheduled_at <= 25 THEN CASE WHEN started_at - scheduled_at <= 10 THEN CASE WHEN started_at - scheduled_at <= 5 THEN 0 ELSE 1 END ELSE 2 END ELSE CASE WHEN started_at - scheduled_at <= 50 THEN 3 ELSE 4 END END ELSE CASE WHEN started_at - scheduled_at <= 500 THEN CASE WHEN started_at - scheduled_at <= 250 THEN 5 ELSE 6 END ELSE CASE WHEN started_at - scheduled_at <= 1000 THEN 7 ELSE 8 END END END ELSE CASE WHEN started_at - scheduled_at <= 60000 THEN CASE WHEN started_at - scheduled_at <= 10000 THEN CASE WHEN started_at - scheduled_at <= 5000 THEN 9 ELSE 10 END ELSE CASE WHEN started_at - scheduled_at <= 30000 THEN 11 ELSE 12 END END ELSE CASE WHEN started_at - scheduled_at <= 900000 THEN CASE WHEN started_at - scheduled_at <= 300000 THEN 13 ELSE 14 END ELSE CASE WHEN started_at - scheduled_at <= 3600000 THEN 15 ELSE 16 END END END END END AS b,
        attempt + (started_at IS NOT NULL AND status <> 'running') AS started,
        attempt AS retried,
        CASE WHEN started_at IS NULL OR status = 'running' THEN 0
            ELSE max(0, started_at - scheduled_at) END AS latency_ms
    FROM jobs WHERE status = 'pending' OR status = 'running'
)
GROUP BY queue, b;

-- What migration 16's table held: the kept keys, 'open' read as pending, plus each
-- running row as running less what it adds to 'open'.
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
