-- The console's audit log; the same table as SQLite's migration 15, which explains it.
-- `id` is an identity column: ids are taken in commit-independent order, so "newest
-- first" is by id, which is what two concurrent actions' readers agree on.
CREATE TABLE audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at bigint NOT NULL,
    actor text COLLATE "C" NOT NULL,
    action text COLLATE "C" NOT NULL,
    target text COLLATE "C" NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
