-- params: none
-- Whether any capability is scoped: until one is, nobody's scope is read.
SELECT EXISTS (SELECT FROM distlock.role_capabilities c WHERE c.scope IS NOT NULL)
