-- Fewer B-trees per job write (issue 7). An enqueue touched six (the row, the id index,
-- claim, created, status and enqueued_by) and a claim or finalize moved entries in the
-- last three again; at NORMAL the cost of a commit is the pages it appends to the WAL.
--
-- * jobs_created_idx: ids are made from `created_at`'s millisecond (UUIDv7-shaped), so
--   `ORDER BY id` is `ORDER BY created_at, id` and listings read the id index instead.
-- * jobs_status_created_idx: the live statuses have partial indexes of their own
--   (claim, running, delayed); the rare terminal ones get the two below; `completed`
--   is most of the table and a listing finds it by walking the id index.
-- * jobs_enqueued_by_idx: read only when a dead worker's rows are recovered (rare); a
--   scan there is cheaper than an index entry written and deleted for every job.
DROP INDEX jobs_created_idx;
DROP INDEX jobs_status_created_idx;
DROP INDEX jobs_enqueued_by_idx;
CREATE INDEX jobs_failed_idx ON jobs (id) WHERE status = 'failed';
CREATE INDEX jobs_cancelled_idx ON jobs (id) WHERE status = 'cancelled';
