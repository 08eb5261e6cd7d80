#!/usr/bin/env bash
# Runs pg_distlock's tests on one PostgreSQL version, PG_MAJOR (default 15),
# whose binaries are under /usr/lib/postgresql/$PG_MAJOR (the host for 15, a
# root of scripts/pgroot.sh for 17 and 18; scripts/test.sh chooses):
#   1. the #[pg_test] unit tests (cargo pgrx test, one backend per test);
#   2. tests/cluster: many real connections against a primary in
#      shared-memory mode (pg_distlock preloaded; on 18 instead the DSM
#      registry's segment, pg_distlock not preloaded), its streaming standby,
#      a plain cluster in table mode (no preload, and on 17+
#      distlock.dynamic_shared_memory off), and a transaction-pooling
#      PgBouncer in front of the primary: concurrency, kills, restarts,
#      pg_dump, pg_cron, poolers, real process faults;
# and with `all` as the argument also
#   3. isolation specs (pg_isolation_regress): deterministic interleavings;
#   4. the Python client's tests (clients/python), against clusters of its own;
#   5. failover on a Patroni + etcd stack (scripts/ha.sh), a nemesis soak
#      of claims, leases and elections against the primary
#      (DISTLOCK_SOAK_SECONDS, default 120) and one of the queue
#      (DISTLOCK_QUEUE_SOAK_SECONDS, default 75; DISTLOCK_QUEUE_SOAK_SEED
#      replays a run's choices).
# With `cluster` as the argument, only step 2, for the tests whose names
# contain the arguments that follow (all without any).
#   scripts/test_version.sh core|all|cluster [FILTER...]
set -euo pipefail
cd "$(dirname "$0")/.."

scope=${1:-all}
shift || true
v=${PG_MAJOR:-15}
export PG_MAJOR=$v
features=(--no-default-features --features "pg$v")
work=${DISTLOCK_TEST_DIR:-/tmp/pg_distlock_test}/pg$v
primary_port=${DISTLOCK_TEST_PORT:-55432}
standby_port=$((primary_port + 1))
plain_port=$((primary_port + 2))
pooler_port=$((primary_port + 3))
ha_base=${DISTLOCK_TEST_HA_BASE_PORT:-55440}
# Read here and kept from the cluster-test step, which must skip the soak.
soak_seconds=${DISTLOCK_SOAK_SECONDS:-120}
queue_soak_seconds=${DISTLOCK_QUEUE_SOAK_SECONDS:-75}
unset DISTLOCK_SOAK_SECONDS DISTLOCK_QUEUE_SOAK_SECONDS

cleanup() {
  scripts/cluster.sh stop "$work/primary" || true
  scripts/cluster.sh stop "$work/standby" || true
  scripts/cluster.sh stop "$work/plain" || true
  scripts/cluster.sh stop "$work/pgbouncer" || true
  scripts/ha.sh stop "$work/ha" || true
}
trap cleanup EXIT

mkdir -p "$work"
chown postgres "$work"
rm -rf "$work/pgrx-pgdata"
install -d -o postgres -m 700 "$work/pgrx-pgdata"

if [ "$scope" != cluster ]; then
echo "== PostgreSQL $v: unit tests (cargo pgrx test)"
# With --runas, cargo pgrx test installs its build with `sudo cp`, which
# rewrites the installed library in place: a running server that has it
# loaded (a demo or benchmark cluster) would crash. Unlinked first, the copy
# gets a new file and running servers keep the old one.
rm -f "$("/usr/lib/postgresql/$v/bin/pg_config" --pkglibdir)/pg_distlock.so"
cargo pgrx test "pg$v" --no-default-features --runas postgres --pgdata "$work/pgrx-pgdata"
fi

echo "== PostgreSQL $v: installing the release build"
scripts/install.sh

