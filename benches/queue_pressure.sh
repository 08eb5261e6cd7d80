#!/usr/bin/env bash
# The queue while something holds a snapshot (issue 46): Phase A of
# hardbyte/postgresql-job-queue-benchmarking, a producer keeping ~4,000
# jobs of ~256 bytes ready (batches of 128, its ready count kept on the
# client side), W workers (default 16) each claiming up to 64 and working
# 1 ms per job; fsync and synchronous_commit on. Each system runs a 10 s
# warm-up, an unpressured phase (60 s), a phase during which one session
# holds `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM
# pg_class;` open on the queue's database (2 minutes; 10 with
# BENCH_PRESSURE_LONG=1), and 60 s after the snapshot is released.
# Systems: pg_distlock's settle_and_consume_tasks (batch 64, p_wait);
# pgmq read + archive with PGMQ_SQL naming pgmq's
# pgmq-extension/sql/pgmq.sql; PgQue with PGQUE_SQL naming its
# sql/pgque.sql (cooperative subconsumers taking tick batches, the ticker
# every 50 ms, and the maintenance pgque.start() schedules: pgque.maint(),
# whose rotation step 1 empties the oldest event table with TRUNCATE, and
# maint_retry_events() every 30 s, maint_rotate_tables_step2() every 10 s;
# the queue's rotation period BENCH_PGQUE_ROTATION, default 1 minute, so
# that tables rotate within a run: PgQue's own default, 2 hours, never
# would). Nothing here fetches or builds the peers.
# Per system, per window (BENCH_WINDOW_SECONDS, 10): jobs/s and the ratio
# to its own unpressured median, dead tuples in its schema, WAL bytes and
# server CPU (every process of the cluster, from /proc) per job; at the
# end table and index size. $BENCH_DIR/pressure_windows.csv,
# pressure_summary.csv and pressure.png (BENCH_UPDATE_PLOT=1: the committed
# benches/queue_pressure.png). BENCH_STATEMENTS=1 preloads
# pg_stat_statements (track = all, so the extension's own statements are
# counted) and writes each phase's top statements to pressure_statements.csv:
# it costs throughput, so not for the figures. BENCH_PERF=1 records a
# system-wide perf profile (99 Hz, call graphs) of every window into
# $BENCH_DIR/perf/SYSTEM-PHASE-T.data and prints the top symbols of each
# phase (benches/perf_top.sh). BENCH_SYSTEMS="pgque pgmq"
# runs only those (their SQL still named by PGMQ_SQL, PGQUE_SQL).
# Measurements, not pass/fail tests.
#   PGMQ_SQL=... PGQUE_SQL=... benches/queue_pressure.sh
#   BENCH_PRESSURE_SECONDS=30 BENCH_UNPRESSURED_SECONDS=20 BENCH_AFTER_SECONDS=20 \
#     BENCH_WINDOW_SECONDS=5 benches/queue_pressure.sh        (a smoke test)
set -euo pipefail
cd "$(dirname "$0")/.."

held=${BENCH_PRESSURE_SECONDS:-120}
[ "${BENCH_PRESSURE_LONG:-0}" = 1 ] && held=600
unpressured=${BENCH_UNPRESSURED_SECONDS:-60}
after=${BENCH_AFTER_SECONDS:-60}
warmup=${BENCH_WARMUP_SECONDS:-10}
window=${BENCH_WINDOW_SECONDS:-10}
workers=${BENCH_WORKERS:-16}
rotation=${BENCH_PGQUE_ROTATION:-1 minute}
dir=${BENCH_DIR:-/tmp/pg_distlock_pressure_bench}
port=${BENCH_PORT:-55535}
naptime=${BENCH_AUTOVACUUM_NAPTIME:-10s}

