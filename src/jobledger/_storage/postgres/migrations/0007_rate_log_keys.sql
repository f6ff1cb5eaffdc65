-- A keyed rate limit's queue row may carry its claim's starts per key, not yet in the
-- keys' own rows (`_storage/rate.py`: `record_total`, `fold`): NULL once folded, and
-- on every row of an unkeyed limit.
ALTER TABLE rate_log ADD COLUMN keys text;
