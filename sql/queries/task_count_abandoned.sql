-- params: integer, bigint
-- Counts $2 runs of task $1 as abandoned: claims that a lease-mode claim
-- superseded (their lease ran out, or their holder was gone) ended without
-- a release, and metrics alert on abandoned runs.
UPDATE distlock.scheduled_tasks
   SET runs_abandoned = runs_abandoned OPERATOR(pg_catalog.+) $2
 WHERE id OPERATOR(pg_catalog.=) $1
