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
# same fleet also runs against pgmq in the same cluster, with the ratio;
# likewise against pgque with PGQUE_SQL naming its sql/pgque.sql (each
# consumer a cooperative subconsumer taking whole tick batches, a ticker
# every 50 ms with pgque's low-latency settings; no rotation or maint in
# runs this short).
# autovacuum_naptime is 10s, as docs/operations.md recommends for a queue
# moving thousands of jobs a second (BENCH_AUTOVACUUM_NAPTIME=1min for
# PostgreSQL's default); the same for every system measured.
#   BENCH_SECONDS=10 BENCH_FLEETS="16 64" benches/queue_fleet.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-10}
fleets=${BENCH_FLEETS:-16 64}
dir=${BENCH_DIR:-/tmp/pg_distlock_fleet_bench}
port=${BENCH_PORT:-55533}
naptime=${BENCH_AUTOVACUUM_NAPTIME:-10s}

source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
psql_on "$port" -c "ALTER SYSTEM SET autovacuum_naptime = '$naptime'" -c "SELECT pg_reload_conf()" >/dev/null
install_peers "$port"

pgbench_on() { "$bin/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres "$@" bench 2>&1; }
# Completed jobs: archived, or left in place by fleet_in_place.sql.
completed() {
  psql_on "$port" -c "SELECT (SELECT count(*) FROM distlock.completed_jobs)
                           + (SELECT count(*) FROM distlock.task_queue WHERE status = 'completed')"
}
archived_by_pgmq() { psql_on "$port" -c "SELECT count(*) FROM pgmq.a_bench"; }
finished_by_pgque() { psql_on "$port" -c "SELECT coalesce(sum(n), 0) FROM public.pgque_done"; }
# A fresh pgque queue 'bench' with consumer 'bench' and $1 subconsumers
# sub_0.., each with a row counting the events it finished.
pgque_queue() {
  local subconsumers=$1
  pgque_bench_queue "$port" "$subconsumers"
  psql_on "$port" -c "DROP TABLE IF EXISTS public.pgque_done" \
    -c "CREATE TABLE public.pgque_done (client int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)" \
    -c "INSERT INTO public.pgque_done (client) SELECT g FROM generate_series(0, $subconsumers - 1) g" >/dev/null
}
# Dead row versions in the tables of schema $1.
dead_in_schema() {
  psql_on "$port" -c "SELECT coalesce(sum(pg_stat_get_dead_tuples(c.oid)), 0) FROM pg_class c
                        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '$1' AND c.relkind = 'r'"
}

rows=()
# run W SCRIPT WAIT [pgmq|pgque]: jobs/s, producer ms per batch, dead row versions per job.
run() {
  local consumers=$1 script=$2 wait=$3 peer=${4:-} before after started ran produced dead ticker=
  local producer_script=fleet_produce table=distlock.task_queue count=completed
  if [ "$peer" = pgmq ]; then
    producer_script=peer_pgmq_produce table=pgmq.q_bench count=archived_by_pgmq
    psql_on "$port" -c "TRUNCATE pgmq.q_bench, pgmq.a_bench" >/dev/null
  fi
  if [ "$peer" = pgque ]; then
    producer_script=peer_pgque_produce table= count=finished_by_pgque
    pgque_queue "$consumers"
  fi
  psql_on "$port" -c "TRUNCATE distlock.task_queue, distlock.completed_jobs" >/dev/null
  [ -z "$table" ] || psql_on "$port" -c "VACUUM ANALYZE $table" \
    -c "SELECT pg_stat_reset_single_table_counters('$table'::regclass)" >/dev/null
  # Every point starts right after a checkpoint: at these rates the WAL
  # brings one every 12-25 s, and a point that began just before one
  # wrote a full page image for every page it touched first.
  psql_on "$port" -c "CHECKPOINT" >/dev/null
  pgbench_on -c 1 -T $((seconds + 2)) -r -f "benches/pgbench/$producer_script.sql" >"$dir/producer.log" &
  local producer=$!
  if [ "$peer" = pgque ]; then
    pgbench_on -c 1 -T $((seconds + 2)) -f benches/pgbench/peer_pgque_ticker.sql >"$dir/ticker.log" &
    ticker=$!
  fi
  sleep 2
  before=$($count)
  # pgbench lets each client end the script it is in when time is up (a
  # pgque batch of thousands of events sleeps seconds): divide by the time
  # the consumers really ran.
  started=$(date +%s.%N)
  pgbench_on -c "$consumers" -j 2 -T "$seconds" -f "benches/pgbench/$script.sql" \
    -D wait="$wait" -D ids='{}' -D att='{}' >"$dir/consumers.log"
  after=$($count)
  ran=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
  wait "$producer" $ticker
  if [ -n "$table" ]; then
    dead=$(psql_on "$port" -c "SELECT pg_stat_get_dead_tuples('$table'::regclass)")
  else
    dead=$(dead_in_schema pgque)
  fi
  produced=$(awk '/enqueue_task|send_batch/ { print $1; exit }' "$dir/producer.log")
  echo "$(awk -v n=$((after - before)) -v t="$ran" 'BEGIN { printf "%.0f", n / t }') ${produced:--} $(awk -v d="$dead" -v n="$after" 'BEGIN { printf "%.2f", n ? d / n : 0 }')"
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
  if [ -n "${PGQUE_SQL:-}" ]; then
    read -r rate lat dead < <(run "$w" peer_pgque_consume 0 pgque)
    row "$w consumers, pgque tick batches (cooperative, polling)" "$rate" "$lat" "$dead"
    row "$w consumers, pg_distlock p_wait against pgque" "$(awk -v a="$archived" -v b="$rate" 'BEGIN { printf "%.2fx", b ? a / b : 0 }')" "" ""
  fi
done

echo
echo "pg_distlock fleet benchmark, $(date -u +%Y-%m-%d)"
bench_machine "autovacuum_naptime $naptime"
echo
printf '%-58s %10s %14s %12s\n' "workload" "jobs/s" "enqueue ms/128" "dead/job"
printf '%s\n' "${rows[@]}"
