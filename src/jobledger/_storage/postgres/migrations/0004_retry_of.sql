-- `jobs.retry_of`: the job a row re-runs (`jobs.retry`, `jobs.retry_many`), NULL on every
-- other row; the SQLite migration 0007_retry_of.sql, column for column. Added last, so
-- every earlier column keeps its position (`_storage/layout.py`), and without a default,
-- so adding it rewrites no row. Enqueue never names it. The partial index holds re-runs
-- only; `retry_many` uses it to skip rows that have been re-run already.
ALTER TABLE jobs ADD COLUMN retry_of text COLLATE "C";

CREATE INDEX jobs_retry_of_idx ON jobs (retry_of) WHERE retry_of IS NOT NULL;
