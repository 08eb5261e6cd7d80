#!/usr/bin/env bash
# The test scripts stop and start clusters and PgBouncers by their pid files.
# After a machine restart those files name numbers that may now belong to
# unrelated processes: stopping must leave such a process alone, and starting
# must not be refused because of it.
#   tests/scripts/stale_pidfiles.sh [PORT]   PORT and PORT+1 (default 55535)
set -euo pipefail
cd "$(dirname "$0")/../.."

port=${1:-55535}
dir=$(mktemp -d /tmp/pg_distlock_stale.XXXXXX)
chown postgres "$dir"
bystander=""
cleanup() {
  scripts/cluster.sh stop "$dir/bouncer" || true
  scripts/cluster.sh stop "$dir/cluster" || true
  [ -n "$bystander" ] && kill "$bystander" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "stale_pidfiles: $*" >&2; exit 1; }

# A process of the postgres user, which pg_ctl and PgBouncer could signal.
runuser -u postgres -- sleep 600 &
bystander=$!
disown "$bystander"
for _ in $(seq 50); do [ "$(cat "/proc/$bystander/comm" 2>/dev/null)" = sleep ] && break; sleep 0.1; done
bystander=$(pgrep -u postgres -P "$bystander" sleep || echo "$bystander")

scripts/cluster.sh start "$dir/cluster" "$port" ""
scripts/cluster.sh stop "$dir/cluster"
echo "$bystander" >"$dir/cluster/postmaster.pid"
scripts/cluster.sh stop "$dir/cluster"
kill -0 "$bystander" || fail "stopping a stopped cluster signalled pid $bystander"
scripts/cluster.sh start "$dir/cluster" "$port" ""
[ "$(head -n 1 "$dir/cluster/postmaster.pid")" != "$bystander" ] || fail "the cluster did not start"

install -d -o postgres "$dir/bouncer"
echo "$bystander" >"$dir/bouncer/pgbouncer.pid"
scripts/cluster.sh bouncer "$dir/bouncer" $((port + 1)) "$port"
for _ in $(seq 50); do
  pid=$(cat "$dir/bouncer/pgbouncer.pid" 2>/dev/null || true)
  [ -n "$pid" ] && [ "$pid" != "$bystander" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = pgbouncer ] && break
  sleep 0.1
done
[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = pgbouncer ] || fail "PgBouncer did not start over a stale pid file"
scripts/cluster.sh stop "$dir/bouncer"
kill -0 "$bystander" || fail "stopping PgBouncer signalled pid $bystander"
echo "$bystander" >"$dir/bouncer/pgbouncer.pid"
scripts/cluster.sh stop "$dir/bouncer"
kill -0 "$bystander" || fail "stopping a stopped PgBouncer signalled pid $bystander"
echo "stale_pidfiles: ok"
