#!/usr/bin/env bash
# The Python client end to end: QueueWorker (no-op handler, one process)
# against a hand-written psycopg loop of consume_task + complete_task with
# the same number of threads, on a throwaway cluster with fsync and
# synchronous_commit on, BENCH_ROUNDS rounds (default 3) alternating the
# two, medians reported. The client is installed from the checkout (with
# psycopg[binary], as its README installs it) into a
# throwaway virtualenv. Writes $BENCH_DIR/queue_python.csv; measurements,
# not pass/fail tests.
#   BENCH_SECONDS=8 BENCH_ROUNDS=3 benches/queue_python.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-8}
rounds=${BENCH_ROUNDS:-3}
dir=${BENCH_DIR:-/tmp/pg_distlock_python_bench}
port=55534
bin=${PGBIN:-/usr/lib/postgresql/15/bin}

source benches/lib.sh
start_preloaded_bench_cluster "$dir" "$port"
bench_client_venv "$dir" binary

csv="$dir/queue_python.csv"
echo "concurrency,prefetch,hand_written,queue_worker,lowest_ratio,highest_ratio" >"$csv"
"$dir/venv/bin/python" benches/queue_python.py "host=127.0.0.1 port=$port user=postgres dbname=bench" "$seconds" "$rounds" >>"$csv"

echo
echo "pg_distlock Python client benchmark, $(date -u +%Y-%m-%d)"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "postgres: $("$bin/postgres" --version), fsync on, synchronous_commit on; $("$dir/venv/bin/python" --version), psycopg $("$dir/venv/bin/python" -c 'import psycopg; print(psycopg.__version__)')"
echo
echo "median of $rounds rounds of ${seconds}s each, the two loops alternating; rounds: the lowest and highest ratio of one round"
printf '%-52s %14s %14s %9s %14s\n' "benchmark (jobs/s, no-op handler, one process)" "hand-written" "QueueWorker" "ratio" "rounds"
tail -n +2 "$csv" | while IFS=, read -r concurrency prefetch baseline ours lowest highest; do
  printf '%-52s %14s %14s %9s %14s\n' "concurrency $concurrency, prefetch $prefetch" "$baseline" "$ours" \
    "$(awk -v a="$ours" -v b="$baseline" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')" "${lowest}-${highest}x"
done
