-- params: bigint, text, text
-- Ends running claim $1 (a log row) with status $2 (completed, failed,
-- timed_out or abandoned) and error $3, and schedules the task's next run.
-- Returns whether the claim's token was the task's current one, or no row
-- when the claim is not running (any more). The task row is changed only for
-- the current token: a claim that another claim has replaced (its holder
-- lost the lock, and someone else claimed) ends its own log row and nothing
-- else, so its report never overwrites the live claim's state.
-- Times are the release's own (clock_timestamp, read once), not the start of
-- its transaction: a release inside the claiming transaction must still log
-- the run's duration and schedule from when the run ended.
--   completed            -> next cron slot (none without a cron), in the
--                           task's time zone (distlock.timezone if it has none):
--                           after the run's end, or after the slot it served
--                           when missed_runs is 'all'
--   failed, timed_out    -> retry after retry_delay * 2^(failures so far),
--                           capped at 1 hour, with 50-100% jitter; once
--                           max_retries retries have failed, the next cron slot
--   abandoned            -> unchanged: the holder vanished, run the slot again
-- and counts the run in the task's runs_<status> (the counters that metrics
-- turn into rates: they only grow, and only when the release commits). A
-- replaced claim that the sweep ends is counted too, though nothing else of
-- the task row changes: its run ended all the same.
WITH released AS (
    SELECT pg_catalog.clock_timestamp() AS at
),
finished AS (
    UPDATE distlock.task_execution_log l
       SET status = $2,
           completed_at = (SELECT r.at FROM released r),
           error_message = $3
     WHERE l.id OPERATOR(pg_catalog.=) $1
       -- Still running, re-checked on the latest row version (a sweep may
       -- have ended it). Tested as completed_at IS NULL, which every writer
       -- keeps equivalent, so that the planner takes the primary key rather
       -- than scanning the running-claims index, which fills with dead
       -- entries between vacuums.
       AND l.completed_at IS NULL
 RETURNING l.task_id, l.fencing_token, l.scheduled_for, l.started_at
),
task AS (
    UPDATE distlock.scheduled_tasks t
       SET last_status = $2,
           current_token = NULL,
           lease_expires_at = NULL,
           consecutive_failures = CASE
               WHEN $2 OPERATOR(pg_catalog.=) 'abandoned' THEN t.consecutive_failures
               WHEN $2 OPERATOR(pg_catalog.=) ANY (ARRAY['failed', 'timed_out'])
                    AND t.consecutive_failures OPERATOR(pg_catalog.<) t.max_retries
                   THEN t.consecutive_failures OPERATOR(pg_catalog.+) 1
               ELSE 0
           END,
           -- The next run, and the slot the retries of a failed run serve
           -- (retry_slot: its own, or, for a retry, the one its chain serves;
           -- none once the chain ends), from the slot this run served.
           (next_run_at, retry_slot) = (
               SELECT CASE
                          WHEN $2 OPERATOR(pg_catalog.=) 'abandoned' THEN t.next_run_at
                          WHEN $2 OPERATOR(pg_catalog.=) ANY (ARRAY['failed', 'timed_out'])
                               AND t.consecutive_failures OPERATOR(pg_catalog.<) t.max_retries THEN
                              r.at
                              OPERATOR(pg_catalog.+)
                              (LEAST(LEAST(t.retry_delay, interval '1 hour')
                                     OPERATOR(pg_catalog.*) pg_catalog.power(2, LEAST(t.consecutive_failures, 20)),
                                     interval '1 hour')
                               OPERATOR(pg_catalog.*) (0.5 OPERATOR(pg_catalog.+) (pg_catalog.random() OPERATOR(pg_catalog./) 2)))
                          WHEN t.schedule_cron IS NULL THEN NULL
                          -- On the wall clock of the task's zone, or of
                          -- distlock.timezone. missed_runs 'all': the slot
                          -- after the one this run served, so that each slot
                          -- missed meanwhile runs in turn. Otherwise the first
                          -- slot after the run ended: missed slots make one
                          -- run. A slot before year 1 (next_run_at set by hand
                          -- to -infinity) is no slot of the schedule: from the
                          -- run's end.
                          ELSE distlock.cron_next(
                              t.schedule_cron,
                              COALESCE(s.served, r.at),
                              COALESCE(t.schedule_timezone, pg_catalog.current_setting('distlock.timezone')))
                      END,
                      CASE
                          WHEN $2 OPERATOR(pg_catalog.=) 'abandoned' THEN t.retry_slot
                          WHEN $2 OPERATOR(pg_catalog.=) ANY (ARRAY['failed', 'timed_out'])
                               AND t.consecutive_failures OPERATOR(pg_catalog.<) t.max_retries
                               AND t.missed_runs OPERATOR(pg_catalog.=) 'all' AND t.schedule_cron IS NOT NULL
                              THEN s.served
                      END
                 -- The slot this run served under 'all' (NULL: none; the next is
                 -- then the first after the run ended): its own due time when
                 -- that is a slot of the schedule as it is now and the run did
                 -- not start before it; for a retry, the slot its chain serves
                 -- (retry_slot, or for a chain begun before 0.4.0 or under
                 -- another policy, its first attempt's in the log), when that
                 -- is such a slot. A slot of a schedule changed meanwhile, a
                 -- run by hand ahead of its slot, and a due time out of
                 -- cron_next's range serve none.
                 -- A next_run_at changed while the run ran (a new schedule, an
                 -- admin's) is the slot the run's own gave way to: none served.
                 FROM (SELECT CASE WHEN t.missed_runs OPERATOR(pg_catalog.=) 'all' AND t.schedule_cron IS NOT NULL
                                        AND t.next_run_at OPERATOR(pg_catalog.=) f.scheduled_for THEN
                          (SELECT c.slot
                             FROM (VALUES (1, CASE WHEN f.scheduled_for OPERATOR(pg_catalog.<=) f.started_at
                                                   THEN f.scheduled_for END),
                                          (2, CASE WHEN t.consecutive_failures OPERATOR(pg_catalog.>) 0 THEN
                                                  COALESCE(t.retry_slot,
                                                           (SELECT o.scheduled_for
                                                              FROM distlock.task_execution_log o
                                                             WHERE o.task_id OPERATOR(pg_catalog.=) f.task_id
                                                               AND o.attempt OPERATOR(pg_catalog.=) 1
                                                               AND o.status OPERATOR(pg_catalog.<>) 'skipped'
                                                             ORDER BY o.id DESC
                                                             LIMIT 1))
                                              END)) AS c (rank, slot)
                            WHERE CASE WHEN c.slot OPERATOR(pg_catalog.>=) '0001-01-03 00:00:00+00'::pg_catalog.timestamptz
                                            AND c.slot OPERATOR(pg_catalog.<) '100000-01-01 00:00:00+00'::pg_catalog.timestamptz
                                       THEN distlock.cron_next(
                                                t.schedule_cron,
                                                c.slot OPERATOR(pg_catalog.-) interval '1 microsecond',
                                                COALESCE(t.schedule_timezone, pg_catalog.current_setting('distlock.timezone')))
                                            OPERATOR(pg_catalog.=) c.slot
                                       ELSE false
                                  END
                            ORDER BY c.rank
                            LIMIT 1)
                       END AS served) s),
           runs_completed = t.runs_completed OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'completed')::int,
           runs_failed    = t.runs_failed    OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'failed')::int,
           runs_timed_out = t.runs_timed_out OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'timed_out')::int,
           runs_abandoned = t.runs_abandoned OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'abandoned')::int
      FROM finished f, released r
     WHERE t.id OPERATOR(pg_catalog.=) f.task_id
       AND t.current_token OPERATOR(pg_catalog.=) f.fencing_token
    RETURNING t.id
),
replaced AS (
    -- A claim that another claim has replaced: only the run is counted.
    -- Decided after task, from what task did (it rechecks the token on the
    -- row's latest version, after waiting for a claim that replaced this
    -- one meanwhile), so that each run is counted exactly once.
    UPDATE distlock.scheduled_tasks t
       SET runs_completed = t.runs_completed OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'completed')::int,
           runs_failed    = t.runs_failed    OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'failed')::int,
           runs_timed_out = t.runs_timed_out OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'timed_out')::int,
           runs_abandoned = t.runs_abandoned OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.=) 'abandoned')::int
      FROM finished f
     WHERE t.id OPERATOR(pg_catalog.=) f.task_id
       AND NOT EXISTS (SELECT FROM task)
)
SELECT EXISTS (SELECT 1 FROM task) FROM finished
