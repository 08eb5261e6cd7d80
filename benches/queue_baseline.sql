-- The job queue as it is usually written by hand: one table like
-- distlock.task_queue with a partial index on runnable jobs, a claim that is
-- one UPDATE over a FOR UPDATE SKIP LOCKED subquery, and a completing UPDATE.
-- Both are sent as prepared statements (pgbench -M prepared), as an
-- application would; there is no lease reaping and no owner check.
CREATE SCHEMA IF NOT EXISTS recipe;

CREATE TABLE recipe.task_queue (
    id               bigserial PRIMARY KEY,
    task_name        text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}',
    status           text NOT NULL DEFAULT 'pending',
    worker_id        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    attempts         int NOT NULL DEFAULT 0,
    max_attempts     int NOT NULL DEFAULT 5,
    run_after        timestamptz NOT NULL DEFAULT now(),
    priority         int NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    last_error       text
);
CREATE INDEX task_queue_runnable_idx
    ON recipe.task_queue (priority DESC, run_after, id)
    WHERE status IN ('pending', 'failed');
