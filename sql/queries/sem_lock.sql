-- params: text, integer
-- Creates semaphore $1 if needed (the latest caller's maximum $2 wins) and
-- locks its row to the end of the transaction: acquirers of one name queue here.
INSERT INTO distlock.semaphore_state AS s (name, max_holders) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET max_holders = excluded.max_holders
