#!/usr/bin/env bash
# Released SQL scripts are frozen: a database created at a release, or
# updated through it, ran exactly these bytes, and the next update starts
# from what they made. sql/released.sha256 lists every released install and
# upgrade script with its checksum; this fails when one of them changed, or
# when a script of a released version (anything but the version under
# development in Cargo.toml) is missing from the list.
#   tests/scripts/released_scripts.sh
set -euo pipefail
cd "$(dirname "$0")/../../sql"

current=$(sed -n 's/^version = "\(.*\)"$/\1/p' ../Cargo.toml | head -n 1)
status=0
if ! sha256sum --check --quiet released.sha256; then
  echo "released scripts changed (sql/released.sha256): put every fix into the upgrade script to $current" >&2
  status=1
fi
for script in pg_distlock--*.sql; do
  target=${script%.sql}
  target=${target##*--}
  [ "$target" = "$current" ] && continue
  if ! grep -q "  $script\$" released.sha256; then
    echo "$script belongs to released version $target but is not listed in sql/released.sha256" >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "released scripts: $(wc -l < released.sha256) unchanged"
exit "$status"
