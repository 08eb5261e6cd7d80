#!/usr/bin/env bash
# What a consumer's backend executes per job, counted in instructions by
# valgrind's callgrind (counts, not seconds: the same on a busy machine), for
# REV's build against the working tree's: the waiting consumer's path that
# benches/queue.sh's enqueue-to-start latency times, without the commit's
# flush (synchronous_commit off) that hides it there.
#   benches/queue_wake_instructions.sh REV     (about 6 minutes after the builds)
# Points, each a session of its own on a cluster running under callgrind:
#   wait:   500 consume_task calls with p_wait, a job always there (no sleep)
#   nowait: 500 consume_task calls without p_wait
#   woken:  one consumer waiting (p_wait 20 s) for 60 jobs enqueued one at
#           a time 1 s apart (under valgrind a look takes tens of ms: 0.3 s
#           sometimes found the consumer still awake): per job, the look
#           that claims after the wake-up plus the next call's look that
#           finds nothing and sleeps
#   enqueue: the producer of those 60 jobs, per job
# Each figure is PostgresMain's inclusive count over the session, divided by
# its calls (the PL/pgSQL loop around them included, the same in both).
set -euo pipefail
cd "$(dirname "$0")/.."

rev=${1:?usage: benches/queue_wake_instructions.sh REV}
out=${BENCH_DIR:-/tmp/pg_distlock_bench}/instructions
pg_config=/usr/lib/postgresql/15/bin/pg_config
port=55535
mkdir -p "$out"
scripts/setup.sh
command -v valgrind >/dev/null || { echo "queue_wake_instructions.sh: needs valgrind" >&2; exit 2; }

# shellcheck source=../scripts/packaging.sh
source scripts/packaging.sh
private="$out/postgresql"
private_postgresql "$private" 15
bin="$private/usr/lib/postgresql/15/bin"
worktree="$out/tree-$rev"
[ -d "$worktree" ] || git worktree add --detach "$worktree" "$rev" >/dev/null
package_tree "$worktree" "$out/pkg-old" "$worktree/target" "$pg_config" pg15
package_tree "$PWD" "$out/pkg-new" "${CARGO_TARGET_DIR:-$PWD/target}" "$pg_config" pg15

sql() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d bench "$@"; }
data="$out/cluster"
stop() { [ -f "$data/postmaster.pid" ] && runuser -u postgres -- "$bin/pg_ctl" -D "$data" stop -m fast >/dev/null 2>&1 || true; }
trap stop EXIT

# profile BUILD: the four points' backend pids, one "point pid" line each.
profile() {
  local build=$1 consumer
  install_package "$out/pkg-$build" "$private"
  stop
  PGBIN=$bin scripts/cluster.sh stop "$data" >/dev/null 2>&1 || true
  rm -rf "$data"
  PGBIN=$bin scripts/cluster.sh start "$data" "$port" pg_distlock >/dev/null
  "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE bench"
  sql -c "CREATE EXTENSION pg_distlock" \
      -c "INSERT INTO distlock.task_queue (task_name, payload) SELECT 'b', '{}' FROM generate_series(1, 3000)" \
      -c "VACUUM ANALYZE distlock.task_queue"
  PGBIN=$bin scripts/cluster.sh stop "$data" >/dev/null
  rm -rf "$out/cg-$build"
  install -d -o postgres "$out/cg-$build"
  # Children are forked, not executed: each backend inherits callgrind and
  # writes its own file when it exits.
  runuser -u postgres -- valgrind --tool=callgrind --trace-children=yes \
    --callgrind-out-file="$out/cg-$build/%p.out" "$bin/postgres" -D "$data" -p "$port" \
    >"$out/cg-$build/postmaster.log" 2>&1 &
  local deadline=$((SECONDS + 120))
  until sql -c "SELECT 1" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "the cluster under valgrind did not start" >&2; exit 1; }
    sleep 1
  done
  sql -c "SET synchronous_commit = off" -c "
    DO \$\$ DECLARE j record; BEGIN FOR i IN 1..500 LOOP
      SELECT * INTO j FROM distlock.consume_task('w', p_wait => '1 second'); COMMIT; END LOOP; END \$\$" \
      -c "SELECT 'wait 500', pg_backend_pid()"
  sql -c "SET synchronous_commit = off" -c "
    DO \$\$ DECLARE j record; BEGIN FOR i IN 1..500 LOOP
      SELECT * INTO j FROM distlock.consume_task('w'); COMMIT; END LOOP; END \$\$" \
      -c "SELECT 'nowait 500', pg_backend_pid()"
  sql -c "TRUNCATE distlock.task_queue"
  sql -c "SET synchronous_commit = off" -c "
    DO \$\$ DECLARE j record; n int := 0; BEGIN WHILE n < 60 LOOP
      SELECT * INTO j FROM distlock.consume_task('w', p_wait => '20 seconds');
      IF j.task_id IS NOT NULL THEN n := n + 1; END IF; COMMIT; END LOOP; END \$\$" \
      -c "SELECT 'woken 60', pg_backend_pid()" &
  consumer=$!
  # The consumer is asleep in its first wait once it shows in pg_stat_activity.
  deadline=$((SECONDS + 60))
  until [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%p_wait => ''20 seconds''%' AND pid <> pg_backend_pid()")" = 1 ]; do
    [ $SECONDS -lt $deadline ] || { echo "the consumer did not start" >&2; exit 1; }
    sleep 0.2
  done
  sql -c "SET synchronous_commit = off" -c "
    DO \$\$ BEGIN FOR i IN 1..60 LOOP
      PERFORM distlock.enqueue_task('w', '{}'); COMMIT; PERFORM pg_sleep(1); END LOOP; END \$\$" \
      -c "SELECT 'enqueue 60', pg_backend_pid()"
  wait "$consumer"
  stop
}

# per_call BUILD "point calls pid": PostgresMain's inclusive count / calls.
per_call() {
  local build=$1 point calls pid
  read -r point calls pid <<<"$2"
  callgrind_annotate --inclusive=yes --threshold=100 "$out/cg-$build/$pid.out" 2>/dev/null |
    awk -v calls="$calls" '/[?][?][?]:PostgresMain / && !done { gsub(",", "", $1); printf "%.0f", $1 / calls; done = 1 }'
}

for build in old new; do
  profile "$build" | tr '|' ' ' >"$out/$build.points"
done
printf '%-44s %12s %12s %9s\n' "instructions per call (PostgresMain)" "$rev" "new" "new/old"
while read -r line; do
  point=${line%% *}
  old=$(per_call old "$line") new=$(per_call new "$(grep "^$point " "$out/new.points")")
  printf '%-44s %12s %12s %9s\n' "$point" "$old" "$new" "$(awk -v a="$new" -v b="$old" 'BEGIN { printf "%.3f", a / b }')"
done <"$out/old.points"
