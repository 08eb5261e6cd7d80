#!/usr/bin/env bash
# What the library guard costs (issue 44, item 6): every statement that
# writes a pg_distlock table first runs a statement trigger that compares the
# session's library with the installed SQL. Measured as ratios in one run on
# one preloaded cluster: two databases, one as installed and one with the
# guard triggers dropped, alternated ROUNDS times (which goes first alternating too) for the claim + release
# cycle of a task and the consume + complete cycle of a job, under 8 clients.
#   benches/guard.sh [ROUNDS]      (default 4; BENCH_SECONDS per point, default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}
seconds=${BENCH_SECONDS:-8}
port=55532
dir=${BENCH_DIR:-/tmp/pg_distlock_bench}/guard
# shellcheck source=lib.sh
source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"

"$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE unguarded"
"$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d unguarded -c "CREATE EXTENSION pg_distlock"
"$bin/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d unguarded -c "
  SELECT format('DROP TRIGGER library_guard ON %s', tgrelid::regclass) FROM pg_trigger WHERE tgname = 'library_guard'" \
  | "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d unguarded
for db in bench unguarded; do
  "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d "$db" -c "
    INSERT INTO distlock.scheduled_tasks (task_name, task_type) SELECT 'task-' || g, 'bench' FROM generate_series(1, 1000) g;
    SELECT distlock.enqueue_tasks('job', array_fill('{}'::jsonb, ARRAY[400000]));"
done

tps() {  # tps DB SCRIPT
  "$bin/pgbench" -n -M prepared -c 8 -j 2 -T "$seconds" -f "benches/pgbench/$2.sql" -D job=0 -D attempt=0 \
    -h 127.0.0.1 -p "$port" -U postgres "$1" 2>/dev/null | awk '/^tps = / { printf "%.0f", $3 }'
}
for script in claim_release_ext queue_ext; do
  for i in $(seq 1 "$rounds"); do
    # Alternating which goes first: both tables grow (or drain) as a run goes on.
    if [ $((i % 2)) = 1 ]; then
      with=$(tps bench "$script"); without=$(tps unguarded "$script")
    else
      without=$(tps unguarded "$script"); with=$(tps bench "$script")
    fi
    awk -v s="$script" -v i="$i" -v a="$with" -v b="$without" \
      'BEGIN { printf "%-20s round %d: guarded %8d tps, unguarded %8d tps, %.3fx\n", s, i, a, b, a / b }'
  done
done
echo "(a ratio is guarded tps / unguarded tps: 1.00 means the guard costs nothing measurable)"
