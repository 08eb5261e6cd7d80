-- Ends claim $1 with status $2 (completed, failed, timed_out or abandoned)
-- and error $3, and schedules the task's next run:
--   completed            -> next cron slot (none without a cron)
--   failed, timed_out    -> retry after retry_delay * 2^(failures so far),
--                           capped at 1 hour, with 50-100% jitter; once
--                           max_retries retries have failed, the next cron slot
--   abandoned            -> unchanged: the holder vanished, run the slot again
WITH finished AS (
    UPDATE distlock.task_execution_log
       SET status = $2,
           completed_at = pg_catalog.now(),
           error_message = $3
     WHERE id = $1
 RETURNING task_id, fencing_token
), outcome AS (
    SELECT t.id,
           f.fencing_token,
           $2 IN ('failed', 'timed_out') AS is_failure,
           $2 IN ('failed', 'timed_out') AND t.consecutive_failures < t.max_retries AS will_retry
      FROM distlock.scheduled_tasks t
      JOIN finished f ON f.task_id = t.id
)
UPDATE distlock.scheduled_tasks t
   SET last_status = $2,
       current_token = CASE WHEN t.current_token = o.fencing_token THEN NULL
                            ELSE t.current_token END,
       consecutive_failures = CASE WHEN $2 = 'abandoned' THEN t.consecutive_failures
                                   WHEN o.will_retry THEN t.consecutive_failures + 1
                                   ELSE 0 END,
       next_run_at = CASE
           WHEN $2 = 'abandoned' THEN t.next_run_at
           WHEN o.will_retry THEN
               pg_catalog.now()
               + LEAST(t.retry_delay * pg_catalog.power(2, LEAST(t.consecutive_failures, 20)),
                       interval '1 hour')
               * (0.5 + pg_catalog.random() / 2)
           WHEN t.schedule_cron IS NULL THEN NULL
           ELSE distlock.cron_next(t.schedule_cron, pg_catalog.now())
       END
  FROM outcome o
 WHERE t.id = o.id
