#!/usr/bin/env bash
# A throwaway high-availability stack on loopback for the failover tests:
# one etcd member and two PostgreSQL nodes ($PG_MAJOR, default 15) run by Patroni (Debian's
# packages), pg_distlock preloaded, synchronous_mode_strict on. Everything
# runs as the postgres user (initdb refuses root).
#   scripts/ha.sh start DIR [BASE_PORT]   BASE_PORT (default 55440): etcd client,
#                                        +1 etcd peer, +2/+3 PostgreSQL node1/node2,
#                                        +4/+5 Patroni REST API node1/node2.
#                                        Returns once a node leads and the other
#                                        streams as its synchronous standby.
#   scripts/ha.sh stop DIR
# The ports are not the packages' defaults (2379, 8008, 5432), so a system
# etcd or Patroni service started by the packages cannot collide with it.
set -euo pipefail
. "$(dirname "$0")/pidfile.sh"

PGBIN=/usr/lib/postgresql/${PG_MAJOR:-15}/bin

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local seconds=$1; shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "ha.sh: timed out after ${seconds}s waiting for: $*" >&2
      return 1
    fi
    sleep 0.2
  done
}

# True when http://127.0.0.1:$1/$2 answers 200: Patroni does so on /primary
# and /sync only in that state. (python3 comes with Patroni; curl may not.)
http_ok() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://127.0.0.1:$1/$2"
}

node_conf() {
  local dir=$1 name=$2 pg_port=$3 api_port=$4 etcd_port=$5
  cat >"$dir/$name.yml" <<YAML
scope: distlock-ha
name: $name
log:
  dir: $dir/$name-log
  level: WARNING
restapi:
  listen: 127.0.0.1:$api_port
  connect_address: 127.0.0.1:$api_port
etcd3:
  hosts: 127.0.0.1:$etcd_port
bootstrap:
  dcs:
    # A leader key of 10 s checked every second: a lost node is replaced
    # within seconds (loop_wait + 2 * retry_timeout must stay below ttl).
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    # A crashed primary is failed over at once instead of restarted in place.
    primary_start_timeout: 0
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    postgresql:
      use_pg_rewind: true
      parameters:
        shared_preload_libraries: pg_distlock
        max_connections: 200
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 256MB
        wal_log_hints: 'on'
        synchronous_commit: 'on'
        log_min_messages: warning
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pg_port
  connect_address: 127.0.0.1:$pg_port
  data_dir: $dir/$name
  bin_dir: $PGBIN
  pgpass: $dir/$name.pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
  parameters:
    unix_socket_directories: '$dir'
YAML
}

either_ok() { http_ok "$1" "$3" || http_ok "$2" "$3"; }

# Runs "$@" as postgres in the background, in a session of its own, with
# its own pid (not a wrapper's) in $pidfile, so that stop can signal it.
daemon() {
  local pidfile=$1 log=$2; shift 2
  rm -f "$pidfile"
  runuser -u postgres -- setsid sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >>"$log" 2>&1 </dev/null &
  wait_for 10 test -s "$pidfile"
}

start_node() {
  local dir=$1 name=$2
  install -d -o postgres "$dir/$name-log"
  daemon "$dir/$name.pid" "$dir/$name.out" patroni "$dir/$name.yml"
}

case "${1:-}" in
  start)
    dir=$2 base=${3:-55440}
    etcd_port=$base
    mkdir -p "$dir" && chown postgres "$dir" && chmod 700 "$dir"
    daemon "$dir/etcd.pid" "$dir/etcd.out" etcd --name ha --data-dir "$dir/etcd" \
      --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
      --listen-peer-urls "http://127.0.0.1:$((base + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((base + 1))" \
      --initial-cluster "ha=http://127.0.0.1:$((base + 1))" --log-level warn
    wait_for 30 http_ok "$etcd_port" health
    node_conf "$dir" node1 $((base + 2)) $((base + 4)) "$etcd_port"
    node_conf "$dir" node2 $((base + 3)) $((base + 5)) "$etcd_port"
    # On a fresh DIR node1 bootstraps alone, so that it is the first
    # leader; node2 then clones it with pg_basebackup.
    start_node "$dir" node1
    wait_for 90 either_ok $((base + 4)) $((base + 5)) primary
    start_node "$dir" node2
    wait_for 90 either_ok $((base + 4)) $((base + 5)) sync
    echo "ha.sh: PostgreSQL on $((base + 2)) and $((base + 3)), one leading, the other its synchronous standby"
    ;;
  stop)
    dir=$2
    # Patroni stops its PostgreSQL on SIGTERM; both nodes at once, so that
    # neither fails over to the other. etcd goes last.
    for names in "node1 node2" etcd; do
      pids=()
      for name in $names; do
        if pid=$(our_pid "$dir/$name.pid" "$dir/"); then pids+=("$pid"); fi
        rm -f "$dir/$name.pid"
      done
      [ "${#pids[@]}" -gt 0 ] || continue
      kill -TERM "${pids[@]}" 2>/dev/null || true
      for pid in "${pids[@]}"; do
        wait_for 60 bash -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
      done
    done
    # A postmaster left behind by a Patroni that had to be killed.
    for name in node1 node2; do
      if our_pid "$dir/$name/postmaster.pid" "$dir/$name" >/dev/null; then
        runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/$name" -m immediate -w stop >/dev/null 2>&1 || true
      fi
    done
    ;;
  *)
    echo "usage: $0 start DIR [BASE_PORT] | stop DIR" >&2
    exit 2
    ;;
esac