source benches/lib.sh
preload=pg_distlock
[ "${BENCH_STATEMENTS:-0}" = 1 ] && preload=pg_distlock,pg_stat_statements
start_preloaded_bench_cluster "$dir" "$port" "$preload"
psql_on "$port" -c "ALTER SYSTEM SET autovacuum_naptime = '$naptime'" -c "SELECT pg_reload_conf()" >/dev/null
statements=()
if [ "${BENCH_STATEMENTS:-0}" = 1 ]; then
  psql_on "$port" -c "ALTER SYSTEM SET pg_stat_statements.track = 'all'" -c "SELECT pg_reload_conf()" \
    -c "CREATE EXTENSION pg_stat_statements" >/dev/null
  statements=(--statements "$dir/pressure_statements.csv")
fi
profiles=()
if [ "${BENCH_PERF:-0}" = 1 ]; then
  command -v perf >/dev/null || { echo "BENCH_PERF=1 needs perf (Debian: linux-perf)" >&2; exit 1; }
  rm -rf "$dir/perf"
  profiles=(--perf "$dir/perf")
fi
install_peers "$port"
bench_client_venv "$dir" binary matplotlib

systems=(pg_distlock)
[ -z "${PGMQ_SQL:-}" ] || systems+=(pgmq)
[ -z "${PGQUE_SQL:-}" ] || systems+=(pgque)
# BENCH_SYSTEMS="pgque" runs only those of them.
[ -z "${BENCH_SYSTEMS:-}" ] || read -r -a systems <<<"$BENCH_SYSTEMS"
rm -f "$dir"/pressure_windows.csv "$dir"/pressure_summary.csv "$dir"/pressure_statements.csv

for system in "${systems[@]}"; do
  echo "== $system: ${warmup}s warm-up, ${unpressured}s unpressured, ${held}s held snapshot, ${after}s after; $workers workers"
  # Every system starts from empty, vacuumed tables, right after a checkpoint.
  psql_on "$port" -c "TRUNCATE distlock.task_queue, distlock.completed_jobs" >/dev/null
  [ -z "${PGMQ_SQL:-}" ] || psql_on "$port" -c "TRUNCATE pgmq.q_bench, pgmq.a_bench" >/dev/null
  [ "$system" != pgque ] || pgque_bench_queue "$port" "$workers" "$rotation"
  psql_on "$port" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
  "$dir/venv/bin/python" benches/queue_pressure.py "host=127.0.0.1 port=$port user=postgres dbname=bench" "$system" \
    --datadir "$dir/memory" --windows "$dir/pressure_windows.csv" --summary "$dir/pressure_summary.csv" \
    "${statements[@]}" "${profiles[@]}" --workers "$workers" --window "$window" --warmup "$warmup" \
    --unpressured "$unpressured" --held "$held" --after "$after"
done

echo
echo "pg_distlock pressure benchmark (issue 46), $(date -u +%Y-%m-%d)"
bench_machine "autovacuum_naptime $naptime, $workers workers, held snapshot ${held}s, windows of ${window}s"
echo
echo "jobs/s per window; ratio to the system's own unpressured median; held: first -> last, median, lowest"
column -s, -t <"$dir/pressure_summary.csv"
echo
echo "windows: $dir/pressure_windows.csv"
[ -z "${statements[*]}" ] || echo "statements: $dir/pressure_statements.csv"
if [ -n "${profiles[*]}" ]; then
  for system in "${systems[@]}"; do
    for phase in unpressured held after; do
      benches/perf_top.sh "$dir/perf" "$system-$phase" 25
    done
  done
fi
plot="$dir/pressure.png"
[ "${BENCH_UPDATE_PLOT:-0}" = 1 ] && plot=benches/queue_pressure.png
"$dir/venv/bin/python" benches/plot_pressure.py "$dir/pressure_windows.csv" "$plot" \
  "$(nproc) cores, PostgreSQL $("$bin/postgres" --version | awk '{ print $3 }'), $workers workers, held snapshot ${held}s, $(date -u +%Y-%m-%d)"
echo "plot: $plot"
