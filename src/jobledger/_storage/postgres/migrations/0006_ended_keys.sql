-- Ended jobs by idempotency key, for `enqueue(..., unique_for=S)`; the SQLite migration
-- 0009_ended_keys.sql. The job that ended with the key within the last S seconds is one
-- seek on (key, finished_at). Rows without a key never enter it, and enqueue never
-- touches it: a keyed row gets its entry when it ends (its terminal version), and loses
-- it when GC deletes it.
CREATE INDEX jobs_ended_key_idx ON jobs (idempotency_key, finished_at)
    WHERE idempotency_key IS NOT NULL AND status IN ('completed', 'failed', 'cancelled');
