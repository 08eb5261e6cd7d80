-- params: text, integer, timestamptz
-- Drops the holders of semaphore $1 whose slots ran out by $3 and returns
-- its limit: $2 when no live holder remains (the limit is one value for all
-- holders, set by whoever takes the first slot), else the limit in force.
WITH expired AS (
    DELETE FROM distlock.semaphore_holders
     WHERE name OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.<=) $3
), live AS (
    SELECT pg_catalog.count(*) AS holders
      FROM distlock.semaphore_holders
     WHERE name OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.>) $3
)
UPDATE distlock.semaphore_state s
   SET max_holders = CASE WHEN (SELECT l.holders FROM live l) OPERATOR(pg_catalog.=) 0 THEN $2
                          ELSE s.max_holders END
 WHERE s.name OPERATOR(pg_catalog.=) $1
RETURNING s.max_holders
