-- `jobs.retry_of`: the job a row re-runs (`jobs.retry`, `jobs.retry_many`), NULL on every
-- other row. Added last, so every earlier column keeps its position (`_storage/layout.py`).
-- Enqueue never names it: its INSERT is unchanged. The partial index holds re-runs only;
-- `retry_many` uses it to skip rows that have been re-run already.
ALTER TABLE jobs ADD COLUMN retry_of TEXT;

CREATE INDEX jobs_retry_of_idx ON jobs (retry_of) WHERE retry_of IS NOT NULL;
