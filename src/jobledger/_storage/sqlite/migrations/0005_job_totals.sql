-- Counters that GC cannot lower (`/metrics`, see _storage/observe.py). When a terminal
-- row is deleted, what it contributed to the counters (one row, its attempts started,
-- its retries) is added to its (queue, status) here, in the deleting transaction. Only
-- deletes pay for it: enqueue, claim and finalize never touch this table.
CREATE TABLE job_totals (
    queue    TEXT NOT NULL,
    status   TEXT NOT NULL,
    jobs     INTEGER NOT NULL DEFAULT 0,
    started  INTEGER NOT NULL DEFAULT 0,
    retried  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, status)
) WITHOUT ROWID;

-- Statuses as OR of literals, not IN: see 0003_status_check_without_in.sql.
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
