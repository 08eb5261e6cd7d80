#!/usr/bin/env bash
# What security_barrier costs the console's reads (issue 44, item 2: every
# view that filters by scope is a barrier). One preloaded cluster, one
# database with 500 tasks and 50,000 jobs in 10 queues (20,000 completed,
# 1,000 processing); each read in benches/security_barrier/ runs 40 times as
# the views are and again with their barrier switched off, alternated ROUNDS
# times. Prints the mean latency of each read both ways.
#   benches/security_barrier.sh [ROUNDS]      (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
port=55533
dir=${BENCH_DIR:-/tmp/pg_distlock_bench}/security_barrier
# shellcheck source=lib.sh
source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
sql() { "$bin/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d bench "$@"; }
sql -c "
  INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
  SELECT 'task-' || g, 'etl', '*/5 * * * *', now() + (g || ' seconds')::interval FROM generate_series(1, 500) g;
  SELECT count(*) FROM (SELECT distlock.enqueue_tasks('job-' || (g % 7), array_fill('{}'::jsonb, ARRAY[5000]), now(), 0, 5, 'q' || g)
                          FROM generate_series(1, 10) g) x;" >/dev/null
sql -c "DO \$\$ BEGIN
  FOR i IN 1..20 LOOP
    PERFORM distlock.complete_task(t.task_id, 'w') FROM distlock.consume_tasks(1000, 'w', '1 hour') t;
  END LOOP;
  PERFORM count(*) FROM distlock.consume_tasks(1000, 'w', '1 hour');
END \$\$" -c "VACUUM ANALYZE"
views=$(sql -c "SELECT string_agg(c.oid::regclass::text, ' ') FROM pg_class c
                 WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'v'
                   AND 'security_barrier=true' = ANY (c.reloptions)")
barrier() { for v in $views; do sql -c "ALTER VIEW $v SET (security_barrier = $1)"; done; }
out=$(mktemp)
for round in $(seq 1 "$rounds"); do
  for on in true false; do
    barrier "$on"
    for read in benches/security_barrier/*.sql; do
      ms=$("$bin/pgbench" -n -t 40 -c 1 -f "$read" -h 127.0.0.1 -p "$port" -U postgres bench 2>/dev/null \
           | awk '/latency average/ {print $4}')
      echo "$(basename "$read" .sql) $on $ms" >>"$out"
    done
  done
done
barrier true
echo "security_barrier on the console's reads, $(date +%F); ms per read (mean of $rounds rounds x 40)"
awk '{ s[$1, $2] += $3; n[$1, $2]++; reads[$1] = 1 }
     END { printf "%-12s %10s %10s %8s\n", "read", "barrier", "none", "ratio"
           for (r in reads) printf "%-12s %10.2f %10.2f %7.2fx\n", r, s[r, "true"] / n[r, "true"], s[r, "false"] / n[r, "false"],
                                   (s[r, "true"] / n[r, "true"]) / (s[r, "false"] / n[r, "false"]) }' "$out" | sort
rm -f "$out"
