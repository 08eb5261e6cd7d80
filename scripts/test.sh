#!/usr/bin/env bash
# Runs every pg_distlock test on every supported PostgreSQL version:
# PostgreSQL 15 on the host, 17 and 18 in Debian roots (scripts/pgroot.sh).
# Each version gets the unit and cluster tests; the newest also gets the
# isolation specs, the Python client's tests, the Patroni failover stack and
# the nemesis soak (scripts/test_version.sh lists them). On 15, a database
# made by each release's own library is updated by this one. Last, each
# version's package is built and tested (scripts/package.sh,
# scripts/test_packages.sh).
#   PG_VERSIONS   the versions to test, oldest first (default "15 17 18"):
#                 PG_VERSIONS=15 for a quick local run
#   DISTLOCK_SOAK_SECONDS   length of the soak (default 120)
#   DISTLOCK_QUEUE_SOAK_SECONDS   length of the queue's soak (default 75)
set -euo pipefail
cd "$(dirname "$0")/.."

# A failed step tells how much disk was left (CI keeps only the output's tail).
trap 'echo "==== failed; disk: $(df -h --output=avail "$PWD" | tail -1 | tr -d " ") free"; du -sh target/* /var/cache/pg_distlock/roots /tmp/pg_distlock_* 2>/dev/null || true' ERR

versions=${PG_VERSIONS:-"15 17 18"}
newest=${versions##* }
# A clean clone builds every crate once per PostgreSQL version: incremental
# state only costs disk there (a CI run once ran out of it, in the third build).
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
# A full run keeps ~30 GB (three versions' clusters, builds and roots); where
# less than 40 GB is free, or in CI, each version that passes clears its
# clusters and build (scripts/test_version.sh, scripts/test_python.sh).
free_kb=$(df --output=avail "$PWD" | tail -1 | tr -d ' ')
if [ "${CI:-}" = true ] || [ "$free_kb" -lt $((40 * 1024 * 1024)) ]; then export DISTLOCK_LEAN_DISK=1; fi
echo "==== disk: $(df -h --output=avail "$PWD" | tail -1 | tr -d ' ') free where the builds go${DISTLOCK_LEAN_DISK:+ (lean: passed versions leave no clusters)}"
PG_VERSIONS=$versions scripts/setup.sh

echo "==== released SQL scripts are unchanged (tests/scripts/released_scripts.sh)"
tests/scripts/released_scripts.sh

echo "==== test scripts survive stale pid files (tests/scripts/stale_pidfiles.sh)"
tests/scripts/stale_pidfiles.sh

for v in $versions; do
  scope=core
  [ "$v" = "$newest" ] && scope=all
  echo "==== PostgreSQL $v ($scope)"
  if [ "$v" = 15 ]; then
    PG_MAJOR=15 scripts/test_version.sh "$scope"
  else
    PG_VERSIONS=$versions scripts/pgroot.sh run "$v" scripts/test_version.sh "$scope"
  fi
done

case " $versions " in
  *" 15 "*)
    echo "==== upgrades from 0.1.0, 0.2.0 and 0.3.0 with their own libraries (scripts/test_real_upgrades.sh)"
    scripts/test_real_upgrades.sh
    ;;
esac

echo "==== packages (scripts/package.sh, each installed where the build never was)"
PG_VERSIONS=$versions scripts/package.sh
PG_VERSIONS=$versions scripts/test_packages.sh
