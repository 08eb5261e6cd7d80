-- params: text[]
-- How long until the earliest enabled task within scope $1 (name or type
-- starting with one of the prefixes; NULL: every task) may be claimed: 0
-- once one may, NULL when none has a next run. By this statement's clock.
-- A task no claim runs may be claimed at its next_run_at; one a lease-mode
-- claim holds, once that lease runs out (a dead worker's task comes due so);
-- one a session claim holds, at once if no backend holds its lock any more
-- (its worker died: a fetch takes it over), else it is left out: it comes
-- due again when the claim ends, and an idle worker told "due now" for it
-- would poll without pause. A task parked at 'infinity' is never due. The
-- scope is applied here, so the answer tells nothing of tasks outside it.
WITH in_scope AS NOT MATERIALIZED (
    SELECT t.id, t.next_run_at, t.current_token, t.lease_expires_at
      FROM distlock.scheduled_tasks t
     WHERE t.is_enabled
       AND ($1::pg_catalog.text[] IS NULL
            OR EXISTS (SELECT FROM pg_catalog.unnest($1::pg_catalog.text[]) AS p (prefix)
                        WHERE pg_catalog.starts_with(t.task_name, p.prefix)
                           OR pg_catalog.starts_with(t.task_type, p.prefix)))
),
unclaimed AS (
    SELECT s.next_run_at AS at
      FROM in_scope s
     WHERE s.current_token IS NULL
       AND s.next_run_at OPERATOR(pg_catalog.<) 'infinity'::pg_catalog.timestamptz
     ORDER BY s.next_run_at
     LIMIT 1
),
leased AS (
    -- Due and held: only such a task's lease can make it claimable sooner
    -- than the first unclaimed one.
    SELECT pg_catalog.min(GREATEST(s.next_run_at, s.lease_expires_at)) AS at
      FROM in_scope s
     WHERE s.next_run_at OPERATOR(pg_catalog.<=) pg_catalog.now()
       AND s.current_token IS NOT NULL
       AND s.lease_expires_at IS NOT NULL
),
orphaned AS (
    -- Due, held by a session claim whose backend holds the task's lock no
    -- more (task_lock_holders reads pg_locks once).
    SELECT pg_catalog.min(s.next_run_at) AS at
      FROM in_scope s
     WHERE s.next_run_at OPERATOR(pg_catalog.<=) pg_catalog.now()
       AND s.current_token IS NOT NULL
       AND s.lease_expires_at IS NULL
       AND NOT EXISTS (SELECT FROM distlock.task_lock_holders h WHERE h.task_id OPERATOR(pg_catalog.=) s.id)
)
SELECT CASE WHEN x.at IS NULL THEN NULL
            WHEN x.at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN interval '0'
            ELSE x.at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()
       END
  FROM (SELECT LEAST((SELECT u.at FROM unclaimed u), (SELECT l.at FROM leased l), (SELECT o.at FROM orphaned o)) AS at
        OFFSET 0) x
