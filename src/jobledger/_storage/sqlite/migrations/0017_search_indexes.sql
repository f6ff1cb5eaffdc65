-- The console's search indexes (DESIGN.md §8.9; `jobs.add_search_index`): which JSON
-- fields of `payload` or `metadata` have an index of their own, so that a search such as
-- `payload.user:u123` reads that index instead of every row's JSON.
--
-- * One row per field (`payload.user`, as typed); `index_name` is the index on `jobs`
--   that serves it, named from a hash of the field, so any checked field has a valid
--   and short name. The row and its index are written and dropped in one transaction.
-- * The index's expression is the search's own (`queries.field_expr`): SQLite uses an
--   index on an expression only for a query that spells the same expression. It is
--   NULL where the row's JSON does not parse or lacks the field, and the index is
--   partial on `IS NOT NULL`, so rows of other job types cost it nothing.
CREATE TABLE search_indexes (
    field TEXT PRIMARY KEY,
    index_name TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
