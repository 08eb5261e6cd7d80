-- The recovery sweep's last run, so that a monitor can alert when nothing
-- runs it any more (pg_cron stopped, the job dropped, a failover to a node
-- without the schedule): check_and_recover_timeout_tasks records each run.

CREATE TABLE distlock.sweep_state (
    id             int PRIMARY KEY,
    last_run_at    timestamptz NOT NULL,
    -- Claims the last run ended (abandoned or timed out).
    last_recovered int NOT NULL,
    runs           bigint NOT NULL
);

COMMENT ON TABLE distlock.sweep_state IS
    'The recovery sweep''s last run in this database (one row once it has run).';

CREATE VIEW distlock.sweep_status AS
SELECT s.last_run_at,
       pg_catalog.now() - s.last_run_at AS since_last_run,
       s.last_recovered,
       s.runs
  FROM distlock.sweep_state s;

COMMENT ON VIEW distlock.sweep_status IS
    'When the recovery sweep last ran, how long ago, and what it recovered; no row before its first run.';
