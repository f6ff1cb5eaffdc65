-- The claim and the finalize without `jobs_status_created_idx` (issue 21), as SQLite's
-- migration 2 did. Every claim and finalize changes `status`, so no update of a job is
-- HOT and each adds an entry to every index of `jobs`; this one's entries go where the
-- row's creation time falls, so a claim or finalize over many queues dirtied a leaf page
-- of it per queue (`docs/benchmarks.md`, nineteenth round: at 1,000 queues about 5% of
-- the claim-and-finalize cycle's time and 6% of the server's CPU).
--
-- What it served: a listing by status, newest first. The statuses that are few and old
-- among many rows get partial indexes in the listing's order; `pending` is read through
-- `jobs_created_idx` (the backlog is the newest rows) or `jobs_claim_idx`, `running` and
-- `delayed` through their own partial indexes. The store writes known statuses into a
-- listing's SQL as literals (`postgres/store._where`): a partial index serves only a
-- query whose condition names its status.
CREATE INDEX jobs_failed_idx ON jobs (created_at, id) WHERE status = 'failed';
CREATE INDEX jobs_cancelled_idx ON jobs (created_at, id) WHERE status = 'cancelled';
CREATE INDEX jobs_waiting_idx ON jobs (created_at, id) WHERE status = 'waiting';
DROP INDEX jobs_status_created_idx;
