#!/usr/bin/env bash
# The web console's overview page on a large database: 100,000 scheduled
# tasks (each with a run in the log, 50 running), 1,000,000 completed jobs
# in the archive (spread over a week, ~6,000 in the last hour), 10,000
# pending and 100 dead jobs in 5 queues. Times GET / (every statement the
# overview makes, through uvicorn and the pool) against, in the same run,
# what a dashboard on the older views reads for the same numbers
# (distlock.task_stats and the jobs counted by queue and status from
# distlock.jobs). Measurements, not pass/fail tests.
#   BENCH_REQUESTS=50 benches/console.sh
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${BENCH_DIR:-/tmp/pg_distlock_console_bench}
port=55534
bin=${PGBIN:-/usr/lib/postgresql/15/bin}

source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
bench_client_venv "$dir" binary,console httpx

echo "filling the database (about a minute)"
psql_on "$port" <<'SQL'
INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, last_run_at, last_status)
SELECT 'task-' || i, 'bench', '*/5 * * * *', now() + (i % 300) * interval '1 second', now() - interval '5 minutes',
       CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END
  FROM generate_series(1, 100000) AS i;
INSERT INTO distlock.task_execution_log (task_id, worker_id, status, started_at, completed_at, fencing_token)
SELECT id, 'w', 'completed', now() - interval '5 minutes', now() - interval '4 minutes', nextval('distlock.fencing_token_seq')
  FROM distlock.scheduled_tasks;
INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, worker_id, created_at, started_at, completed_at,
                                     attempts, max_attempts, run_after, priority)
SELECT 1000000000 + i, 'q' || (i % 5), 'job', '{"n": 1}', 'w', t - interval '2 seconds', t - interval '1 second', t,
       1, 5, t - interval '2 seconds', 0
  FROM generate_series(1, 1000000) AS i, LATERAL (SELECT now() - i * interval '0.6 seconds' AS t) s;
SELECT distlock.enqueue_task('job', '{}', p_queue => 'q' || (i % 5)) FROM generate_series(1, 10000) AS i;
UPDATE distlock.task_queue SET status = 'dead', completed_at = now(), attempts = 5, last_error = 'boom'
 WHERE id IN (SELECT id FROM distlock.task_queue ORDER BY id LIMIT 100);
VACUUM ANALYZE;
SQL
# 50 running claims, held by one session for the whole run.
psql_on "$port" -c "SELECT count(*) FROM distlock.try_acquire_multiple_tasks('bench-worker', 50)" \
  -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
holder=$!
trap 'kill $holder 2>/dev/null || true; stop_bench_clusters' EXIT
for _ in $(seq 100); do
  [ "$(psql_on "$port" -c "SELECT count(*) FROM distlock.running_tasks")" = 50 ] && break
  sleep 0.1
done

"$dir/venv/bin/python" benches/console_overview.py "host=127.0.0.1 port=$port user=postgres dbname=bench" \
  "${BENCH_REQUESTS:-50}" | tee "$dir/console.txt"

echo
echo "pg_distlock console benchmark, $(date -u +%Y-%m-%d)"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "postgres: $("$bin/postgres" --version); $("$dir/venv/bin/python" --version)"
