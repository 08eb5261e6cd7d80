#!/usr/bin/env bash
# Runs the isolation specs in tests/isolation/specs with PostgreSQL's own
# pg_isolation_regress against a running server that has pg_distlock
# installed: deterministic interleavings of concurrent sessions, compared
# with tests/isolation/expected.
#   scripts/isolation.sh PORT [SPEC...]
set -euo pipefail
cd "$(dirname "$0")/.."

port=${1:?usage: scripts/isolation.sh PORT [SPEC...]}
shift
out=${DISTLOCK_ISOLATION_OUT:-/tmp/pg_distlock_isolation}
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  for spec in tests/isolation/specs/*.spec; do specs+=("$(basename "$spec" .spec)"); done
fi
rm -rf "$out"
mkdir -p "$out"
# With --use-existing, pg_isolation_regress expects the database to exist.
pgdir=/usr/lib/postgresql/${PG_MAJOR:-15}
psql=("$pgdir/bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres)
"${psql[@]}" -c "DROP DATABASE IF EXISTS distlock_isolation WITH (FORCE)" -c "CREATE DATABASE distlock_isolation"
"$pgdir/lib/pgxs/src/test/isolation/pg_isolation_regress" \
  --use-existing --host=127.0.0.1 --port="$port" --user=postgres \
  --dbname=distlock_isolation --inputdir=tests/isolation --outputdir="$out" \
  "${specs[@]}" || { cat "$out/regression.diffs" 2>/dev/null; exit 1; }
