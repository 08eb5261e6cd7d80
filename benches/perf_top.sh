#!/usr/bin/env bash
# The top symbols (self time, every process) of the perf profiles
# DIR/PREFIX-*.data that benches/queue_pressure.sh records with BENCH_PERF=1,
# one table per window, so that what grows from window to window shows.
#   benches/perf_top.sh DIR PREFIX [LINES]
set -euo pipefail
dir=$1 prefix=$2 lines=${3:-25}
shopt -s nullglob
files=("$dir/$prefix"-*.data)
[ ${#files[@]} -gt 0 ] || { echo "no profile $dir/$prefix-*.data"; exit 0; }
for data in "${files[@]}"; do
  echo "== $(basename "$data" .data): top $lines symbols by self time (command, shared object, symbol)"
  { perf report -i "$data" --no-children --sort comm,dso,symbol --stdio -g none 2>/dev/null || true; } \
    | { grep -E '^ +[0-9]' || echo "  (no samples)"; } | sed -E 's/[ -]+$//; s/  +/  /g' | awk -v n="$lines" 'NR <= n'
done
