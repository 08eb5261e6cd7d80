-- params: text, integer
-- Creates semaphore $1 with limit $2 if needed and locks its row to the end
-- of the transaction: acquirers of one name queue here. An existing
-- semaphore keeps its limit (sem_expire.sql decides whether it may change).
INSERT INTO distlock.semaphore_state AS s (name, max_holders) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET max_holders = s.max_holders
