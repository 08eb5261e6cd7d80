-- Table-backed rate-limit state, used when pg_distlock is not preloaded:
-- exact, durable and replicated. (Preloaded, the same functions keep their
-- state in shared memory instead.) Expired rows are deleted by the sweep.

CREATE TABLE distlock.rate_limit_windows (
    key           text PRIMARY KEY,
    window_start  timestamptz NOT NULL,
    window_end    timestamptz NOT NULL,
    max_requests  int NOT NULL,
    request_count int NOT NULL
);

COMMENT ON TABLE distlock.rate_limit_windows IS
    'Fixed windows of distlock.check_rate_limit (table mode).';

CREATE TABLE distlock.rate_limit_gcra (
    key text PRIMARY KEY,
    -- GCRA theoretical arrival time of the next request.
    tat timestamptz NOT NULL
);

COMMENT ON TABLE distlock.rate_limit_gcra IS
    'GCRA state of distlock.throttle (table mode).';
