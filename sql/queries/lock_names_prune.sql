-- params: interval
-- Names first seen more than $1 ago whose key no session of this database
-- holds or waits for now.
DELETE FROM distlock.lock_names n
 WHERE n.first_seen OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
   AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
           AND l.objsubid OPERATOR(pg_catalog.=) 1
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND ((l.classid::bigint OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::bigint)
               OPERATOR(pg_catalog.=) n.lock_id)
