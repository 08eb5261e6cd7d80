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

# Copies a package directory (usr/...) into the private tree: each file
# written beside its target and renamed over it.
install_package() {
  local pkg=$1 file
  (cd "$pkg" && find usr -type f) | while read -r file; do
    cp "$pkg/$file" "$private/$file.new"
    mv -f "$private/$file.new" "$private/$file"
  done
}

if [ "${1:-}" = swap ]; then
  install_package "$2"
  exit 0
fi

# The package directory of the tree in $1, built into $2 in target
# directory $3 (pgrx generates the SQL from the library it finds there, so
# two trees must never share one).
build() {
  local tree=$1 dest=$2 target=$3
  rm -rf "$dest"
  (cd "$tree" && CARGO_TARGET_DIR=$target cargo pgrx package --no-default-features --features pg15 \
     --pg-config "$pg_config" --out-dir "$dest" >"$dest.log" 2>&1) || { cat "$dest.log" >&2; return 1; }
  # cargo pgrx package leaves out released install scripts (0.1.0 had none).
  if compgen -G "$tree/sql/pg_distlock--*.sql" >/dev/null; then
    install -m 644 "$tree"/sql/pg_distlock--*.sql "$dest/usr/share/postgresql/15/extension/"
  fi
}

mkdir -p "$cache" "$work"
chown postgres "$work"
tree=$cache/tree-$release
[ -d "$tree" ] || git worktree add --detach "$tree" "$commit" >/dev/null
echo "== real upgrade from $release: building $release ($commit) and this tree"
build "$tree" "$cache/pkg-$release" "$cache/target-$release"
build "$PWD" "$cache/pkg-current" "${CARGO_TARGET_DIR:-$PWD/target}"

rm -rf "$private"
mkdir -p "$private/usr/lib/postgresql" "$private/usr/share/postgresql"
cp -a /usr/lib/postgresql/15 "$private/usr/lib/postgresql/"
cp -a /usr/share/postgresql/15 "$private/usr/share/postgresql/"
rm -f "$private"/usr/lib/postgresql/15/lib/pg_distlock.so "$private"/usr/share/postgresql/15/extension/pg_distlock*
install_package "$cache/pkg-$release"

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
