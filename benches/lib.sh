# Sourced by the benchmark scripts: throwaway clusters with production
# durability (fsync and synchronous_commit on), each holding a database
# "bench" with pg_distlock created, stopped again when the script exits.

bin=${PGBIN:-/usr/lib/postgresql/15/bin}
bench_clusters=()

# psql on database bench of the cluster on port $1.
psql_on() { local port=$1; shift; "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d bench "$@"; }

stop_bench_clusters() {
  local cluster
  for cluster in "${bench_clusters[@]}"; do scripts/cluster.sh stop "$cluster"; done
}

# start_bench_clusters DIR NAME:PORT:PRELOAD...  (PRELOAD may be empty)
start_bench_clusters() {
  local dir=$1 spec name port preload
  shift
  for spec in "$@"; do
    IFS=: read -r name port preload <<<"$spec"
    bench_clusters+=("$dir/$name")
  done
  stop_bench_clusters
  rm -rf "${bench_clusters[@]}"
  mkdir -p "$dir"
  trap stop_bench_clusters EXIT
  for spec in "$@"; do
    IFS=: read -r name port preload <<<"$spec"
    CLUSTER_EXTRA_CONF="fsync = on
synchronous_commit = on" scripts/cluster.sh start "$dir/$name" "$port" "$preload"
    "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE bench"
    psql_on "$port" -c "CREATE EXTENSION pg_distlock"
  done
}

# bench_client_venv DIR EXTRAS [PACKAGE...]: a virtualenv DIR/venv with the
# Python client of this checkout and its EXTRAS (and PACKAGEs) installed.
bench_client_venv() {
  local dir=$1 extras=$2
  shift 2
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "./clients/python[$extras]" "$@"
}

# The queue benchmarks' setup: the toolchain, this checkout installed into
# PostgreSQL $bin (unless BENCH_INSTALL=0), and one cluster "memory" on port $2 with pg_distlock
# preloaded (or the comma-separated libraries $3), under directory $1.
start_preloaded_bench_cluster() {
  local dir=$1 port=$2 preload=${3:-pg_distlock}
  scripts/setup.sh
  # benches/compare.sh installs the build under test itself.
  [ "${BENCH_INSTALL:-1}" = 0 ] || PG_CONFIG="$bin/pg_config" scripts/install.sh >/dev/null 2>&1
  start_bench_clusters "$dir" "memory:$port:$preload"
}

# The peers' SQL, when the runner names it, into database bench on port
# $1: pgmq's pgmq-extension/sql/pgmq.sql (PGMQ_SQL) with a queue 'bench',
# PgQue's sql/pgque.sql (PGQUE_SQL). Nothing here fetches or builds them.
install_peers() {
  local port=$1
  if [ -n "${PGMQ_SQL:-}" ]; then
    psql_on "$port" -f "$PGMQ_SQL" >/dev/null
    psql_on "$port" -c "SELECT pgmq.create('bench')" >/dev/null
  fi
  if [ -n "${PGQUE_SQL:-}" ]; then
    psql_on "$port" -f "$PGQUE_SQL" >/dev/null 2>&1
  fi
}

# pgque_bench_queue PORT SUBCONSUMERS [ROTATION]: a fresh PgQue queue
# 'bench' with consumer 'bench' and subconsumers sub_0.., ticked with
# PgQue's low-latency settings; ROTATION sets its queue_rotation_period.
pgque_bench_queue() {
  local port=$1 subconsumers=$2 rotation=${3:-}
  psql_on "$port" -c "SELECT pgque.unregister_subconsumer('bench', 'bench', substr(consumer_name, 7))
                        FROM pgque.get_consumer_info('bench') WHERE consumer_name LIKE 'bench.%'" \
    -c "SELECT pgque.drop_queue('bench', true) FROM pgque.queue WHERE queue_name = 'bench'" \
    -c "SELECT pgque.create_queue('bench')" \
    -c "SELECT pgque.set_queue_config('bench', 'ticker_max_count', '200')" \
    -c "SELECT pgque.set_queue_config('bench', 'ticker_max_lag', '100 milliseconds')" \
    -c "SELECT pgque.set_queue_config('bench', 'ticker_idle_period', '500 milliseconds')" \
    -c "SELECT pgque.ticker('bench')" \
    -c "SELECT pgque.register_subconsumer('bench', 'bench', 'sub_' || g) FROM generate_series(0, $subconsumers - 1) g" >/dev/null
  [ -z "$rotation" ] || psql_on "$port" -c "SELECT pgque.set_queue_config('bench', 'rotation_period', '$rotation')" >/dev/null
}

# The machine and server a benchmark ran on, for its report.
bench_machine() {
  echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GiB"
  echo "postgres: $("$bin/postgres" --version), fsync on, synchronous_commit on${1:+, $1}"
}
