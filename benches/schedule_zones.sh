#!/usr/bin/env bash
# What time zones cost the scheduler (issue 48): ratios measured in one run on
# one preloaded cluster.
# 1. distlock.cron_next over a year of start times, one backend, best of 3:
#    in UTC (the two-argument function) against the same expressions on the
#    wall clock of Europe/Berlin and America/New_York (and of 'UTC' named).
# 2. The claim + release cycle of a task under 8 clients (pgbench,
#    claim_release_ext: the release computes the next slot), in two
#    databases alternated ROUNDS times: 1000 tasks in UTC, and the same 1000
#    in America/New_York. The issue asks the zoned cycle within 5 %.
#   benches/schedule_zones.sh [ROUNDS]   (default 4; BENCH_SECONDS per point, default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}
seconds=${BENCH_SECONDS:-8}
port=55532
dir=${BENCH_DIR:-/tmp/pg_distlock_bench}/zones
# shellcheck source=lib.sh
source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
sql() { "$bin/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d "$1" -c "$2"; }

sql postgres "CREATE DATABASE zoned"
sql zoned "CREATE EXTENSION pg_distlock"
sql bench "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron)
           SELECT 'task-' || g, 'bench', '*/5 * * * *' FROM generate_series(1, 1000) g"
sql zoned "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone)
           SELECT 'task-' || g, 'bench', '*/5 * * * *', 'America/New_York' FROM generate_series(1, 1000) g"

# Milliseconds for `expr` over 105,121 start times (every 5 minutes of 2026), best of 3.
best_ms() {
  sql bench "CREATE OR REPLACE FUNCTION pg_temp.best(q text) RETURNS float8 LANGUAGE plpgsql AS \$\$
               DECLARE best float8 := 'infinity'; t0 timestamptz; BEGIN
                 FOR i IN 1..3 LOOP
                   t0 := clock_timestamp(); EXECUTE q;
                   best := least(best, extract(epoch FROM clock_timestamp() - t0) * 1000);
                 END LOOP; RETURN best; END \$\$;
             SELECT round(pg_temp.best(\$q\$SELECT count($1) FROM generate_series(timestamptz '2026-01-01 00:00+00',
                                           timestamptz '2027-01-01 00:00+00', interval '5 minutes') t\$q\$)::numeric, 1)"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo "== cron_next over 105,121 start times, one backend (ms, best of 3; ratio: zoned / UTC)"
for expr in "0 3 * * *" "*/5 * * * *" "@hourly"; do
  utc=$(best_ms "distlock.cron_next('$expr', t)")
  for zone in UTC Europe/Berlin America/New_York; do
    zoned=$(best_ms "distlock.cron_next('$expr', t, '$zone')")
    printf '%-14s %-18s UTC %8s ms, zoned %8s ms, %s\n' "'$expr'" "$zone" "$utc" "$zoned" "$(ratio "$zoned" "$utc")"
  done
done

tps() {  # tps DB
  "$bin/pgbench" -n -M prepared -c 8 -j 2 -T "$seconds" -f benches/pgbench/claim_release_ext.sql \
    -h 127.0.0.1 -p "$port" -U postgres "$1" 2>/dev/null | awk '/^tps = / { printf "%.0f", $3 }'
}
echo "== claim + release of a task, 8 clients (tps; ratio: zoned / UTC)"
for i in $(seq 1 "$rounds"); do
  # Alternating which goes first: both logs grow as a run goes on.
  if [ $((i % 2)) = 1 ]; then
    utc=$(tps bench); zoned=$(tps zoned)
  else
    zoned=$(tps zoned); utc=$(tps bench)
  fi
  printf 'round %d: UTC %8d tps, America/New_York %8d tps, %s\n' "$i" "$utc" "$zoned" "$(ratio "$zoned" "$utc")"
done
