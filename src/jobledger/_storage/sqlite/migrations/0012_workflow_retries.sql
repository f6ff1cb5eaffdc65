-- Re-runs of workflow steps (issue 23, DESIGN.md §8.8).
--
-- * `workflows.retry_of` names the workflow that `jobs.retry_workflow` re-ran (NULL on
--   every other one).
-- * A re-run may have edges to jobs of an older workflow: `retry_workflow` points the
--   new steps at the old completed jobs whose outputs they take (`ctx.upstream`), and
--   `jobs.retry` of a step gives the new job its old edges (it keeps `step`, but is in
--   no workflow). Such a job's edges must go when GC collects it, so the collecting
--   trigger now tests `step`, which every job with edges has, not `workflow_id`.
ALTER TABLE workflows ADD COLUMN retry_of TEXT;
DROP TRIGGER jobs_collect_deps;
CREATE TRIGGER jobs_collect_deps AFTER DELETE ON jobs
WHEN old.step IS NOT NULL
BEGIN
    DELETE FROM job_deps WHERE job_key = old.rowid;
    DELETE FROM job_deps WHERE upstream_key = old.rowid;
END;
