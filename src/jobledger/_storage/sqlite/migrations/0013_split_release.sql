-- The release trigger of migration 11, split in two (issue 23's chains benchmark).
--
-- A completed upstream job only takes itself off its waiting downstream jobs'
-- `upstream_left` and makes those reaching 0 `pending`: one UPDATE by its edges
-- (`job_deps` has one edge per pair of jobs, so it is `- 1`). The old trigger ran the
-- whole failure program for it too — four statements, three recursive `doomed`
-- queries that a completed job leaves empty — which cost a workflow job's finalize
-- about 9x an ordinary one's (bench/workflows.py). A failed or cancelled job runs that
-- program, unchanged, in `jobs_cancel_downstream`.
DROP TRIGGER jobs_release_downstream;
CREATE TRIGGER jobs_release_downstream AFTER UPDATE OF status ON jobs
WHEN new.workflow_id IS NOT NULL AND old.status <> new.status AND new.status = 'completed'
BEGIN
    UPDATE jobs SET
        upstream_left = upstream_left - 1,
        status = CASE WHEN upstream_left <= 1 THEN 'pending' ELSE 'waiting' END,
        updated_at = new.updated_at
    WHERE rowid IN (SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid)
        AND status = 'waiting';
END;
CREATE TRIGGER jobs_cancel_downstream AFTER UPDATE OF status ON jobs
WHEN new.workflow_id IS NOT NULL AND old.status <> new.status
    AND (new.status = 'failed' OR new.status = 'cancelled')
BEGIN
    UPDATE jobs SET
        upstream_left = upstream_left - (
            SELECT count(*) FROM job_deps d WHERE d.job_key = jobs.rowid AND d.upstream_key IN (
                SELECT new.rowid UNION ALL SELECT key FROM (
                    WITH RECURSIVE doomed(key) AS (
                        SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                            AND d.policy = 'cancel' AND new.status <> 'completed'
                        UNION
                        SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                            WHERE d.policy = 'cancel'
                    ) SELECT key FROM doomed))),
        updated_at = new.updated_at
    WHERE rowid IN (
        SELECT d.job_key FROM job_deps d WHERE d.upstream_key IN (
            SELECT new.rowid UNION ALL SELECT key FROM (
                WITH RECURSIVE doomed(key) AS (
                    SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                        AND d.policy = 'cancel' AND new.status <> 'completed'
                    UNION
                    SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                        WHERE d.policy = 'cancel'
                ) SELECT key FROM doomed)))
        AND rowid NOT IN (
            WITH RECURSIVE doomed(key) AS (
                SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                    AND d.policy = 'cancel' AND new.status <> 'completed'
                UNION
                SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                    WHERE d.policy = 'cancel'
            ) SELECT key FROM doomed)
        AND status = 'waiting';
    UPDATE jobs SET status = 'pending', updated_at = new.updated_at
    WHERE rowid IN (SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid)
        AND status = 'waiting' AND upstream_left <= 0;
    UPDATE jobs SET status = 'pending', updated_at = new.updated_at
    WHERE new.status <> 'completed' AND status = 'waiting' AND upstream_left <= 0
        AND rowid IN (SELECT d.job_key FROM job_deps d WHERE d.upstream_key IN (
            WITH RECURSIVE doomed(key) AS (
                SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                    AND d.policy = 'cancel'
                UNION
                SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                    WHERE d.policy = 'cancel'
            ) SELECT key FROM doomed));
    UPDATE jobs SET status = 'cancelled', finished_at = new.updated_at,
        updated_at = new.updated_at, upstream_left = 0,
        error = json_object('code', 'JOB_CANCELLED',
            'message', 'an upstream job of this workflow step ended ' || new.status,
            'retryable', json('false'),
            'params', json_object('reason', 'upstream', 'upstream_id', new.id,
                'upstream_status', new.status))
    WHERE new.status <> 'completed' AND status = 'waiting' AND rowid IN (
        WITH RECURSIVE doomed(key) AS (
            SELECT d.job_key FROM job_deps d WHERE d.upstream_key = new.rowid
                AND d.policy = 'cancel'
            UNION
            SELECT d.job_key FROM job_deps d JOIN doomed ON d.upstream_key = doomed.key
                WHERE d.policy = 'cancel'
        ) SELECT key FROM doomed);
END;
