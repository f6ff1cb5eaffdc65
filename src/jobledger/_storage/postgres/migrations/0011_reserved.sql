-- A placeholder: version 11 is the audit table's (issue 25), written on another branch.
-- When that migration is merged, this file is deleted.
SELECT 1;
