-- Privileges and pg_dump registration; runs last.

-- Nothing is PUBLIC: CREATE FUNCTION grants EXECUTE to PUBLIC by default.
REVOKE ALL ON SCHEMA distlock FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA distlock FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA distlock FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA distlock FROM PUBLIC;
-- Nor anyone's but the owner's: the installing role's ALTER DEFAULT
-- PRIVILEGES grant every table, sequence and function this script creates
-- to their grantees (an application role given EXECUTE on future functions
-- would call consume_task unscoped and purge_queue, and read
-- lock_key_secret). pg_distlock grants by capability, below and in
-- grant_capability; at install nothing else is granted yet. Only the
-- extension's members: the schema (which DROP EXTENSION leaves, with what a
-- DBA granted on it) and anything else in it are not this script's.
DO $owner_only$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT CASE WHEN p.oid IS NOT NULL THEN pg_catalog.format('ROUTINE %s', p.oid::pg_catalog.regprocedure)
                    WHEN c.relkind OPERATOR(pg_catalog.=) 'S'
                         THEN pg_catalog.format('SEQUENCE %s', c.oid::pg_catalog.regclass)
                    ELSE pg_catalog.format('TABLE %s', c.oid::pg_catalog.regclass) END AS object,
               a.grantee
          FROM pg_catalog.pg_depend d
          LEFT JOIN pg_catalog.pg_class c
                 ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                AND c.oid OPERATOR(pg_catalog.=) d.objid
          LEFT JOIN pg_catalog.pg_proc p
                 ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                AND p.oid OPERATOR(pg_catalog.=) d.objid
          CROSS JOIN LATERAL pg_catalog.aclexplode(COALESCE(c.relacl, p.proacl)) a
         WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
                                                   WHERE e.extname OPERATOR(pg_catalog.=) 'pg_distlock')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[0, COALESCE(c.relowner, p.proowner)]::pg_catalog.oid[])
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', o.object, o.grantee::pg_catalog.regrole);
    END LOOP;
END
$owner_only$;
-- Nobody but the owner creates in the schema, whoever made it (CREATE
-- EXTENSION does, when it is missing, and the installing role's default
-- privileges on schemas then apply; so does a restore): a role that may
-- create there plants look-alikes of pg_distlock's functions that other
-- tenants' calls resolve to (review 45). What a DBA granted otherwise on
-- the schema (USAGE) is left.
DO $owner_only_schema$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_namespace n CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
         WHERE n.oid OPERATOR(pg_catalog.=) 'distlock'::pg_catalog.regnamespace
           AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
           AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[0, n.nspowner]::pg_catalog.oid[])
    LOOP
        EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA distlock FROM %s CASCADE', o.grantee::pg_catalog.regrole);
    END LOOP;
END
$owner_only_schema$;

-- Monitoring roles may read the views (and only the views).
GRANT USAGE ON SCHEMA distlock TO pg_monitor;
GRANT SELECT ON distlock.advisory_locks, distlock.lock_waits,
                distlock.running_tasks, distlock.task_stats,
                distlock.queue_stats, distlock.queues, distlock.queue_throughput,
                distlock.queue_latency, distlock.queue_wait_histogram, distlock.leases, distlock.leaders,
                distlock.lock_stats, distlock.lock_key_collisions,
                distlock.blocked_tasks, distlock.sweep_status, distlock.task_schedule TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.task_lock_class() TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.lock_stats_entries() TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.rate_limit_keys() TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.queue_counters() TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.in_monitor_scope(text, text) TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.lease_backend_connected(integer) TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.lease_backend_alive(integer) TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.lock_owner_published(integer) TO pg_monitor;
GRANT EXECUTE ON FUNCTION distlock.lock_owner(integer) TO pg_monitor;

-- User data survives pg_dump / pg_restore, including the sequences, so
-- fencing tokens keep increasing after a restore.
SELECT pg_catalog.pg_extension_config_dump('distlock.scheduled_tasks', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.scheduled_tasks_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.task_execution_log', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.task_execution_log_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.fencing_token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.task_queue', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.completed_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.job_attempts', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.queue_settings', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.id_generator', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.lease_state', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.semaphore_state', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.semaphore_holders', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.leader_state', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.lease_token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.task_queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.lock_names', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.role_capabilities', '');
