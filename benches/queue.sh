#!/usr/bin/env bash
# The job queue against the hand-written FOR UPDATE SKIP LOCKED queue
# (benches/queue_baseline.sql), side by side in one run on a throwaway
# cluster with pg_distlock preloaded; fsync and synchronous_commit on.
# Prints throughput ratios and wake-up latencies, writes them to
# $BENCH_DIR/queue.csv and draws $BENCH_DIR/queue_throughput.png when
# matplotlib can be installed (BENCH_UPDATE_PLOT=1 draws the committed
# benches/queue_throughput.png instead). Measurements, not pass/fail tests.
# BENCH_LATENCY_ONLY=1: the latency and idle-CPU points alone.
# BENCH_LATENCY_SAMPLES=FILE: every wake-up latency sample ("mode ms" lines),
# so that the tail of several runs can be read together.
#   BENCH_SECONDS=8 benches/queue.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-8}
dir=${BENCH_DIR:-/tmp/pg_distlock_queue_bench}
port=55534
bin=${PGBIN:-/usr/lib/postgresql/15/bin}

source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
psql_on "$port" -f benches/queue_baseline.sql

# A queue of $2 pending jobs in table $1 (distlock.task_queue: also $3
# completed ones, in distlock.completed_jobs), vacuumed and analyzed as
# autovacuum would leave it.
fill() {
  local table=$1 pending=$2 completed=${3:-0}
  [ "$table" != distlock.task_queue ] || psql_on "$port" -c "
    TRUNCATE distlock.completed_jobs;
    INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, created_at, completed_at, attempts,
                                         max_attempts, run_after, priority)
    SELECT -g, 'default', 'bench', pg_catalog.jsonb_build_object('n', g), now() - interval '2 hours',
           now() - interval '1 hour', 1, 5, now() - interval '2 hours', 0
      FROM generate_series(1, $completed) g;" -c "VACUUM ANALYZE distlock.completed_jobs"
  psql_on "$port" -c "
    TRUNCATE $table;
    INSERT INTO $table (task_name, payload) SELECT 'bench', pg_catalog.jsonb_build_object('n', g)
      FROM generate_series(1, $pending) g;"
  psql_on "$port" -c "VACUUM ANALYZE $table"
}
# Jobs per second: each pgbench transaction of these scripts is one job (or 100).
tps() {
  local clients=$1 script=$2
  "$bin/pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "benches/pgbench/$script.sql" \
    -D job=0 -D attempt=0 -h 127.0.0.1 -p "$port" -U postgres bench 2>/dev/null | awk '/^tps = / { printf "%.0f", $3 }'
}
# Jobs per second completed by a script whose transactions may claim nothing.
completed_per_second() {
  local clients=$1 script=$2 before after
  before=$(psql_on "$port" -c "SELECT count(*) FROM distlock.completed_jobs")
  tps "$clients" "$script" >/dev/null
  after=$(psql_on "$port" -c "SELECT count(*) FROM distlock.completed_jobs")
  echo $(((after - before) / seconds))
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
rows=()
row() { rows+=("$(printf '%-52s %14s %14s %9s' "$1" "$2" "$3" "$4")"); echo "  $1: $2 -> $3 ($4)"; }
csv="$dir/queue.csv"
echo "consumers,hand_written,pg_distlock" >"$csv"

# BENCH_LATENCY_ONLY=1 runs the wake-up latency and idle CPU points alone
# (their tails need longer runs than the throughput points can afford).
if [ "${BENCH_LATENCY_ONLY:-0}" != 1 ]; then
echo "== consume + complete, one job per transaction each, ${seconds}s per point (jobs/s)"
# Enough jobs that no consumer finds the queue empty within one point.
jobs=$((seconds * 30000))
for clients in 1 2 4 8 16; do
  fill recipe.task_queue "$jobs"
  recipe=$(tps "$clients" queue_recipe)
  fill distlock.task_queue "$jobs"
  ours=$(tps "$clients" queue_ext)
  echo "$clients,$recipe,$ours" >>"$csv"
  row "consume + complete, $clients consumers" "$recipe" "$ours" "$(ratio "$ours" "$recipe")"
  [ "$clients" = 4 ] && ours_4=$ours recipe_4=$recipe
  [ "$clients" = 16 ] && ours_16=$ours recipe_16=$recipe
done
row "16 consumers against 4 (pg_distlock)" "$ours_4" "$ours_16" "$(ratio "$ours_16" "$ours_4")"

echo "== one commit per job: settle_and_consume_tasks, against the hand-written pair and the commit ceiling"
psql_on "$port" -c "CREATE TABLE IF NOT EXISTS public.commit_ceiling (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
                    INSERT INTO public.commit_ceiling (id) SELECT g FROM generate_series(0, 63) g ON CONFLICT DO NOTHING"
for clients in 4 16; do
  fill distlock.task_queue "$jobs"
  fused=$(tps "$clients" queue_fused_ext)
  ceiling=$(tps "$clients" commit_ceiling)
  recipe=$([ "$clients" = 4 ] && echo "$recipe_4" || echo "$recipe_16")
  row "one commit per job vs hand-written pair, $clients consumers" "$recipe" "$fused" "$(ratio "$fused" "$recipe")"
  row "one commit per job vs commit ceiling, $clients consumers" "$ceiling" "$fused" "$(ratio "$fused" "$ceiling")"
done

echo "== a queue limited to 4 processing jobs: 16 waiting consumers against 4 without a limit"
fill distlock.task_queue "$jobs"
unlimited=$(completed_per_second 4 queue_limited_wait_ext)
fill distlock.task_queue "$jobs"
psql_on "$port" -c "SELECT distlock.set_queue_limit('default', 4)"
limited=$(completed_per_second 16 queue_limited_wait_ext)
limited_polling=$(completed_per_second 16 queue_any_ext)
psql_on "$port" -c "SELECT distlock.set_queue_limit('default', NULL)"
row "limit 4, 16 waiting consumers vs 4 consumers, no limit" "$unlimited" "$limited" "$(ratio "$limited" "$unlimited")"
row "limit 4, 16 polling consumers vs 4 consumers, no limit" "$unlimited" "$limited_polling" "$(ratio "$limited_polling" "$unlimited")"

echo "== batches of 100: consume_tasks(100) + complete_tasks, 4 consumers"
fill distlock.task_queue $((seconds * 150000))
batch=$(( $(tps 4 queue_batch_ext) * 100 ))
row "batches of 100 against one by one, 4 consumers" "$ours_4" "$batch" "$(ratio "$batch" "$ours_4")"

echo "== a queue holding 1M completed jobs, 4 consumers"
fill distlock.task_queue "$jobs"
empty=$(tps 4 queue_ext)
fill distlock.task_queue "$jobs" 1000000
full=$(tps 4 queue_ext)
row "1M completed jobs archived against none, 4 consumers" "$empty" "$full" "$(ratio "$full" "$empty")"

fi
latency_consumers=16
echo "== enqueue-to-start latency: $latency_consumers idle consumers, one job every 10-50 ms"
psql_on "$port" -c "CREATE TABLE IF NOT EXISTS public.latency (mode text, ms float8)"
# $1 mode (wait or poll); each consumer records, for every job it gets, the
# time from the enqueue (its payload's t, taken just before the producer's
# commit) to holding the job.
consumers() {
  local mode=$1 pids=()
  for i in $(seq 1 "$latency_consumers"); do
    psql_on "$port" -c "
      DO \$\$
      DECLARE
        job record;
        stop_at timestamptz := clock_timestamp() + interval '$((seconds + 3)) seconds';
      BEGIN
        WHILE clock_timestamp() < stop_at LOOP
          IF '$mode' = 'wait' THEN
            SELECT * INTO job FROM distlock.consume_task('c-$i', p_wait => '1 second');
          ELSE
            SELECT * INTO job FROM distlock.consume_task('c-$i');
          END IF;
          IF job.task_id IS NOT NULL THEN
            INSERT INTO public.latency
            SELECT '$mode', extract(epoch FROM clock_timestamp() - (job.payload->>'t')::timestamptz) * 1000;
            PERFORM distlock.complete_task(job.task_id, 'c-$i', job.attempts);
          ELSIF '$mode' = 'poll' THEN
            PERFORM pg_sleep(0.1);
          END IF;
          COMMIT;
        END LOOP;
      END \$\$;" &
    pids+=($!)
  done
  sleep 1
  psql_on "$port" -c "
    DO \$\$
    DECLARE stop_at timestamptz := clock_timestamp() + interval '$seconds seconds';
    BEGIN
      WHILE clock_timestamp() < stop_at LOOP
        PERFORM distlock.enqueue_task('latency', pg_catalog.jsonb_build_object('t', clock_timestamp()));
        COMMIT;
        PERFORM pg_sleep(0.01 + random() * 0.04);
      END LOOP;
    END \$\$;"
  wait "${pids[@]}"
}
psql_on "$port" -c "TRUNCATE distlock.task_queue"
consumers wait
consumers poll
percentile() {
  psql_on "$port" -c "SELECT round(percentile_cont($2) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM public.latency WHERE mode = '$1'"
}
if [ -n "${BENCH_LATENCY_SAMPLES:-}" ]; then
  psql_on "$port" -F ' ' -c "SELECT mode, ms FROM public.latency" >"$BENCH_LATENCY_SAMPLES"
fi
for q in 0.5 0.99; do
  row "enqueue to start, ms, p$(awk -v q=$q 'BEGIN { print q * 100 }'): polling 100 ms vs waiting" \
    "$(percentile poll $q)" "$(percentile wait $q)" "$(ratio "$(percentile poll $q)" "$(percentile wait $q)")"
done

echo "== CPU of $latency_consumers consumers with nothing to do, ${seconds}s"
# Server CPU (user + system) of the consumers' backends while the queue is empty.
idle_cpu() {
  local mode=$1 pids=()
  for i in $(seq 1 "$latency_consumers"); do
    if [ "$mode" = wait ]; then
      psql_on "$port" -c "SELECT count(*) FROM distlock.consume_task('idle-$i', p_wait => '$((seconds + 2)) seconds')" >/dev/null &
    else
      psql_on "$port" -c "DO \$\$ BEGIN FOR n IN 1..$((seconds * 10 + 20)) LOOP PERFORM distlock.consume_task('idle-$i'); PERFORM pg_sleep(0.1); END LOOP; END \$\$" >/dev/null &
    fi
    pids+=($!)
  done
  sleep 1
  local backends
  backends=$(psql_on "$port" -c "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE application_name = 'psql' AND query LIKE '%idle-%' AND pid <> pg_backend_pid()")
  ticks() { local t=0; for b in $backends; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$b/stat" 2>/dev/null || echo 0))); done; echo "$t"; }
  local before after
  before=$(ticks); sleep "$seconds"; after=$(ticks)
  wait "${pids[@]}"
  # clock ticks (1/100 s) over the whole window, as a share of one core
  awk -v t=$((after - before)) -v s="$seconds" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f%%", 100 * t / hz / s }'
}
row "CPU of $latency_consumers idle consumers (% of one core): polling vs waiting" "$(idle_cpu poll)" "$(idle_cpu wait)" "-"

echo
echo "pg_distlock job-queue benchmark, $(date -u +%Y-%m-%d)"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "postgres: $("$bin/postgres" --version), fsync on, synchronous_commit on, pgbench -M prepared"
echo
printf '%-52s %14s %14s %9s\n' "benchmark (jobs/s)" "baseline" "pg_distlock" "ratio"
printf '%s\n' "${rows[@]}"
echo
# The plot needs matplotlib, from PyPI, in a throwaway virtualenv.
if [ "${BENCH_LATENCY_ONLY:-0}" != 1 ] && python3 -m venv "$dir/venv" >/dev/null 2>&1 \
   && "$dir/venv/bin/pip" install -q matplotlib >/dev/null 2>&1; then
  plot="$dir/queue_throughput.png"
  [ "${BENCH_UPDATE_PLOT:-0}" = 1 ] && plot=benches/queue_throughput.png
  "$dir/venv/bin/python" benches/plot_queue.py "$csv" "$plot" \
    "$(nproc) cores, PostgreSQL 15, fsync and synchronous_commit on, $(date -u +%Y-%m-%d)"
  echo "plot: $plot"
else
  echo "plot: skipped (matplotlib could not be installed)"
fi
echo "Baseline: benches/queue_baseline.sql and benches/pgbench/queue_recipe.sql, the hand-written"
echo "SKIP LOCKED claim and completing UPDATE. pg_distlock: consume_task + complete_task(id, worker,"
echo "attempt), each its own transaction, as in benches/pgbench/queue_ext.sql. One commit per job:"
echo "benches/pgbench/queue_fused_ext.sql; commit ceiling: benches/pgbench/commit_ceiling.sql (one row"
echo "updated per transaction). Limits: benches/pgbench/queue_limited_wait_ext.sql (p_wait) and"
echo "queue_any_ext.sql (no wait), jobs counted by completed rows."
