-- Straightforward PL/pgSQL versions of what pg_distlock does, written the
-- way the well-known recipes do it, for side-by-side measurement only.
CREATE SCHEMA recipe;

-- Scheduled-task claims: an advisory lock on md5(name), a log row, an update.
CREATE TABLE recipe.scheduled_tasks (
    id serial PRIMARY KEY,
    task_name text NOT NULL UNIQUE,
    task_type text NOT NULL,
    schedule_cron text,
    is_enabled boolean DEFAULT true,
    last_run_at timestamptz,
    next_run_at timestamptz,
    created_at timestamptz DEFAULT now()
);
CREATE TABLE recipe.task_execution_log (
    id bigserial PRIMARY KEY,
    task_id int NOT NULL REFERENCES recipe.scheduled_tasks (id),
    worker_id text NOT NULL,
    status text NOT NULL,
    started_at timestamptz DEFAULT now(),
    completed_at timestamptz,
    error_message text,
    lock_id bigint
);
CREATE INDEX ON recipe.task_execution_log (task_id) WHERE status = 'running';

CREATE FUNCTION recipe.get_task_lock_id(p_task_name text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT ('x' || substr(md5(p_task_name), 1, 16))::bit(64)::bigint $$;

CREATE FUNCTION recipe.try_acquire_task_lock(p_task_id int, p_worker_id text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_lock bigint;
BEGIN
    SELECT recipe.get_task_lock_id(task_name) INTO v_lock
      FROM recipe.scheduled_tasks WHERE id = p_task_id AND is_enabled;
    IF v_lock IS NULL OR NOT pg_try_advisory_lock(v_lock) THEN
        RETURN false;
    END IF;
    INSERT INTO recipe.task_execution_log (task_id, worker_id, status, lock_id)
    VALUES (p_task_id, p_worker_id, 'running', v_lock);
    UPDATE recipe.scheduled_tasks SET last_run_at = now() WHERE id = p_task_id;
    RETURN true;
END $$;

CREATE FUNCTION recipe.release_task_lock(p_task_id int, p_worker_id text, p_status text,
                                         p_error_message text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_lock bigint;
BEGIN
    UPDATE recipe.task_execution_log
       SET status = p_status, completed_at = now(), error_message = p_error_message
     WHERE task_id = p_task_id AND worker_id = p_worker_id AND status = 'running'
    RETURNING lock_id INTO v_lock;
    UPDATE recipe.scheduled_tasks SET next_run_at = NULL WHERE id = p_task_id;
    PERFORM pg_advisory_unlock(v_lock);
END $$;

-- Fixed-window rate limiter: a session advisory lock around read-then-write.
CREATE TABLE recipe.rate_limits (
    key text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    request_count int NOT NULL
);

CREATE FUNCTION recipe.check_rate_limit(p_key text, p_max_requests int, p_window_seconds int)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    r recipe.rate_limits;
    allowed boolean;
BEGIN
    PERFORM pg_advisory_lock(hashtext(p_key));
    SELECT * INTO r FROM recipe.rate_limits WHERE key = p_key;
    IF NOT FOUND THEN
        INSERT INTO recipe.rate_limits VALUES (p_key, clock_timestamp(), 1);
        allowed := true;
    ELSIF r.window_start + make_interval(secs => p_window_seconds) <= clock_timestamp() THEN
        UPDATE recipe.rate_limits SET window_start = clock_timestamp(), request_count = 1 WHERE key = p_key;
        allowed := true;
    ELSIF r.request_count < p_max_requests THEN
        UPDATE recipe.rate_limits SET request_count = request_count + 1 WHERE key = p_key;
        allowed := true;
    ELSE
        allowed := false;
    END IF;
    PERFORM pg_advisory_unlock(hashtext(p_key));
    RETURN allowed;
END $$;

-- Snowflake generator: an advisory lock and one row rewritten per ID.
CREATE TABLE recipe.id_generator (
    worker_id int PRIMARY KEY,
    last_ms bigint NOT NULL,
    sequence int NOT NULL
);

CREATE FUNCTION recipe.generate_snowflake_id(p_worker_id int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint;
    r recipe.id_generator;
    seq int := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(p_worker_id);
    SELECT * INTO r FROM recipe.id_generator WHERE worker_id = p_worker_id;
    LOOP
        now_ms := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
        EXIT WHEN r IS NULL OR now_ms > r.last_ms OR r.sequence < 4095;
    END LOOP;
    IF r IS NULL THEN
        INSERT INTO recipe.id_generator VALUES (p_worker_id, now_ms, 0);
    ELSE
        IF now_ms <= r.last_ms THEN
            now_ms := r.last_ms;
            seq := r.sequence + 1;
        END IF;
        UPDATE recipe.id_generator SET last_ms = now_ms, sequence = seq WHERE worker_id = p_worker_id;
    END IF;
    RETURN ((now_ms - 1609459200000) << 22) | (p_worker_id << 12) | seq;
END $$;

-- Leases as a competent PL/pgSQL author writes them: one upsert that takes
-- a free or expired lease, renews the owner's own (keeping its token) and
-- leaves someone else's alone; release deletes only the owner's row.
CREATE SEQUENCE recipe.lease_token_seq;
CREATE TABLE recipe.leases (
    name        text PRIMARY KEY,
    owner       text NOT NULL,
    token       bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE FUNCTION recipe.acquire_lease(p_name text, p_owner text, p_ttl interval) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz := clock_timestamp();
    v_token bigint;
BEGIN
    INSERT INTO recipe.leases AS l (name, owner, token, acquired_at, expires_at)
    VALUES (p_name, p_owner, nextval('recipe.lease_token_seq'), t, t + p_ttl)
    ON CONFLICT (name) DO UPDATE
       SET token       = CASE WHEN l.owner = excluded.owner AND l.expires_at > t THEN l.token ELSE excluded.token END,
           acquired_at = CASE WHEN l.owner = excluded.owner AND l.expires_at > t THEN l.acquired_at ELSE t END,
           owner       = excluded.owner,
           expires_at  = excluded.expires_at
     WHERE l.owner = excluded.owner OR l.expires_at <= t
    RETURNING token INTO v_token;
    RETURN v_token;
END $$;

CREATE FUNCTION recipe.release_lease(p_name text, p_owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_held boolean;
BEGIN
    DELETE FROM recipe.leases WHERE name = p_name AND owner = p_owner
    RETURNING expires_at > clock_timestamp() INTO v_held;
    RETURN coalesce(v_held, false);
END $$;

-- Times one statement, best of n runs, in milliseconds.
CREATE FUNCTION recipe.best_ms(p_sql text, p_runs int DEFAULT 3) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    best numeric;
    took numeric;
BEGIN
    FOR i IN 1..p_runs LOOP
        t0 := clock_timestamp();
        EXECUTE p_sql;
        took := extract(epoch FROM clock_timestamp() - t0) * 1000;
        best := LEAST(best, took);
    END LOOP;
    RETURN round(best, 1);
END $$;
