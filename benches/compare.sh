#!/usr/bin/env bash
# benches/run.sh for two builds of pg_distlock, alternating A B A B on this
# machine, so that a change's cost is read against the same run's noise.
# REV is any git revision (say the commit before a change); the other build
# is the working tree. Both run today's benches/run.sh. The builds are
# installed by turns into a private copy of PostgreSQL 15 (it finds its
# lib/ and share/ next to its bin/), never into the system's.
#   benches/compare.sh REV [ROUNDS]      (ROUNDS pairs, default 2)
# BENCH_SCRIPT=queue.sh or queue_fleet.sh compares those benchmarks instead
# of run.sh (their environment, say BENCH_SECONDS, passes through).
# Output: $BENCH_DIR/compare/{old,new}_N.txt and a table of means.
set -euo pipefail
cd "$(dirname "$0")/.."

rev=${1:?usage: benches/compare.sh REV [ROUNDS]}
rounds=${2:-2}
script=${BENCH_SCRIPT:-run.sh}
# Which field, counted from a row's end, holds pg_distlock's figure: run.sh
# and queue.sh print "name  baseline  pg_distlock  ratio", the fleet
# "workload  jobs/s  enqueue-ms  dead/job".
case $script in
  run.sh | queue.sh) from_end=1 ;;
  queue_fleet.sh) from_end=2 ;;
  *) echo "compare.sh: BENCH_SCRIPT must be run.sh, queue.sh or queue_fleet.sh, not $script" >&2; exit 2 ;;
esac
out=${BENCH_DIR:-/tmp/pg_distlock_bench}/compare
pg_config=/usr/lib/postgresql/15/bin/pg_config
mkdir -p "$out"
scripts/setup.sh

# shellcheck source=../scripts/packaging.sh
source scripts/packaging.sh
# A private PostgreSQL 15 tree to install builds into.
private="$out/postgresql"
private_postgresql "$private" 15
export PGBIN="$private/usr/lib/postgresql/15/bin"

worktree="$out/tree-$rev"
[ -d "$worktree" ] || git worktree add --detach "$worktree" "$rev" >/dev/null
package_tree "$worktree" "$out/pkg-old" "$worktree/target" "$pg_config" pg15
package_tree "$PWD" "$out/pkg-new" "${CARGO_TARGET_DIR:-$PWD/target}" "$pg_config" pg15

for i in $(seq 1 "$rounds"); do
  for build in old new; do
    echo "== round $i: $build"
    install_package "$out/pkg-$build" "$private"
    BENCH_INSTALL=0 BENCH_LATENCY_SAMPLES="$out/${build}_$i.samples" "benches/$script" >"$out/${build}_$i.txt" 2>&1
  done
done

# Rows are "name  baseline  pg_distlock  ratio"; compare the pg_distlock column.
awk -v k="$from_end" '
  FNR == 1 { build = (FILENAME ~ /\/old_/) ? "old" : "new"; table = 0 }
  /^(benchmark|workload)/ { table = 1; next }
  table && NF >= 4 && (k != 1 || $(NF) ~ /x$/) && $(NF - k) ~ /^[0-9.]+(\/s)?$/ {
    name = $0; sub(/[[:space:]]+[^[:space:]]+[[:space:]]+[^[:space:]]+[[:space:]]+[^[:space:]]+$/, "", name)
    value = $(NF - k); sub(/\/s$/, "", value)
    sum[build, name] += value; n[build, name]++; names[name] = 1
  }
  /^$/ { table = 0 }
  END {
    printf "%-48s %14s %14s %9s\n", "benchmark (pg_distlock column, mean)", "old", "new", "new/old"
    for (name in names) if (n["old", name] && n["new", name]) {
      o = sum["old", name] / n["old", name]; w = sum["new", name] / n["new", name]
      printf "%-48s %14.1f %14.1f %9.2f\n", name, o, w, (o ? w / o : 0)
    }
  }' "$out"/old_*.txt "$out"/new_*.txt
echo "(rows in ms are times: below 1.00 is faster; rows in tps or /s are rates: above 1.00 is faster)"
