#!/usr/bin/env bash
# A throwaway PostgreSQL cluster ($PG_MAJOR, default 15) on a loopback port, run as the postgres
# user (initdb refuses root). pg_cron is preloaded for the sweep schedule.
#   scripts/cluster.sh start DIR PORT [PRELOAD]   initdb if needed, then start;
#                                      PRELOAD is shared_preload_libraries
#                                      (default pg_cron); lines in
#                                      $CLUSTER_EXTRA_CONF are appended to
#                                      postgresql.conf at initdb
#   scripts/cluster.sh standby DIR PORT PRIMARY_PORT   streaming standby
#   scripts/cluster.sh bouncer DIR PORT TARGET_PORT   PgBouncer, transaction pooling,
#                                      4 server connections per database
#   scripts/cluster.sh stop DIR        (a cluster or a PgBouncer directory)
set -euo pipefail
. "$(dirname "$0")/pidfile.sh"

PGBIN=${PGBIN:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin}
as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }

write_conf() {
  local dir=$1 port=$2 preload=$3
  cat >>"$dir/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
shared_preload_libraries = '$preload'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 32
max_connections = 200
# Tests prepare transactions that claim and enqueue jobs.
max_prepared_transactions = 10
wal_level = replica
max_wal_senders = 4
# A standby that lost its connection during a crash test catches up again
# (a crash test writes a few MB meanwhile); WAL kept small, since a run's
# clusters once filled a CI machine's disk.
wal_keep_size = '256MB'
max_wal_size = '256MB'
min_wal_size = '80MB'
hot_standby = on
fsync = off
log_min_messages = warning
${CLUSTER_EXTRA_CONF:-}
CONF
}

# Waits for the old PgBouncer to exit: a new one refuses its pid file.
stop_bouncer() {
  local dir=$1 pid
  pid=$(our_pid "$dir/pgbouncer.pid" "$dir/pgbouncer.ini") || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/pgbouncer.pid"
}

start() {
  local dir=$1
  # A stale postmaster.pid naming a live postgres-owned process stops a start.
  our_pid "$dir/postmaster.pid" "-D $dir" >/dev/null || true
  as_postgres "$PGBIN/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 start >/dev/null
}

case "${1:-}" in
  start)
    dir=$2 port=$3 preload=${4-pg_cron}
    if [ ! -f "$dir/PG_VERSION" ]; then
      mkdir -p "$dir" && chown postgres "$dir" && chmod 700 "$dir"
      as_postgres "$PGBIN/initdb" -D "$dir" -U postgres -A trust --no-sync >/dev/null
      echo "host replication postgres 127.0.0.1/32 trust" >>"$dir/pg_hba.conf"
      write_conf "$dir" "$port" "$preload"
    fi
    start "$dir"
    ;;
  standby)
    dir=$2 port=$3 primary=$4
    if [ ! -f "$dir/PG_VERSION" ]; then
      mkdir -p "$dir" && chown postgres "$dir" && chmod 700 "$dir"
      as_postgres "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir" -R -X stream >/dev/null
      sed -i "s/^port = .*/port = $port/; s#^unix_socket_directories = .*#unix_socket_directories = '$dir'#" "$dir/postgresql.conf"
      # pg_cron runs only on the primary.
      sed -i "s/^shared_preload_libraries = .*/shared_preload_libraries = ''/" "$dir/postgresql.conf"
    fi
    start "$dir"
    ;;
  bouncer)
    dir=$2 port=$3 target=$4
    mkdir -p "$dir" && chown postgres "$dir"
    stop_bouncer "$dir"
    echo '"postgres" ""' >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$target
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    chown -R postgres "$dir"
    # PgBouncer refuses to run as root.
    as_postgres /usr/sbin/pgbouncer -d "$dir/pgbouncer.ini"
    ;;
  stop)
    dir=$2
    if our_pid "$dir/postmaster.pid" "-D $dir" >/dev/null; then
      as_postgres "$PGBIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null || true
    fi
    stop_bouncer "$dir"
    ;;
  *)
    echo "usage: $0 start DIR PORT [PRELOAD] | standby DIR PORT PRIMARY_PORT | bouncer DIR PORT TARGET_PORT | stop DIR" >&2
    exit 2
    ;;
esac
