-- params: none
-- Roles granted the admin capability.
SELECT c.role::pg_catalog.oid
  FROM distlock.role_capabilities c
 WHERE c.capability OPERATOR(pg_catalog.=) 'admin'
