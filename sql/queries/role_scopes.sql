-- params: text
-- Every grant of capability $1 and its scope (NULL: unscoped).
SELECT c.role::pg_catalog.oid, c.scope
  FROM distlock.role_capabilities c
 WHERE c.capability OPERATOR(pg_catalog.=) $1
