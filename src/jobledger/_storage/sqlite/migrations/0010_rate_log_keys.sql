-- A keyed rate limit's queue row may carry its claim's starts per key, not yet in the
-- keys' own rows (`_storage/rate.py`: `record_total`, `fold`): NULL once folded, and
-- on every row of an unkeyed limit.
ALTER TABLE rate_log ADD COLUMN keys TEXT;

-- The unfolded rows alone, so a fold reads only what it moves, not every row of the
-- queue's window (a window of an hour holds every claim of that hour).
CREATE INDEX rate_log_unfolded_idx ON rate_log (bucket, at) WHERE keys IS NOT NULL;
