-- Ended jobs by idempotency key, for `enqueue(..., unique_for=S)`: the job that ended with
-- the key within the last S seconds is found by one seek on (key, finished_at) instead of
-- a walk over every row finished in the window. Statuses as OR of literals, not IN (see
-- 0003_status_check_without_in.sql); `FIND_ENDED_BY_KEY` repeats the condition.
--
-- Rows without a key (most) never enter it, and enqueue never touches it: a keyed row
-- gets its entry when it ends, and loses it when GC deletes it.
CREATE INDEX jobs_ended_key_idx ON jobs (idempotency_key, finished_at)
    WHERE idempotency_key IS NOT NULL
        AND (status = 'completed' OR status = 'failed' OR status = 'cancelled');
