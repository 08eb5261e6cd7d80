#!/usr/bin/env bash
# Upgrades with the real old libraries: each release (0.1.0, 0.2.0, 0.3.0) is built
# from its release commit (CHANGELOG.md names it) and installed into a
# private copy of PostgreSQL 15 (the only version they were built for); a
# server without preload runs from that copy, so every new backend loads
# whatever library is at the path. tests/cluster/upgrade.rs fills a database
# through the release's own library, then calls back here
# (DISTLOCK_TEST_SWAP_LIBRARY) to rename this tree's library and scripts
# into place, never rewriting a file, as a package upgrade does, and runs
# ALTER EXTENSION pg_distlock UPDATE while a worker that loaded the old
# library keeps its claim: every row kept, tokens rising, the catalog equal
# to a fresh install's, pg_dump and pg_restore working.
#   scripts/test_real_upgrades.sh   (builds cached under $CARGO_TARGET_DIR/releases)
set -euo pipefail
cd "$(dirname "$0")/.."

# release:commit, as CHANGELOG.md names them.
releases="0.1.0:a74dcde 0.2.0:568211f 0.3.0:d28c303"
pg_config=/usr/lib/postgresql/15/bin/pg_config
cache=${CARGO_TARGET_DIR:-$PWD/target}/releases
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
echo "== real upgrades: building this tree"
package_tree "$PWD" "$cache/pkg-current" "${CARGO_TARGET_DIR:-$PWD/target}" "$pg_config" pg15

export PGBIN=$private/usr/lib/postgresql/15/bin
cleanup() { scripts/cluster.sh stop "$work/data" >/dev/null 2>&1 || true; }
trap cleanup EXIT

for entry in $releases; do
  release=${entry%%:*} commit=${entry#*:}
  tree=$cache/tree-$release
  if [ ! -f "$tree/Cargo.toml" ]; then
    rm -rf "$tree" && mkdir -p "$tree"
    git archive "$commit" | tar -x -C "$tree"
  fi
  echo "== real upgrade from $release: building $release ($commit)"
  package_tree "$tree" "$cache/pkg-$release" "$cache/target-$release" "$pg_config" pg15
  # A clean clone (CI) never builds it again: its half-gigabyte build goes.
  if [ "${CI:-}" = true ]; then rm -rf "$cache/target-$release"; fi

  private_postgresql "$private" 15
  install_package "$cache/pkg-$release" "$private"
  cleanup
  rm -rf "$work/data"
  scripts/cluster.sh start "$work/data" "$port" ""

  echo "== real upgrade from $release: filled by $release's library, updated by this one"
  DISTLOCK_TEST_PORT=$port DISTLOCK_TEST_STANDBY_PORT=$port DISTLOCK_TEST_PLAIN_PORT=$port \
  DISTLOCK_TEST_POOLER_PORT=$port DISTLOCK_TEST_PGDATA="$work/data" \
  DISTLOCK_TEST_SWAP_LIBRARY="$PWD/scripts/test_real_upgrades.sh swap $cache/pkg-current" \
    cargo test --no-default-features --features "pg15 cluster-tests" --test cluster -- --test-threads=1 \
      --exact "upgrade::a_populated_${release//./_}_database_upgrades_in_place"
  cleanup
done
