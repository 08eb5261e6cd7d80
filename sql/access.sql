-- Capabilities: the five kinds of caller, and exactly what each may touch.
-- Callers never get table privileges (the functions run their statements as
-- the extension's owner); a capability is USAGE on the schema plus EXECUTE
-- on its functions, and for monitor and admin SELECT on the views.

CREATE TABLE distlock.role_capabilities (
    -- regrole, not oid: a restore maps capabilities to roles by name.
    role       regrole NOT NULL,
    capability text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- The name prefix the capability is limited to; NULL: every name.
    scope      text,
    PRIMARY KEY (role, capability),
    CONSTRAINT role_capabilities_capability_known CHECK (
        capability IN ('worker', 'producer', 'consumer', 'monitor', 'admin')),
    CONSTRAINT role_capabilities_scope_valid CHECK (
        scope IS NULL OR (scope <> '' AND capability <> 'admin'))
);

-- Backends keep the scopes they have looked up; a change makes them forget.
CREATE TRIGGER role_capabilities_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.role_capabilities
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.role_capabilities_changed();

COMMENT ON TABLE distlock.role_capabilities IS
    'Capabilities granted with distlock.grant_capability; admin may act on other roles'' holds.';

-- The privileges a capability consists of, as (privilege, object) pairs for
-- GRANT. admin is every other capability plus the administrative functions
-- and the task definitions (but never the columns tokens live in).
-- An unknown capability is an error (22023), for grant and revoke alike.
CREATE FUNCTION distlock.capability_privileges(p_capability text)
RETURNS TABLE (privilege text, object text)
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_capability OPERATOR(pg_catalog.<>) ALL (ARRAY['worker', 'producer', 'consumer', 'monitor', 'admin']) THEN
        RAISE EXCEPTION 'unknown capability "%"', p_capability
            USING ERRCODE = '22023', HINT = 'One of worker, producer, consumer, monitor, admin.';
    END IF;
    RETURN QUERY
SELECT g.privilege, g.object FROM (VALUES
    -- Pure helpers, for everyone with a capability.
    ('any',      'USAGE',   'SCHEMA distlock'),
    ('any',      'EXECUTE', 'FUNCTION distlock.lock_id(text)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.get_task_lock_id(text)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.task_lock_class()'),
    ('any',      'EXECUTE', 'FUNCTION distlock.cron_next(text, timestamptz)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.cron_next(text, timestamptz, text)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_timestamp(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_worker_id(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_sequence(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.in_monitor_scope(text, text)'),
    -- Scheduled tasks and the coordination primitives a service uses.
    ('worker',   'EXECUTE', 'FUNCTION distlock.worker_fetch_and_execute_task(text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_multiple_tasks(text, integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_task_lock(integer, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_task_lock(integer, text, text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.check_fencing_token(integer, bigint)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.worker_fetch_and_execute_task(text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_multiple_tasks(text, integer, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_task_lease(integer, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.renew_task_lease(integer, bigint, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_task_lease(integer, bigint, text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_and_fetch_task(integer, text, text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_and_fetch_task(integer, bigint, text, text, interval, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.next_task_wait()'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.lock(bigint, interval, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.lock(text, interval, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_lock(bigint, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_lock(text, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.unlock(bigint, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.unlock(text, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.unlock_all()'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.acquire_lease(text, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.renew_lease(text, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_lease(text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.check_lease_token(text, bigint)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.acquire_semaphore(text, integer, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_semaphore(text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_become_leader(text, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.resign_leader(text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.check_rate_limit(text, integer, integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.throttle(text, integer, integer, double precision, integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.rate_limit_status(text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.generate_snowflake_id(integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.bump_version()'),
    -- The job queue.
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text, text, interval)'),
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.consume_task(text, interval, interval, text[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.consume_tasks(integer, text, interval, interval, text[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_tasks(bigint[], text, integer[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_task(bigint, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_task(bigint, text, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.fail_task(bigint, text, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.fail_task(bigint, text, text, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.extend_task_lease(bigint, interval, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.extend_task_lease(bigint, interval, text, integer)'),
    -- The monitoring views (what pg_monitor is granted).
    ('monitor',  'SELECT',  'distlock.advisory_locks, distlock.lock_waits, distlock.running_tasks, '
                            'distlock.task_stats, distlock.queue_stats, distlock.queues, distlock.queue_throughput, '
                            'distlock.queue_latency, distlock.queue_wait_histogram, distlock.leases, distlock.leaders, '
                            'distlock.lock_stats, distlock.lock_key_collisions, distlock.blocked_tasks, distlock.sweep_status, '
                            'distlock.task_schedule'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_stats_entries()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.queue_wait_stats()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.rate_limit_keys()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.queue_counters()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lease_backend_connected(integer)'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lease_backend_alive(integer)'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_owner_published(integer)'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_owner(integer)'),
    -- Recovery, retention and resets; defining tasks.
    ('admin',    'EXECUTE', 'FUNCTION distlock.check_and_recover_timeout_tasks(integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.force_release_lease(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.pause_queue(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.resume_queue(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.set_queue_limit(text, integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_rate_limit(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_rate_limits(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_lock_stats()'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_queue_counters(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_execution_log(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_jobs(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.retry_dead_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.delete_dead_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.requeue_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.run_task_now(integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.purge_queue(text, boolean)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_leases(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_lock_names(interval)'),
    ('admin',    'SELECT, DELETE', 'distlock.scheduled_tasks'),
    ('admin',    'INSERT (id, task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay, schedule_timezone, missed_runs, missed_runs_grace, '
                 'missed_runs_max)', 'distlock.scheduled_tasks'),
    ('admin',    'UPDATE (task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay, consecutive_failures, schedule_timezone, missed_runs, '
                 'missed_runs_grace, missed_runs_max)', 'distlock.scheduled_tasks'),
    ('admin',    'USAGE',   'SEQUENCE distlock.scheduled_tasks_id_seq'),
    ('admin',    'SELECT',  'distlock.task_execution_log, distlock.task_queue, distlock.completed_jobs, distlock.jobs, '
                            'distlock.job_attempts')
) AS g (capability, privilege, object)
WHERE g.capability OPERATOR(pg_catalog.=) ANY (
    CASE p_capability
        WHEN 'admin' THEN ARRAY['any', 'worker', 'producer', 'consumer', 'monitor', 'admin']
        ELSE ARRAY['any', p_capability]
    END);
END
$$;

-- Gives p_role a capability: records it (admin is what lets a role act on
-- other roles' holds) and grants its privileges. With p_scope, the role may
-- use the capability only on names that start with p_scope (see
-- src/scopes.rs); a role has one scope per capability, and granting again
-- replaces it (NULL: every name). Only the extension's owner (or a
-- superuser) can run it.
CREATE FUNCTION distlock.grant_capability(p_role regrole, p_capability text, p_scope text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    IF p_role IS NULL OR p_capability IS NULL THEN
        RAISE EXCEPTION 'p_role and p_capability must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_scope OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'p_scope must not be empty' USING ERRCODE = '22023',
            HINT = 'Pass NULL for a capability on every name.';
    END IF;
    IF p_scope IS NOT NULL AND p_capability OPERATOR(pg_catalog.=) 'admin' THEN
        RAISE EXCEPTION 'the admin capability cannot be scoped (p_scope "%")', p_scope USING ERRCODE = '22023',
            HINT = 'Grant worker, producer, consumer or monitor with a scope instead.';
    END IF;
    FOR g IN SELECT * FROM distlock.capability_privileges(p_capability) LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', g.privilege, g.object, p_role);
    END LOOP;
    INSERT INTO distlock.role_capabilities AS c (role, capability, scope) VALUES (p_role, p_capability, p_scope)
    ON CONFLICT (role, capability) DO UPDATE SET scope = EXCLUDED.scope
     WHERE c.scope IS DISTINCT FROM EXCLUDED.scope;
END
$$;

-- Takes a capability away: revokes its privileges, then grants again what
-- the role's remaining capabilities include.
CREATE FUNCTION distlock.revoke_capability(p_role regrole, p_capability text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
    kept record;
BEGIN
    IF p_role IS NULL OR p_capability IS NULL THEN
        RAISE EXCEPTION 'p_role and p_capability must not be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM distlock.role_capabilities c
     WHERE c.role OPERATOR(pg_catalog.=) p_role AND c.capability OPERATOR(pg_catalog.=) p_capability;
    FOR g IN SELECT * FROM distlock.capability_privileges(p_capability) LOOP
        EXECUTE pg_catalog.format('REVOKE %s ON %s FROM %s',
                                  pg_catalog.split_part(g.privilege, ' (', 1), g.object, p_role);
    END LOOP;
    FOR kept IN SELECT c.capability, c.scope FROM distlock.role_capabilities c
                 WHERE c.role OPERATOR(pg_catalog.=) p_role LOOP
        PERFORM distlock.grant_capability(p_role, kept.capability, kept.scope);
    END LOOP;
END
$$;
