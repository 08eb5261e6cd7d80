-- params: integer
-- Task locks held by a backend whose transaction has been open longer than
-- the task's timeout ($1 minutes when it has none) without a committed
-- running claim: a claim inside a transaction that never ended.
SELECT b.task_id,
       b.pid,
       CASE WHEN b.application_name OPERATOR(pg_catalog.<>) '' THEN b.application_name
            ELSE 'backend ' OPERATOR(pg_catalog.||) b.pid::pg_catalog.text END,
       COALESCE(b.timeout, pg_catalog.make_interval(mins => $1))::pg_catalog.text
  FROM distlock.blocked_tasks b
 WHERE b.xact_start OPERATOR(pg_catalog.<)
       (pg_catalog.now() OPERATOR(pg_catalog.-) COALESCE(b.timeout, pg_catalog.make_interval(mins => $1)))
 ORDER BY b.task_id
