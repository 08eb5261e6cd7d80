#!/usr/bin/env bash
# Tests the artifacts of scripts/package.sh as a user installs them: each in
# a root holding only that version's PostgreSQL from Debian (bookworm for
# 15, trixie for 17, sid for 18), which never saw this checkout or its build
# (scripts/pgroot.sh prepare-clean). tests/packages/check.sh installs it,
# creates the extension on a fresh cluster, updates a database made at the
# previous release, claims and releases a task, and removes the package.
#   scripts/test_packages.sh [DIST_DIR]   (default dist/); PG_VERSIONS
set -euo pipefail
cd "$(dirname "$0")/.."

dist=${1:-$PWD/dist}
version=$(cargo pkgid | sed 's/.*[#@]//')
arch=$(dpkg --print-architecture)
port=55439

for v in ${PG_VERSIONS:-15 17 18}; do
  if [ "$v" = 18 ]; then
    artifact="$dist/pg_distlock-$version-pg$v-linux-$(uname -m).tar.gz"
  else
    artifact="$dist/postgresql-$v-pg-distlock_${version}-1_${arch}.deb"
  fi
  [ -f "$artifact" ] || { echo "test_packages: no $artifact (run scripts/package.sh)" >&2; exit 1; }
  scripts/pgroot.sh prepare-clean "$v"
  root=$(scripts/pgroot.sh dir "$v" clean)
  # A package removed by the last run leaves nothing; a run cut short may have.
  scripts/pgroot.sh run-clean "$v" sh -c "dpkg -r postgresql-$v-pg-distlock >/dev/null 2>&1 || true
    rm -f /usr/lib/postgresql/$v/lib/pg_distlock.so /usr/share/postgresql/$v/extension/pg_distlock*"
  rm -rf "$root/var/tmp/pkgtest"
  mkdir -p "$root/var/tmp/pkgtest"
  cp tests/packages/check.sh "$artifact" "$root/var/tmp/pkgtest/"
  scripts/pgroot.sh run-clean "$v" /var/tmp/pkgtest/check.sh "$v" "/var/tmp/pkgtest/$(basename "$artifact")" "$port"
done
