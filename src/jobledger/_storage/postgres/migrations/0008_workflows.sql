-- Workflows (issue 23); the same shape as SQLite's migration 11, which explains it:
-- the status `waiting`, `workflow_id` / `step` / `upstream_left` on jobs, the
-- `job_deps` edges (upstream job -> downstream job, with the downstream step's policy),
-- the `workflows` table and the release trigger. Only a write that ends a workflow row
-- runs the trigger (its WHEN tests `workflow_id`); here a trigger's own writes fire it
-- again, so each level of a cancel's propagation is one firing.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check CHECK (status IN
    ('pending', 'delayed', 'running', 'completed', 'failed', 'cancelled', 'waiting'));
ALTER TABLE jobs ADD COLUMN workflow_id text COLLATE "C";
ALTER TABLE jobs ADD COLUMN step text;
ALTER TABLE jobs ADD COLUMN upstream_left integer;
CREATE INDEX jobs_workflow_idx ON jobs (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE TABLE workflows (
    id          text COLLATE "C" PRIMARY KEY,
    name        text NOT NULL,
    created_at  bigint NOT NULL
);
CREATE TABLE job_deps (
    upstream_id  text COLLATE "C" NOT NULL,
    job_id       text COLLATE "C" NOT NULL,
    policy       text NOT NULL CHECK (policy IN ('cancel', 'run')),
    many         boolean NOT NULL DEFAULT false,  -- the upstream step is an add_many
    PRIMARY KEY (upstream_id, job_id)
);
CREATE INDEX job_deps_job_idx ON job_deps (job_id);
CREATE INDEX job_deps_upstream_idx ON job_deps (upstream_id);

-- The schema's name is baked into the function, as in 0001_initial.sql.
DO $migration$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION release_downstream() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            IF NEW.status <> 'completed' THEN
                UPDATE %1$s.jobs SET status = 'cancelled', finished_at = NEW.updated_at,
                    updated_at = NEW.updated_at, upstream_left = 0,
                    error = json_build_object('code', 'JOB_CANCELLED',
                        'message', 'an upstream job of this workflow step ended ' || NEW.status,
                        'retryable', false,
                        'params', json_build_object('reason', 'upstream',
                            'upstream_id', NEW.id, 'upstream_status', NEW.status))::text
                WHERE id IN (SELECT job_id FROM %1$s.job_deps
                             WHERE upstream_id = NEW.id AND policy = 'cancel')
                    AND status = 'waiting';
            END IF;
            UPDATE %1$s.jobs SET upstream_left = upstream_left - 1,
                status = CASE WHEN upstream_left <= 1 THEN 'pending' ELSE 'waiting' END,
                updated_at = NEW.updated_at
            WHERE id IN (SELECT job_id FROM %1$s.job_deps
                         WHERE upstream_id = NEW.id
                             AND (NEW.status = 'completed' OR policy = 'run'))
                AND status = 'waiting';
            RETURN NULL;
        END
        $body$
    $f$, quote_ident(current_schema()));
    EXECUTE format($f$
        CREATE FUNCTION collect_deps() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            -- Only rows of a workflow have edges: a collection without one deletes none.
            DELETE FROM %1$s.job_deps
            WHERE job_id IN (SELECT id FROM gone WHERE workflow_id IS NOT NULL)
                OR upstream_id IN (SELECT id FROM gone WHERE workflow_id IS NOT NULL);
            RETURN NULL;
        END
        $body$
    $f$, quote_ident(current_schema()));
END
$migration$;

CREATE TRIGGER jobs_release_downstream AFTER UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION release_downstream();
CREATE TRIGGER jobs_collect_deps AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION collect_deps();
