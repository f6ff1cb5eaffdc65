-- Re-runs of workflow steps; the same change as SQLite's migration 12, which explains
-- it: `workflows.retry_of`, and edges collected with any job that has a `step` (a
-- re-run of a step is in no workflow but keeps its edges).
ALTER TABLE workflows ADD COLUMN retry_of text COLLATE "C";

DO $migration$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION collect_deps() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            DELETE FROM %1$s.job_deps
            WHERE job_id IN (SELECT id FROM gone WHERE step IS NOT NULL)
                OR upstream_id IN (SELECT id FROM gone WHERE step IS NOT NULL);
            RETURN NULL;
        END
        $body$
    $f$, quote_ident(current_schema()));
END
$migration$;
