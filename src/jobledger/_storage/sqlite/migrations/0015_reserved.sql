-- A placeholder: version 15 is the audit table's (issue 25), written on another branch.
-- When that migration is merged, this file is deleted and the schema regenerated.
SELECT 1;
