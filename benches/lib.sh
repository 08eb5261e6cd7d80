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
# preloaded, under directory $1.
start_preloaded_bench_cluster() {
  local dir=$1 port=$2
  scripts/setup.sh
  # benches/compare.sh installs the build under test itself.
  [ "${BENCH_INSTALL:-1}" = 0 ] || PG_CONFIG="$bin/pg_config" scripts/install.sh >/dev/null 2>&1
  start_bench_clusters "$dir" "memory:$port:pg_distlock"
}
