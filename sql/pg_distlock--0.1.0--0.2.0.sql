-- pg_distlock 0.1.0 -> 0.2.0, run by ALTER EXTENSION pg_distlock UPDATE.
-- Every schema change since 0.1.0 is here as well as in the install script
-- that sql/*.sql and src/ generate; tests/cluster/upgrade.rs checks that a
-- 0.1.0 database updated with this script equals a fresh 0.2.0 install
-- (tests/cluster/schema_fingerprint.sql) and keeps its data.
\echo Use "ALTER EXTENSION pg_distlock UPDATE TO '0.2.0'" to load this file. \quit

-- Queue: settle a given attempt (the `attempts` consume_task returned), so a
-- consumer whose lease expired cannot complete or fail the next attempt of
-- the same job, even under the same worker id. New overloads: the 0.1.0
-- forms keep their signatures, defaults and grants.
CREATE FUNCTION distlock.complete_task(p_task_id bigint, p_worker_id text, p_attempt int)
RETURNS bool
LANGUAGE c AS 'MODULE_PATHNAME', 'complete_attempt_wrapper';

CREATE FUNCTION distlock.fail_task(p_task_id bigint, p_error text, p_worker_id text, p_attempt int)
RETURNS bool
LANGUAGE c AS 'MODULE_PATHNAME', 'fail_attempt_wrapper';

CREATE FUNCTION distlock.extend_task_lease(p_task_id bigint, p_lease interval, p_worker_id text, p_attempt int)
RETURNS bool
LANGUAGE c AS 'MODULE_PATHNAME', 'extend_attempt_lease_wrapper';

REVOKE ALL ON FUNCTION distlock.complete_task(bigint, text, int),
                       distlock.fail_task(bigint, text, text, int),
                       distlock.extend_task_lease(bigint, interval, text, int) FROM PUBLIC;

-- Tasks: retry_delay is at most 1 hour (retries never wait longer, and
-- doubling a huge delay overflowed the interval type). Existing rows are
-- left as they are; releases cap the delay they read.
CREATE OR REPLACE FUNCTION distlock.scheduled_tasks_check() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next_slot timestamptz;
BEGIN
    -- The rule every name obeys (src/text.rs): not blank, at most 1000 bytes.
    IF NEW.task_name IS NULL OR btrim(NEW.task_name, E' \t\n\r\f\v') = '' THEN
        RAISE EXCEPTION 'task_name must not be blank, got "%"', NEW.task_name USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length(NEW.task_name) > 1000 THEN
        RAISE EXCEPTION 'task_name must be at most 1000 bytes, got % bytes', octet_length(NEW.task_name)
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.task_type IS NULL OR btrim(NEW.task_type) = '' THEN
        RAISE EXCEPTION 'task_type of task "%" must not be empty, got "%"', NEW.task_name, NEW.task_type
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.timeout <= interval '0' THEN
        RAISE EXCEPTION 'timeout of task "%" must be positive, got %', NEW.task_name, NEW.timeout
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.max_retries NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'max_retries of task "%" must be between 0 and 1000, got %', NEW.task_name, NEW.max_retries
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.retry_delay <= interval '0' THEN
        RAISE EXCEPTION 'retry_delay of task "%" must be positive, got %', NEW.task_name, NEW.retry_delay
            USING ERRCODE = 'check_violation';
    END IF;
    -- Retries wait at most an hour, so a longer first delay means nothing,
    -- and doubling a huge one would overflow the interval type.
    IF NEW.retry_delay > interval '1 hour' THEN
        RAISE EXCEPTION 'retry_delay of task "%" must be at most 1 hour, got %', NEW.task_name, NEW.retry_delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.schedule_cron IS NULL THEN
        RETURN NEW;
    END IF;
    next_slot := distlock.cron_next(NEW.schedule_cron, now());
    IF TG_OP = 'INSERT' THEN
        IF NEW.next_run_at IS NULL THEN
            NEW.next_run_at := next_slot;
        END IF;
    ELSIF NEW.schedule_cron IS DISTINCT FROM OLD.schedule_cron
          AND NEW.next_run_at IS NOT DISTINCT FROM OLD.next_run_at THEN
        NEW.next_run_at := next_slot;
    END IF;
    RETURN NEW;
END
$$;

-- Queue: task names and worker ids obey the one rule for names (not blank,
-- at most 1000 bytes, checked by the functions before writing), so the
-- columns lose their narrower varchar limits. varchar -> text rewrites
-- nothing; queue_stats depends on task_name, so it is rebuilt, and every
-- privilege on it, users' grants included, is given back.
CREATE TEMPORARY TABLE distlock_queue_stats_acl AS
SELECT a.grantee, a.privilege_type, a.is_grantable
  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
 WHERE c.oid OPERATOR(pg_catalog.=) 'distlock.queue_stats'::pg_catalog.regclass;

DROP VIEW distlock.queue_stats;

ALTER TABLE distlock.task_queue
    ALTER COLUMN task_name TYPE text,
    ALTER COLUMN worker_id TYPE text;

CREATE VIEW distlock.queue_stats AS
SELECT q.task_name,
       q.status,
       count(*) AS jobs,
       pg_catalog.now() - min(q.created_at) FILTER (WHERE q.status = 'pending') AS oldest_pending_age,
       min(q.run_after) FILTER (WHERE q.status IN ('pending', 'failed')) AS next_run_after,
       count(*) FILTER (WHERE q.status = 'processing'
                          AND q.lease_expires_at <= pg_catalog.now()) AS expired_leases
  FROM distlock.task_queue q
 GROUP BY q.task_name, q.status;

COMMENT ON VIEW distlock.queue_stats IS
    'Jobs per task name and status, with the age of the oldest pending job.';

DO $$
DECLARE
    item record;
BEGIN
    REVOKE ALL ON distlock.queue_stats FROM PUBLIC;
    FOR item IN SELECT * FROM distlock_queue_stats_acl LOOP
        EXECUTE pg_catalog.format('GRANT %s ON distlock.queue_stats TO %s%s',
            item.privilege_type,
            CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
            CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

DROP TABLE distlock_queue_stats_acl;

-- Retention: functions that delete what only grew (finished jobs, expired
-- leases, leaderships and semaphore slots, lock names), for pg_cron.
CREATE FUNCTION distlock.prune_jobs(p_older_than interval DEFAULT '7 days')
RETURNS bigint
LANGUAGE c AS 'MODULE_PATHNAME', 'prune_jobs_wrapper';

CREATE FUNCTION distlock.prune_leases(p_older_than interval DEFAULT '1 day')
RETURNS bigint
LANGUAGE c AS 'MODULE_PATHNAME', 'prune_leases_wrapper';

CREATE FUNCTION distlock.prune_lock_names(p_older_than interval DEFAULT '30 days')
RETURNS bigint
LANGUAGE c AS 'MODULE_PATHNAME', 'prune_lock_names_wrapper';

REVOKE ALL ON FUNCTION distlock.prune_jobs(interval),
                       distlock.prune_leases(interval),
                       distlock.prune_lock_names(interval) FROM PUBLIC;

-- Tasks: task locks held with no committed claim (an uncommitted claim or a
-- foreign advisory lock on a task key) are shown; the sweep reads this view
-- to end claims left in transactions that never finish.
CREATE VIEW distlock.blocked_tasks AS
SELECT h.task_id,
       t.task_name,
       h.pid,
       a.usename,
       a.application_name,
       a.client_addr,
       a.backend_start,
       a.state,
       a.xact_start,
       pg_catalog.now() - a.xact_start AS in_transaction_for,
       t.timeout,
       a.query
  FROM distlock.task_lock_holders h
  JOIN distlock.scheduled_tasks t ON t.id = h.task_id
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = h.pid
 WHERE NOT EXISTS (SELECT 1 FROM distlock.task_execution_log r
                    WHERE r.task_id = h.task_id
                      AND r.status = 'running'
                      AND r.holder_pid = h.pid);

COMMENT ON VIEW distlock.blocked_tasks IS
    'Task locks held without a committed running claim (an uncommitted claim or a foreign advisory lock).';

GRANT SELECT ON distlock.blocked_tasks TO pg_monitor;

-- Tasks: lease-mode claims. A claim can be the task row's lease (expiry and
-- fencing token), renewed and released by token from any connection, instead
-- of a session lock: it works through transaction-pooling PgBouncer and
-- survives failover. New overloads; the session-mode forms are unchanged.
ALTER TABLE distlock.scheduled_tasks ADD COLUMN lease_expires_at timestamptz;

CREATE FUNCTION distlock.worker_fetch_and_execute_task(p_worker_id text, p_lease interval)
RETURNS TABLE (task_id int, task_name text, task_type text, acquired boolean, fencing_token bigint)
LANGUAGE c AS 'MODULE_PATHNAME', 'worker_fetch_and_lease_task_wrapper';

CREATE FUNCTION distlock.try_acquire_multiple_tasks(p_worker_id text, p_max_tasks int, p_lease interval)
RETURNS TABLE (task_id int, task_name text, acquired boolean, fencing_token bigint)
LANGUAGE c AS 'MODULE_PATHNAME', 'try_lease_multiple_tasks_wrapper';

CREATE FUNCTION distlock.try_acquire_task_lease(p_task_id int, p_worker_id text, p_lease interval)
RETURNS bigint
LANGUAGE c AS 'MODULE_PATHNAME', 'try_acquire_task_lease_wrapper';

CREATE FUNCTION distlock.renew_task_lease(p_task_id int, p_fencing_token bigint, p_lease interval)
RETURNS timestamptz
LANGUAGE c AS 'MODULE_PATHNAME', 'renew_task_lease_wrapper';

CREATE FUNCTION distlock.release_task_lease(p_task_id int, p_fencing_token bigint, p_status text,
                                            p_error_message text DEFAULT NULL)
RETURNS void
LANGUAGE c AS 'MODULE_PATHNAME', 'release_task_lease_wrapper';

REVOKE ALL ON FUNCTION distlock.worker_fetch_and_execute_task(text, interval),
                       distlock.try_acquire_multiple_tasks(text, int, interval),
                       distlock.try_acquire_task_lease(int, text, interval),
                       distlock.renew_task_lease(int, bigint, interval),
                       distlock.release_task_lease(int, bigint, text, text) FROM PUBLIC;

-- A lease-mode claim has no holder backend: it is alive while its lease lasts.
CREATE OR REPLACE VIEW distlock.running_tasks AS
SELECT r.id AS log_id,
       r.task_id,
       t.task_name,
       r.worker_id,
       r.fencing_token,
       r.attempt,
       r.started_at,
       pg_catalog.now() - r.started_at AS running_for,
       r.holder_pid,
       r.holder_backend_start,
       -- Alive: this claim is the task's current one and its backend still
       -- holds the task lock (a dead or restarted backend holds nothing), or,
       -- for a lease-mode claim (no holder backend), its lease has not run out.
       (r.fencing_token IS NOT DISTINCT FROM t.current_token
        AND CASE WHEN r.holder_pid IS NULL THEN t.lease_expires_at > pg_catalog.clock_timestamp()
                 ELSE h.pid IS NOT NULL END) AS holder_alive,
       t.timeout,
       (t.timeout IS NOT NULL AND pg_catalog.now() - r.started_at > t.timeout) AS past_timeout,
       CASE WHEN r.fencing_token IS NOT DISTINCT FROM t.current_token THEN t.lease_expires_at END AS lease_expires_at
  FROM distlock.task_execution_log r
  JOIN distlock.scheduled_tasks t ON t.id = r.task_id
  LEFT JOIN distlock.task_lock_holders h ON h.task_id = r.task_id AND h.pid = r.holder_pid
 WHERE r.status = 'running';

COMMENT ON VIEW distlock.running_tasks IS
    'Running claims, whether their holder (backend, or lease for a lease-mode claim) is alive, and whether they are past their timeout.';

-- Least privilege: holds record the role that took them (release, renew,
-- complete, fail, extend and resign act only for that role or an admin);
-- capabilities say which functions a role may call. Holds taken before
-- this update have no role and are settled by owner string, as before.
ALTER TABLE distlock.lease_state ADD COLUMN holder_role oid;
ALTER TABLE distlock.semaphore_holders ADD COLUMN holder_role oid;
ALTER TABLE distlock.leader_state ADD COLUMN holder_role oid;
ALTER TABLE distlock.task_queue ADD COLUMN holder_role oid;
ALTER TABLE distlock.task_execution_log ADD COLUMN holder_role oid;

CREATE TABLE distlock.role_capabilities (
    -- regrole, not oid: a restore maps capabilities to roles by name.
    role       regrole NOT NULL,
    capability text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (role, capability),
    CONSTRAINT role_capabilities_capability_known CHECK (
        capability IN ('worker', 'producer', 'consumer', 'monitor', 'admin'))
);

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
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_timestamp(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_worker_id(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_sequence(bigint)'),
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
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.consume_task(text, interval, interval)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.consume_tasks(integer, text, interval, interval)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_tasks(bigint[], text, integer[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_task(bigint, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_task(bigint, text, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.fail_task(bigint, text, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.fail_task(bigint, text, text, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.extend_task_lease(bigint, interval, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.extend_task_lease(bigint, interval, text, integer)'),
    -- The monitoring views (what pg_monitor is granted).
    ('monitor',  'SELECT',  'distlock.advisory_locks, distlock.lock_waits, distlock.running_tasks, '
                            'distlock.task_stats, distlock.queue_stats, distlock.leases, distlock.leaders, '
                            'distlock.lock_stats, distlock.lock_key_collisions, distlock.blocked_tasks'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_stats_entries()'),
    -- Recovery, retention and resets; defining tasks.
    ('admin',    'EXECUTE', 'FUNCTION distlock.check_and_recover_timeout_tasks(integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.force_release_lease(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_rate_limit(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_lock_stats()'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_execution_log(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_jobs(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_leases(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_lock_names(interval)'),
    ('admin',    'SELECT, INSERT, DELETE', 'distlock.scheduled_tasks'),
    ('admin',    'UPDATE (task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay, consecutive_failures)', 'distlock.scheduled_tasks'),
    ('admin',    'USAGE',   'SEQUENCE distlock.scheduled_tasks_id_seq'),
    ('admin',    'SELECT',  'distlock.task_execution_log, distlock.task_queue')
) AS g (capability, privilege, object)
WHERE g.capability OPERATOR(pg_catalog.=) ANY (
    CASE p_capability
        WHEN 'admin' THEN ARRAY['any', 'worker', 'producer', 'consumer', 'monitor', 'admin']
        ELSE ARRAY['any', p_capability]
    END);
END
$$;

-- Gives p_role a capability: records it (admin is what lets a role act on
-- other roles' holds) and grants its privileges. Idempotent. Only the
-- extension's owner (or a superuser) can run it.
CREATE FUNCTION distlock.grant_capability(p_role regrole, p_capability text)
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
    FOR g IN SELECT * FROM distlock.capability_privileges(p_capability) LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', g.privilege, g.object, p_role);
    END LOOP;
    INSERT INTO distlock.role_capabilities (role, capability) VALUES (p_role, p_capability)
    ON CONFLICT DO NOTHING;
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
    kept text;
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
    FOR kept IN SELECT c.capability FROM distlock.role_capabilities c
                 WHERE c.role OPERATOR(pg_catalog.=) p_role LOOP
        PERFORM distlock.grant_capability(p_role, kept);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION distlock.capability_privileges(text),
                       distlock.grant_capability(regrole, text),
                       distlock.revoke_capability(regrole, text) FROM PUBLIC;
REVOKE ALL ON distlock.role_capabilities FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('distlock.role_capabilities', '');

-- Functions no longer pin search_path: every name in their statements is
-- schema-qualified (types and operators too), and a per-call SET search_path
-- cost about 1.2 µs (README Performance).
ALTER FUNCTION distlock.acquire_semaphore(text,integer,text,interval) RESET search_path;
ALTER FUNCTION distlock.check_and_recover_timeout_tasks(integer) RESET search_path;
ALTER FUNCTION distlock.check_fencing_token(integer,bigint) RESET search_path;
ALTER FUNCTION distlock.complete_task(bigint,text) RESET search_path;
ALTER FUNCTION distlock.enqueue_task(text,jsonb,timestamp with time zone,integer,integer) RESET search_path;
ALTER FUNCTION distlock.extend_task_lease(bigint,interval,text) RESET search_path;
ALTER FUNCTION distlock.fail_task(bigint,text,text) RESET search_path;
ALTER FUNCTION distlock.prune_execution_log(interval) RESET search_path;
ALTER FUNCTION distlock.release_semaphore(text,text) RESET search_path;
ALTER FUNCTION distlock.release_task_lock(integer,text,text,text) RESET search_path;
ALTER FUNCTION distlock.resign_leader(text,text) RESET search_path;
ALTER FUNCTION distlock.try_acquire_multiple_tasks(text,integer) RESET search_path;
ALTER FUNCTION distlock.try_acquire_task_lock(integer,text) RESET search_path;
ALTER FUNCTION distlock.try_become_leader(text,text,interval) RESET search_path;
ALTER FUNCTION distlock.worker_fetch_and_execute_task(text) RESET search_path;

-- 0.1.0's README had worker roles write the tables and use the sequences;
-- the functions no longer need that, and it let a worker forge tokens. Every
-- write privilege on a table and every sequence privilege held by a role
-- other than the owner goes; SELECT grants stay.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT c.oid::pg_catalog.regclass AS rel, c.relkind, a.privilege_type,
               CASE a.grantee WHEN 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END AS grantee
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'distlock'::pg_catalog.regnamespace
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
           AND ((c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::"char"[])
                 AND a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT')
                OR c.relkind OPERATOR(pg_catalog.=) 'S')
    LOOP
        EXECUTE pg_catalog.format('REVOKE %s ON %s %s FROM %s',
                                  g.privilege_type,
                                  CASE WHEN g.relkind OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                                  g.rel, g.grantee);
    END LOOP;
END
$$;

-- Queue: consumers may wait in the server for a job (p_wait) instead of
-- polling, and settle a batch in one call (complete_tasks). consume_task and
-- consume_tasks gain an argument, so they are made anew; every role that
-- could execute the old ones can execute the new ones.
DO $$
DECLARE
    grantees text[];
    grantee text;
BEGIN
    SELECT pg_catalog.array_agg(DISTINCT CASE a.grantee WHEN 0 THEN 'PUBLIC'
                                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END)
      INTO grantees
      FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY['distlock.consume_task(text, interval)'::pg_catalog.regprocedure,
                                                   'distlock.consume_tasks(integer, text, interval)'::pg_catalog.regprocedure])
       AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
       AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE';

    DROP FUNCTION distlock.consume_task(text, interval);
    DROP FUNCTION distlock.consume_tasks(integer, text, interval);

    CREATE FUNCTION distlock.consume_task(
        p_worker_id text DEFAULT NULL,
        p_lease interval DEFAULT '5 minutes',
        p_wait interval DEFAULT NULL
    ) RETURNS TABLE (task_id bigint, task_name text, payload jsonb, attempts int, max_attempts int,
                     lease_expires_at timestamptz, priority int, worker_id text)
    LANGUAGE c AS 'MODULE_PATHNAME', 'consume_task_or_wait_wrapper';

    CREATE FUNCTION distlock.consume_tasks(
        p_batch int,
        p_worker_id text DEFAULT NULL,
        p_lease interval DEFAULT '5 minutes',
        p_wait interval DEFAULT NULL
    ) RETURNS TABLE (task_id bigint, task_name text, payload jsonb, attempts int, max_attempts int,
                     lease_expires_at timestamptz, priority int, worker_id text)
    LANGUAGE c AS 'MODULE_PATHNAME', 'consume_tasks_or_wait_wrapper';

    REVOKE ALL ON FUNCTION distlock.consume_task(text, interval, interval),
                           distlock.consume_tasks(integer, text, interval, interval) FROM PUBLIC;
    FOREACH grantee IN ARRAY COALESCE(grantees, ARRAY[]::text[]) LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION distlock.consume_task(text, interval, interval), '
                                  'distlock.consume_tasks(integer, text, interval, interval) TO %s', grantee);
    END LOOP;
END
$$;

CREATE FUNCTION distlock.complete_tasks(
    p_task_ids bigint[],
    p_worker_id text DEFAULT NULL,
    p_attempts int[] DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE c AS 'MODULE_PATHNAME', 'complete_tasks_wrapper';

REVOKE ALL ON FUNCTION distlock.complete_tasks(bigint[], text, int[]) FROM PUBLIC;

-- Every job leaves two dead row versions (its claim and its completion).
-- Vacuum once 2 % of the table has changed rather than PostgreSQL's default
-- 20 %, so that a queue keeping a million finished jobs is cleaned as often
-- as a small one and its indexes stay free of dead entries.
ALTER TABLE distlock.task_queue SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000);

-- Queue table: no CHECK constraints (sql/queue.sql says why); the queue
-- functions check every value they store, and only the owner writes it.
ALTER TABLE distlock.task_queue
    DROP CONSTRAINT task_queue_status_known,
    DROP CONSTRAINT task_queue_task_name_not_blank,
    DROP CONSTRAINT task_queue_max_attempts_positive,
    DROP CONSTRAINT task_queue_attempts_nonnegative,
    DROP CONSTRAINT task_queue_processing_has_lease;
