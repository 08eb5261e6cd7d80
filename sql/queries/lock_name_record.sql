-- params: bigint, text
-- $1 lock id, $2 name. Written without a unique constraint so that it never
-- waits for another session's uncommitted insert of the same name.
INSERT INTO distlock.lock_names (lock_id, name)
SELECT $1, $2
 WHERE NOT EXISTS (SELECT FROM distlock.lock_names n
                    WHERE n.lock_id OPERATOR(pg_catalog.=) $1
                      AND n.name OPERATOR(pg_catalog.=) $2)
