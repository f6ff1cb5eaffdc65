-- Counters that GC cannot lower (`/metrics`, see _storage/observe.py). When terminal rows
-- are deleted, what they contributed to the counters (rows, attempts started, retries)
-- is added to their (queue, status) here, once per DELETE statement and in its
-- transaction. Only deletes pay for it: enqueue, claim and finalize never touch it.
CREATE TABLE job_totals (
    queue    text COLLATE "C" NOT NULL,
    status   text NOT NULL,
    jobs     bigint NOT NULL DEFAULT 0,
    started  bigint NOT NULL DEFAULT 0,
    retried  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, status)
);

-- The schema's name is baked into the function, as in 0001_initial.sql. Keys are
-- upserted in one order, so two concurrent collections cannot deadlock on them.
DO $migration$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION collect_totals() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            INSERT INTO %1$s.job_totals AS t (queue, status, jobs, started, retried)
            SELECT queue, status, count(*),
                   sum(attempt + CASE WHEN started_at IS NOT NULL THEN 1 ELSE 0 END),
                   sum(attempt)
            FROM gone
            WHERE status IN ('completed', 'failed', 'cancelled')
            GROUP BY queue, status
            ORDER BY queue, status
            ON CONFLICT (queue, status) DO UPDATE SET
                jobs = t.jobs + excluded.jobs,
                started = t.started + excluded.started,
                retried = t.retried + excluded.retried;
            RETURN NULL;
        END
        $body$
    $f$, quote_ident(current_schema()));
END
$migration$;

CREATE TRIGGER jobs_collect_totals AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION collect_totals();
