-- params: text, timestamptz
-- The key's GCRA state, row-locked until the transaction ends: inserted at
-- $2 (now) when missing, otherwise locked as it is. One statement, so the
-- sweep's prune cannot delete the row between creating and locking it
-- (a separate insert and SELECT FOR UPDATE let a request go unrecorded).
INSERT INTO distlock.rate_limit_gcra AS g (key, tat) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET tat = g.tat
RETURNING tat
