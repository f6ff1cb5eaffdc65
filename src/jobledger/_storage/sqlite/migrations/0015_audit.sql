-- The console's audit log (DESIGN.md §8.9): one row per action a person took through
-- `jobledger serve` (cancel, retry, retry-many, cancel-many, queue pause/resume/limits,
-- schedule pause/resume/run-now/trigger/backfill) or through `jobs.record_audit`.
--
-- * Append-only: nothing updates a row, and GC (which deletes finished jobs) never
--   touches this table, so the log outlives the jobs it names.
-- * `at` is epoch ms from the injected clock; `detail` is a JSON object (what the action
--   was asked and what it did: counts, the new job's id, the refused reason).
-- * Newest first by `id` (rowid order is insertion order on one file); the two indexes
--   serve the page's filters without a sort.
CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
