-- Workflows (issue 23); the same shape as SQLite's migration 11, which explains it:
-- the status `waiting`, `workflow_id` / `step` / `upstream_left` on jobs, the
-- `job_deps` edges (upstream job -> downstream job, with the downstream step's policy)
-- and the `workflows` table. Only a finalize of a workflow row reads `job_deps`.
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
    PRIMARY KEY (upstream_id, job_id)
);
CREATE INDEX job_deps_job_idx ON job_deps (job_id);
