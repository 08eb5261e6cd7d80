#!/usr/bin/env bash
# Upgrades with the real old library: 0.1.0 is built from its release
# commit (CHANGELOG.md names it) and installed into a private copy of
# PostgreSQL 15 (the only version it was built for); a server without
# preload runs from that copy, so every new backend loads whatever library
# is at the path. tests/cluster/upgrade.rs fills a database through 0.1.0's
# own library, then calls back here (DISTLOCK_TEST_SWAP_LIBRARY) to rename
# this tree's library and scripts into place, never rewriting a file, as a
# package upgrade does, and runs ALTER EXTENSION pg_distlock UPDATE while a
# worker that loaded 0.1.0 keeps its claim: every row kept, tokens rising,
# the catalog equal to a fresh install's, pg_dump and pg_restore working.
#   scripts/test_real_upgrades.sh          (builds cached in target/releases)
set -euo pipefail
cd "$(dirname "$0")/.."

release=0.1.0 commit=a74dcde
pg_config=/usr/lib/postgresql/15/bin/pg_config
cache=$PWD/target/releases
work=${DISTLOCK_TEST_DIR:-/tmp/pg_distlock_test}/real-upgrades
private=$work/postgresql
port=55439

# shellcheck source=packaging.sh
source scripts/packaging.sh

if [ "${1:-}" = swap ]; then
  install_package "$2" "$private"
  exit 0
fi

mkdir -p "$cache" "$work"
chown postgres "$work"
tree=$cache/tree-$release
[ -d "$tree" ] || git worktree add --detach "$tree" "$commit" >/dev/null
echo "== real upgrade from $release: building $release ($commit) and this tree"
package_tree "$tree" "$cache/pkg-$release" "$cache/target-$release" "$pg_config" pg15
package_tree "$PWD" "$cache/pkg-current" "${CARGO_TARGET_DIR:-$PWD/target}" "$pg_config" pg15

private_postgresql "$private" 15
install_package "$cache/pkg-$release" "$private"

export PGBIN=$private/usr/lib/postgresql/15/bin
cleanup() { scripts/cluster.sh stop "$work/data" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup
rm -rf "$work/data"
scripts/cluster.sh start "$work/data" "$port" ""

echo "== real upgrade from $release: filled by $release's library, updated by this one"
DISTLOCK_TEST_PORT=$port DISTLOCK_TEST_STANDBY_PORT=$port DISTLOCK_TEST_PLAIN_PORT=$port \
DISTLOCK_TEST_POOLER_PORT=$port DISTLOCK_TEST_PGDATA="$work/data" \
DISTLOCK_TEST_SWAP_LIBRARY="$PWD/scripts/test_real_upgrades.sh swap $cache/pkg-current" \
  cargo test --no-default-features --features "pg15 cluster-tests" --test cluster -- --test-threads=1 \
    --exact upgrade::a_populated_0_1_0_database_upgrades_in_place
