-- Flow control counted in the database (DESIGN.md §8.7; _core/rate.py, _storage/rate.py).
--
-- `queue_settings`: what an operator set for a queue, read by every claim inside its
-- transaction, so a change holds in every process from its next claim and across
-- restarts. NULL: not set (the handler's concurrency; the handler's rate limit, if any).
CREATE TABLE queue_settings (
    queue        TEXT PRIMARY KEY,
    concurrency  INTEGER,
    rate_limit   INTEGER,                 -- starts per window, with rate_per_ms
    rate_per_ms  INTEGER,
    paused       INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL
) WITHOUT ROWID;

-- The starts of each rate-limited bucket (a queue), one row per claim that took any:
-- `cum` counts the bucket's starts up to and including that claim's, `at` is its time
-- (never below the row before: the window's arithmetic needs `at` to grow with `cum`).
-- The starts in (t - per, t] are the newest row's `cum` minus that of the newest row at
-- or before t - per; rows older than that one are deleted as claims go.
CREATE TABLE rate_log (
    bucket  TEXT NOT NULL,
    cum     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    -- One B-tree: `at` grows with `cum`, so (at, cum) order is cum order too.
    PRIMARY KEY (bucket, at, cum)
) WITHOUT ROWID;

-- A keyed rate limit's key (`jl.RateLimit(..., key=fn)`), computed from the payload where
-- the job is enqueued; NULL for every other row (and for a job a producer without the
-- handler wrote: it counts in the queue's keyless bucket). Not one of the row's columns
-- (`_storage/layout.py`): only the claim reads it. Added without a default, so adding
-- it rewrites no row.
ALTER TABLE jobs ADD COLUMN rate_key TEXT;
