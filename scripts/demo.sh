#!/usr/bin/env bash
# The reference scenario: 10 worker connections share 100 scheduled tasks,
# and each task runs exactly once for its due slot. Run twice: by psql
# sessions calling the SQL API, then by 10 Python processes using the
# client's TaskWorker (clients/python), each in a database of its own.
#
# Installs what is missing, builds and installs pg_distlock, starts a
# throwaway PostgreSQL 15 cluster on 127.0.0.1:${DEMO_PORT:-55632}, runs the
# workers, prints a summary, and stops the cluster (KEEP_CLUSTER=1 leaves it
# running for a look around). The Python client goes into a venv in
# ${DEMO_VENV:-/tmp/pg_distlock_demo_venv} ($PYTHON, default python3).
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

# Prints the summary of database $1 and whether each of its tasks ran
# exactly once, shared by more than one worker; fails otherwise.
summarize() {
  local db=$1 fleet=$2
  echo "== summary"
  "${psql[@]}" -d "$db" <<'SQL'
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

  local verdict
  verdict=$("${psql[@]}" -d "$db" -At -c "
    SELECT count(*) FILTER (WHERE runs = 1 AND completed = 1) = $tasks
           AND (SELECT count(DISTINCT worker_id) FROM distlock.task_execution_log) > 1
      FROM distlock.task_stats")
  if [ "$verdict" = t ]; then
    echo "OK: $tasks tasks, each run exactly once, shared by $workers $fleet."
  else
    echo "FAILED: some task did not run exactly once (see the summary above)." >&2
    exit 1
  fi
}

summarize demo workers

echo "== the same with the Python client: $workers TaskWorker processes, $tasks due tasks"
venv=${DEMO_VENV:-/tmp/pg_distlock_demo_venv}
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "./clients/python[binary]"

"${psql[@]}" -d postgres -c "CREATE DATABASE demo_py"
"${psql[@]}" -d demo_py <<SQL
CREATE EXTENSION pg_distlock;
INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
SELECT 'nightly-report-' || i, 'report', '0 0 1 1 *', now()
  FROM generate_series(1, $tasks) AS i;
-- Each run records its result with its fencing token; the trigger refuses
-- a token that is not the current claim's, so a stale worker cannot write.
CREATE TABLE demo_results (task_id int, fencing_token bigint, worker_id text);
CREATE FUNCTION demo_fence() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF NOT distlock.check_fencing_token(NEW.task_id, NEW.fencing_token) THEN
    RAISE EXCEPTION 'stale writer: token % is not current for task %', NEW.fencing_token, NEW.task_id
      USING ERRCODE = '40001';
  END IF;
  RETURN NEW;
END \$\$;
CREATE TRIGGER demo_fence BEFORE INSERT ON demo_results FOR EACH ROW EXECUTE FUNCTION demo_fence();
SQL
for w in $(seq 1 "$workers"); do
  "$venv/bin/python" clients/python/examples/demo_worker.py \
    "host=127.0.0.1 port=$port user=postgres dbname=demo_py" "python-$w" &
done
wait
summarize demo_py "Python workers"
results=$("${psql[@]}" -d demo_py -At -c "SELECT count(*) = $tasks AND count(DISTINCT task_id) = $tasks FROM demo_results")
if [ "$results" = t ]; then
  echo "OK: $tasks fenced results, one per task."
else
  echo "FAILED: the fenced results are not one per task." >&2
  exit 1
fi
