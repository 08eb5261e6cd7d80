-- The recovery sweep's last run, so that a monitor can alert when nothing
-- runs it any more (pg_cron stopped, the job dropped, a failover to a node
-- without the schedule): check_and_recover_timeout_tasks records each run.

CREATE TABLE distlock.sweep_state (
    id             int PRIMARY KEY,
    -- NULL until the first run.
    last_run_at    timestamptz,
    -- Claims the last run ended (abandoned or timed out).
    last_recovered int,
    runs           bigint NOT NULL DEFAULT 0,
    -- Claims all runs ended: a total that only grows, for metrics.
    recovered      bigint NOT NULL DEFAULT 0
);

-- The one row, there from the start, so that a run records itself with an
-- UPDATE that can skip a concurrent sweep's lock instead of waiting for it.
INSERT INTO distlock.sweep_state (id) VALUES (1);

COMMENT ON TABLE distlock.sweep_state IS
    'The recovery sweep''s last run in this database (one row; last_run_at NULL before the first).';

CREATE VIEW distlock.sweep_status AS
SELECT s.last_run_at,
       pg_catalog.now() - s.last_run_at AS since_last_run,
       s.last_recovered,
       s.runs,
       s.recovered AS recovered_total
  FROM distlock.sweep_state s;

COMMENT ON VIEW distlock.sweep_status IS
    'When the recovery sweep last ran, how long ago, and what it recovered; NULLs before its first run.';
