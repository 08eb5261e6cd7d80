#!/usr/bin/env bash
# Builds pg_distlock (release) and installs it into PostgreSQL $PG_MAJOR
# (default 15): the
# library, this version's install script, every upgrade script, and the
# frozen install scripts of earlier releases, so that a database can also
# be created at an older version (CREATE EXTENSION pg_distlock VERSION
# '0.1.0') and updated with ALTER EXTENSION pg_distlock UPDATE.
set -euo pipefail
cd "$(dirname "$0")/.."

v=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$v/bin/pg_config}
cargo pgrx install --release --no-default-features --features "pg$v" --pg-config "$PG_CONFIG" >/dev/null

# cargo pgrx install copies upgrade scripts (name--A--B.sql) but not the
# frozen full scripts of released versions (name--A.sql).
extdir="$("$PG_CONFIG" --sharedir)/extension"
for script in sql/pg_distlock--*.sql; do
  case "$(basename "$script")" in
    pg_distlock--*--*.sql) ;;
    *) install -m 644 "$script" "$extdir/" ;;
  esac
done
