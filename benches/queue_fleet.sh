#!/usr/bin/env bash
# A fleet of consumers sharing a steady stream of jobs: one producer keeps
# ~4,000 jobs ready (batches of 128, ~256-byte payloads), W consumers each
# claim up to 64 and work 1 ms per job; fsync and synchronous_commit on.
# For each W: consumers waiting in the server (p_wait) against the same
# loop polling without waiting, and the one-commit-per-batch loop
# (settle_and_consume_tasks) waiting, and the waiting loop completing jobs
# in place (0.2.0's shape: the finished row stays in distlock.task_queue)
# rather than moving them to distlock.completed_jobs, and the one-transaction
# recipe holding row locks instead of leases; jobs/s, the producer's
# latency per batch, and dead row versions per job left in
# distlock.task_queue.
# Measurements, not pass/fail tests.
# With PGMQ_SQL naming pgmq's SQL install script (pgmq-extension/sql/pgmq.sql
# of a pgmq checkout you provide; nothing here fetches or builds it), the
# same fleet also runs against pgmq in the same cluster, with the ratio.
#   BENCH_SECONDS=10 BENCH_FLEETS="16 64" benches/queue_fleet.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-10}
fleets=${BENCH_FLEETS:-16 64}
dir=${BENCH_DIR:-/tmp/pg_distlock_fleet_bench}
port=55533

source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
if [ -n "${PGMQ_SQL:-}" ]; then
  psql_on "$port" -f "$PGMQ_SQL" >/dev/null
  psql_on "$port" -c "SELECT pgmq.create('bench')" >/dev/null
fi

pgbench_on() { "$bin/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres "$@" bench 2>&1; }
# Completed jobs: archived, or left in place by fleet_in_place.sql.
completed() {
  psql_on "$port" -c "SELECT (SELECT count(*) FROM distlock.completed_jobs)
                           + (SELECT count(*) FROM distlock.task_queue WHERE status = 'completed')"
}
archived_by_pgmq() { psql_on "$port" -c "SELECT count(*) FROM pgmq.a_bench"; }

rows=()
# run W SCRIPT WAIT [pgmq]: jobs/s, producer ms per batch, dead row versions per job.
run() {
  local consumers=$1 script=$2 wait=$3 peer=${4:-} before after produced dead
  local producer_script=fleet_produce table=distlock.task_queue count=completed
  if [ "$peer" = pgmq ]; then
    producer_script=peer_pgmq_produce table=pgmq.q_bench count=archived_by_pgmq
    psql_on "$port" -c "TRUNCATE pgmq.q_bench, pgmq.a_bench" >/dev/null
  fi
  psql_on "$port" -c "TRUNCATE distlock.task_queue, distlock.completed_jobs" -c "VACUUM ANALYZE $table" \
    -c "SELECT pg_stat_reset_single_table_counters('$table'::regclass)" >/dev/null
  pgbench_on -c 1 -T $((seconds + 2)) -r -f "benches/pgbench/$producer_script.sql" >"$dir/producer.log" &
  local producer=$!
  sleep 2
  before=$($count)
  pgbench_on -c "$consumers" -j 2 -T "$seconds" -f "benches/pgbench/$script.sql" \
    -D wait="$wait" -D ids='{}' -D att='{}' >"$dir/consumers.log"
  after=$($count)
  wait "$producer"
  dead=$(psql_on "$port" -c "SELECT pg_stat_get_dead_tuples('$table'::regclass)")
  produced=$(awk '/enqueue_task|send_batch/ { print $1; exit }' "$dir/producer.log")
  echo "$(((after - before) / seconds)) ${produced:--} $(awk -v d="$dead" -v n="$after" 'BEGIN { printf "%.2f", n ? d / n : 0 }')"
}
row() { rows+=("$(printf '%-58s %10s %14s %12s' "$@")"); echo "  $*"; }

for w in $fleets; do
  echo "== $w consumers, ${seconds}s per point"
  read -r rate lat dead < <(run "$w" fleet_consume 0)
  row "$w consumers, batch 64, no wait (polling)" "$rate" "$lat" "$dead"
  read -r rate lat dead < <(run "$w" fleet_consume '1 second')
  row "$w consumers, batch 64, p_wait" "$rate" "$lat" "$dead"
  archived=$rate
  read -r rate lat dead < <(run "$w" fleet_fused '1 second')
  row "$w consumers, settle_and_consume_tasks 64, p_wait" "$rate" "$lat" "$dead"
  read -r rate lat dead < <(run "$w" fleet_in_place '1 second')
  row "$w consumers, batch 64, p_wait, completed in place" "$rate" "$lat" "$dead"
  row "$w consumers, archived against in place" "$(awk -v a="$archived" -v b="$rate" 'BEGIN { printf "%.2fx", b ? a / b : 0 }')" "" ""
  read -r rate lat dead < <(run "$w" fleet_row_lock 0)
  row "$w consumers, row locks held for the batch (no lease)" "$rate" "$lat" "$dead"
  if [ -n "${PGMQ_SQL:-}" ]; then
    read -r rate lat dead < <(run "$w" peer_pgmq_consume 0 pgmq)
    row "$w consumers, pgmq read 64 + archive (polling)" "$rate" "$lat" "$dead"
    row "$w consumers, pg_distlock p_wait against pgmq" "$(awk -v a="$archived" -v b="$rate" 'BEGIN { printf "%.2fx", b ? a / b : 0 }')" "" ""
  fi
done

echo
echo "pg_distlock fleet benchmark, $(date -u +%Y-%m-%d)"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "postgres: $("$bin/postgres" --version), fsync on, synchronous_commit on"
echo
printf '%-58s %10s %14s %12s\n' "workload" "jobs/s" "enqueue ms/128" "dead/job"
printf '%s\n' "${rows[@]}"
