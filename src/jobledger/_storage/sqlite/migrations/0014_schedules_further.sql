-- Schedules, further (issue 24, DESIGN.md §8.11).
--
-- * `overlap` ('allow', 'skip' or 'buffer_one'): what a natural fire does while the
--   schedule's previous job has not ended; decided in the fire's own write transaction
--   (`_storage/schedule_ops.py`). `skipped_count` counts the fires it skipped.
-- * `jitter_ms`: each fire's job is due a stable offset in [0, jitter_ms) after its fire.
-- * A fire that `buffer_one` holds back is written `waiting` (a status with no claim
--   index, so it takes no slot and is never claimed), with the schedule's id and no
--   workflow. `jobs_release_buffered_fire` makes it `pending`, due at once, in the
--   transaction of the write that ends the schedule's last job still pending, delayed or
--   running: the fire waits behind the run before it, in every process. A job without a
--   schedule fails the trigger's WHEN at its first test; a scheduled job's end costs one
--   seek of jobs_schedule_idx (its live rows have no `finished_at`).
ALTER TABLE job_schedules ADD COLUMN overlap TEXT NOT NULL DEFAULT 'allow';
ALTER TABLE job_schedules ADD COLUMN jitter_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_schedules ADD COLUMN skipped_count INTEGER NOT NULL DEFAULT 0;
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
