#!/bin/sh
# Runs inside a root that holds only PostgreSQL $1 from Debian (scripts/
# test_packages.sh copies it there with the artifact): installs the
# artifact, then on a fresh cluster creates the extension, updates a
# database made at the previous release, claims and releases a task in
# each, drops the extension and removes the package. Any failure exits
# non-zero with what was expected.
#   check.sh MAJOR ARTIFACT PORT
set -eu
v=$1 artifact=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
bin=/usr/lib/postgresql/$v/bin
data=$here/data
libdir=$("$bin/pg_config" --pkglibdir)
extdir=$("$bin/pg_config" --sharedir)/extension

fail() { echo "package check (PostgreSQL $v): $*" >&2; exit 1; }
expect() {  # expect WHAT EXPECTED ACTUAL
  [ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
}

[ ! -e "$libdir/pg_distlock.so" ] || fail "the root already has pg_distlock: not a clean install"
case "$artifact" in
  *.deb) dpkg -i "$artifact" >/dev/null ;;
  *.tar.gz)
    tar -C "$here" -xzf "$artifact"
    PG_CONFIG=$bin/pg_config "$here"/pg_distlock-*/install.sh >/dev/null ;;
  *) fail "unknown artifact $artifact" ;;
esac
[ -f "$libdir/pg_distlock.so" ] || fail "no library in $libdir"

rm -rf "$data"
install -d -o postgres -m 700 "$data"
runuser -u postgres -- "$bin/initdb" -D "$data" -U postgres -A trust --no-sync >/dev/null
runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
  -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$data" start >/dev/null
trap 'runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true' EXIT
sql() {  # sql DATABASE STATEMENT: its value
  "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$1" -c "$2"
}

claim_and_release() {  # prints the claim's fencing token
  db=$1 task=$2
  # A lease-mode claim: each psql call is a session of its own.
  row=$(sql "$db" "SELECT task_id || ' ' || acquired || ' ' || fencing_token
                     FROM distlock.worker_fetch_and_execute_task('pkg-worker', '1 minute')")
  set -- $row
  expect "claim of $task in $db" "$task true" "$1 $2"
  sql "$db" "SELECT distlock.release_task_lease($1, $3, 'completed')" >/dev/null
  expect "run of $task in $db" completed "$(sql "$db" "SELECT status FROM distlock.task_execution_log WHERE task_id = $1 ORDER BY id DESC LIMIT 1")"
  echo "$3"
}

add_task() {
  sql "$1" "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
            VALUES ('$2', 'pkg', '@daily', now()) RETURNING id"
}

sql postgres "CREATE DATABASE fresh" >/dev/null
sql postgres "CREATE DATABASE updated" >/dev/null

sql fresh "CREATE EXTENSION pg_distlock" >/dev/null
current=$(sql fresh "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'")
claim_and_release fresh "$(add_task fresh fresh-task)" >/dev/null

previous=0.3.0
sql updated "CREATE EXTENSION pg_distlock VERSION '$previous'" >/dev/null
before=$(claim_and_release updated "$(add_task updated before-update)")
sql updated "ALTER EXTENSION pg_distlock UPDATE" >/dev/null
expect "version after the update" "$current" "$(sql updated "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'")"
expect "tasks kept by the update" 1 "$(sql updated "SELECT count(*) FROM distlock.scheduled_tasks")"
after=$(claim_and_release updated "$(add_task updated after-update)")
[ "$after" -gt "$before" ] || fail "fencing token after the update ($after) is not above the one before ($before)"

sql fresh "DROP EXTENSION pg_distlock" >/dev/null
sql updated "DROP EXTENSION pg_distlock" >/dev/null
runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
trap - EXIT

case "$artifact" in
  *.deb) dpkg -r "postgresql-$v-pg-distlock" >/dev/null ;;
  *.tar.gz) PG_CONFIG=$bin/pg_config "$here"/pg_distlock-*/install.sh --uninstall >/dev/null ;;
esac
[ ! -e "$libdir/pg_distlock.so" ] || fail "the library is still there after removal"
left=$(ls "$extdir" | grep '^pg_distlock' || true)
[ -z "$left" ] || fail "files left after removal: $left"
echo "package check (PostgreSQL $v): $(basename "$artifact") installs, creates $current, updates from $previous, claims and releases, removes cleanly"
