-- Flow control counted in the database; the SQLite migration 0008_flow_control.sql,
-- table for table (DESIGN.md §8.7; _core/rate.py, _storage/rate.py).
CREATE TABLE queue_settings (
    queue        text COLLATE "C" PRIMARY KEY,
    concurrency  integer,
    rate_limit   integer,
    rate_per_ms  bigint,
    paused       boolean NOT NULL DEFAULT false,
    updated_at   bigint NOT NULL
);

CREATE TABLE rate_log (
    bucket  text COLLATE "C" NOT NULL,
    cum     bigint NOT NULL,
    at      bigint NOT NULL,
    PRIMARY KEY (bucket, at, cum)
);

-- A keyed rate limit's key; the SQLite migration's column (see there).
ALTER TABLE jobs ADD COLUMN rate_key text COLLATE "C";
