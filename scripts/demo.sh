#!/usr/bin/env bash
# The reference scenario: 10 worker connections share 100 scheduled tasks,
# and each task runs exactly once for its due slot.
#
# Installs what is missing, builds and installs pg_distlock, starts a
# throwaway PostgreSQL 15 cluster on 127.0.0.1:${DEMO_PORT:-55632}, runs the
# workers as psql sessions, prints a summary, and stops the cluster
# (KEEP_CLUSTER=1 leaves it running for a look around).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "== building and installing pg_distlock (release)"
scripts/install.sh

dir=${DEMO_DIR:-/tmp/pg_distlock_demo}
port=${DEMO_PORT:-55632}
workers=10
tasks=100
psql=(/usr/lib/postgresql/15/bin/psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres)

scripts/cluster.sh stop "$dir"
rm -rf "$dir"
scripts/cluster.sh start "$dir" "$port"
[ "${KEEP_CLUSTER:-0}" = 1 ] || trap 'scripts/cluster.sh stop "$dir"' EXIT

"${psql[@]}" -d postgres -c "CREATE DATABASE demo"
"${psql[@]}" -d demo <<SQL
CREATE EXTENSION pg_distlock;
-- 100 tasks that run once a year, all due now.
INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
SELECT 'nightly-report-' || i, 'report', '0 0 1 1 *', now()
  FROM generate_series(1, $tasks) AS i;
SQL

echo "== $workers workers claiming $tasks due tasks"
for w in $(seq 1 "$workers"); do
  # Each worker: claim the earliest due task, do the work, release, commit;
  # stop when nothing is due. The worker id is the session's application_name.
  PGAPPNAME="worker-$w" "${psql[@]}" -d demo -c "
    DO \$\$
    DECLARE
      claim record;
      me text := current_setting('application_name');
    BEGIN
      LOOP
        SELECT * INTO claim FROM distlock.worker_fetch_and_execute_task(me);
        EXIT WHEN NOT claim.acquired;
        PERFORM pg_sleep(0.01 + random() * 0.02);  -- the task's real work
        PERFORM distlock.release_task_lock(claim.task_id, me, 'completed');
        COMMIT;
      END LOOP;
    END
    \$\$;" &
done
wait

echo "== summary"
"${psql[@]}" -d demo <<'SQL'
\pset footer off
SELECT worker_id, count(*) AS tasks_run
  FROM distlock.task_execution_log GROUP BY worker_id ORDER BY worker_id;
SELECT count(*)                                AS tasks,
       sum(runs)                               AS runs,
       count(*) FILTER (WHERE completed = 1 AND runs = 1) AS ran_exactly_once,
       max(runs)                               AS most_runs_of_one_task,
       min(next_run_at)                        AS next_due
  FROM distlock.task_stats;
SQL

verdict=$("${psql[@]}" -d demo -At -c "
  SELECT count(*) FILTER (WHERE runs = 1 AND completed = 1) = $tasks
         AND (SELECT count(DISTINCT worker_id) FROM distlock.task_execution_log) > 1
    FROM distlock.task_stats")
if [ "$verdict" = t ]; then
  echo "OK: $tasks tasks, each run exactly once, shared by $workers workers."
else
  echo "FAILED: some task did not run exactly once (see the summary above)." >&2
  exit 1
fi