echo "== PostgreSQL $v: cluster tests"
cleanup
rm -rf "$work/primary" "$work/standby" "$work/plain"
# Preloaded on 15 and 17; on 18 the same tests run on shared memory from the
# DSM registry (the HA stack, the soak and the Python tests preload it there).
if [ "$v" -ge 18 ]; then shared_memory=dsm primary_preload=pg_cron; else shared_memory=preload primary_preload=pg_cron,pg_distlock; fi
table_mode_conf=""
[ "$v" -ge 17 ] && table_mode_conf="distlock.dynamic_shared_memory = off"
# A small shared rate-limit table, so that a test can fill it; every database
# may fill all of it (a test that needs the per-database share sets it), as
# with 4 slots per partition a share of 2 would refuse a few keys by chance.
CLUSTER_EXTRA_CONF=$'distlock.rate_limit_capacity = 64\ndistlock.rate_limit_database_share = 100' \
  scripts/cluster.sh start "$work/primary" "$primary_port" "$primary_preload"
scripts/cluster.sh standby "$work/standby" "$standby_port" "$primary_port"
CLUSTER_EXTRA_CONF="$table_mode_conf" scripts/cluster.sh start "$work/plain" "$plain_port" ""
scripts/cluster.sh bouncer "$work/pgbouncer" "$pooler_port" "$primary_port"

# With DISTLOCK_LEAN_DISK=1 (scripts/test.sh sets it in CI and where little
# disk is free), a version that passed leaves neither its clusters (several
# GB with their WAL) nor, but on 15 whose build the upgrade tests reuse, its
# debug build behind; a failed one keeps them to be read.
leave_little_behind() {
  [ "${DISTLOCK_LEAN_DISK:-}" = 1 ] || return 0
  cleanup
  rm -rf "$work/primary" "$work/standby" "$work/plain" "$work/ha" "$work/pgrx-pgdata"
  if [ "$v" != 15 ] && [ -n "${CARGO_TARGET_DIR:-}" ]; then rm -rf "$CARGO_TARGET_DIR/debug"; fi
  echo "== PostgreSQL $v: $(df -h --output=avail "$work" | tail -1 | tr -d ' ') free once its clusters are gone"
}

cluster_tests() {
  DISTLOCK_TEST_PORT=$primary_port \
  DISTLOCK_TEST_STANDBY_PORT=$standby_port \
  DISTLOCK_TEST_PLAIN_PORT=$plain_port \
  DISTLOCK_TEST_POOLER_PORT=$pooler_port \
  DISTLOCK_TEST_SHARED_MEMORY=$shared_memory \
  DISTLOCK_TEST_PGDATA="$work/primary" \
  DISTLOCK_TEST_DIR="$work" \
    cargo test "${features[@]}" --features cluster-tests --test cluster -- --test-threads=1 "$@"
}
if [ "$scope" = cluster ]; then cluster_tests "$@"; else cluster_tests; fi

if [ "$scope" = core ]; then leave_little_behind; fi
[ "$scope" = all ] || exit 0

echo "== PostgreSQL $v: isolation specs (pg_isolation_regress)"
scripts/isolation.sh "$primary_port"

echo "== PostgreSQL $v: Python client (pytest, its own primary, standby and PgBouncer)"
scripts/test_python.sh

echo "== PostgreSQL $v: failover (Patroni) and nemesis soak"
scripts/ha.sh stop "$work/ha"
rm -rf "$work/ha"
scripts/ha.sh start "$work/ha" "$ha_base"
DISTLOCK_TEST_HA_PORTS=$((ha_base + 2)),$((ha_base + 3)) \
DISTLOCK_TEST_HA_API_PORTS=$((ha_base + 4)),$((ha_base + 5)) \
DISTLOCK_SOAK_SECONDS=$soak_seconds \
  cluster_tests failover:: replication_modes:: nemesis::

echo "== PostgreSQL $v: queue nemesis soak ($queue_soak_seconds s)"
DISTLOCK_QUEUE_SOAK_SECONDS=$queue_soak_seconds cluster_tests queue_nemesis::
leave_little_behind
