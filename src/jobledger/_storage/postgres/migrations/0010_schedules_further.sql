-- Schedules, further (issue 24); the same change as SQLite's migration 14, which
-- explains it: `overlap`, `jitter_ms` and `skipped_count` on job_schedules, and the
-- trigger that releases a fire `buffer_one` held back (`waiting`, no workflow) when the
-- schedule's last job still pending, delayed or running ends.
--
-- Read committed: the trigger's UPDATE runs with a snapshot taken after the ending row
-- was locked, and the fire that wrote the waiting row locked the schedule's live rows
-- (`LIVE_SCHEDULE_JOBS`, FOR UPDATE) before it decided, so either the fire saw the end
-- (and wrote its job pending) or the end sees the fire's row.
ALTER TABLE job_schedules ADD COLUMN overlap text NOT NULL DEFAULT 'allow';
ALTER TABLE job_schedules ADD COLUMN jitter_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE job_schedules ADD COLUMN skipped_count bigint NOT NULL DEFAULT 0;

DO $migration$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION release_buffered_fire() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            UPDATE %1$s.jobs SET status = 'pending',
                scheduled_at = least(scheduled_at, NEW.updated_at), updated_at = NEW.updated_at
            WHERE schedule_id = NEW.schedule_id AND finished_at IS NULL AND status = 'waiting'
                AND workflow_id IS NULL AND step IS NULL
                AND (idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM %1$s.jobs k
                    WHERE k.idempotency_key = %1$s.jobs.idempotency_key
                        AND k.status IN ('pending', 'delayed', 'running')))
                AND NOT EXISTS (SELECT 1 FROM %1$s.jobs o WHERE o.schedule_id = NEW.schedule_id
                    AND o.finished_at IS NULL AND o.status IN ('pending', 'delayed', 'running'));
            RETURN NULL;
        END
        $body$
    $f$, quote_ident(current_schema()));
END
$migration$;
CREATE TRIGGER jobs_release_buffered_fire AFTER UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.schedule_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION release_buffered_fire();
