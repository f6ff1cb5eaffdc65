-- The console's search indexes, as SQLite's migration 17 (which explains the registry).
--
-- json_field: the JSON value at `path` as text (`#>>`), NULL where `doc` is not JSON,
-- so one hand-written row cannot fail every search, and a search index cannot make a
-- write of such a row fail. IMMUTABLE so an index may be built on it; STRICT so the
-- planner knows a match is NOT NULL, which the indexes' condition needs. Not PARALLEL
-- SAFE: its exception block is a subtransaction (as error_code's, migration 12).
CREATE FUNCTION json_field(doc text, path text[]) RETURNS text LANGUAGE plpgsql
    IMMUTABLE STRICT
AS $$
BEGIN
    RETURN doc::jsonb #>> path;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;

CREATE TABLE search_indexes (
    field       text COLLATE "C" PRIMARY KEY,
    index_name  text NOT NULL UNIQUE,
    created_at  bigint NOT NULL
);
