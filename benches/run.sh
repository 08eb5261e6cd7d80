#!/usr/bin/env bash
# pg_distlock against straightforward PL/pgSQL/SQL versions of the same work
# (benches/baseline.sql), measured side by side in one run on two throwaway
# clusters: one with pg_distlock preloaded (shared-memory mode) and one
# without (table mode). fsync and synchronous_commit are on, as in production.
# Prints ratios; these are measurements, not pass/fail tests.
#   BENCH_SECONDS=8 benches/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-8}
dir=${BENCH_DIR:-/tmp/pg_distlock_bench}
memory_port=55532
table_port=55533

scripts/setup.sh
# benches/compare.sh installs the builds it compares itself.
if [ "${BENCH_INSTALL:-1}" = 1 ]; then
  PG_CONFIG="${PGBIN:-/usr/lib/postgresql/15/bin}/pg_config" scripts/install.sh >/dev/null 2>&1
fi

source benches/lib.sh
start_bench_clusters "$dir" "memory:$memory_port:pg_distlock" "table:$table_port:"
for port in "$memory_port" "$table_port"; do
  psql_on "$port" -f benches/baseline.sql
  psql_on "$port" -c "
    INSERT INTO distlock.scheduled_tasks (task_name, task_type) SELECT 'task-' || g, 'bench' FROM generate_series(1, 1000) g;
    INSERT INTO recipe.scheduled_tasks (task_name, task_type) SELECT 'task-' || g, 'bench' FROM generate_series(1, 1000) g;
    -- The recipe unlocks before its insert commits, so two first calls for a
    -- key can both insert; existing rows keep that race out of the timing.
    INSERT INTO recipe.rate_limits SELECT 'key-' || g, now(), 0 FROM generate_series(1, 10000) g;
    INSERT INTO recipe.rate_limits VALUES ('hot', now(), 0);"
done

best_ms() { psql_on "$1" -c "SELECT recipe.best_ms(\$q\$$2\$q\$, ${3:-3})"; }
tps() {
  "$bin/pgbench" -n -M prepared -c 8 -j 2 -T "$seconds" -f "benches/pgbench/$2.sql" "${@:3}" -h 127.0.0.1 -p "$1" -U postgres bench 2>/dev/null \
    | awk '/^tps = / { printf "%.0f", $3 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
rows=()
row() { rows+=("$(printf '%-44s %16s %16s %9s' "$1" "$2" "$3" "$4")"); echo "  $1: $2 -> $3 ($4)"; }

echo "== lock_id over 1M strings, one backend (ms, best of 3)"
strings=$(best_ms "$memory_port" "SELECT sum(length('key-' || g)) FROM generate_series(1, 1000000) g")
sql_md5=$(best_ms "$memory_port" "SELECT sum(('x' || substr(md5('key-' || g), 1, 16))::bit(64)::bigint) FROM generate_series(1, 1000000) g")
ext=$(best_ms "$memory_port" "SELECT sum(distlock.lock_id('key-' || g)) FROM generate_series(1, 1000000) g")
row "lock_id x 1M, ms" "$sql_md5" "$ext" "$(ratio "$sql_md5" "$ext")"
net() { awk -v a="$1" -v b="$strings" 'BEGIN { printf "%.1f", a - b }'; }
row "lock_id x 1M, ms net of building the strings" "$(net "$sql_md5")" "$(net "$ext")" "$(ratio "$(net "$sql_md5")" "$(net "$ext")")"

echo "== snowflake IDs, one backend"
recipe_10k=$(best_ms "$memory_port" "SELECT max(recipe.generate_snowflake_id(1)) FROM generate_series(1, 10000) g")
memory_1m=$(best_ms "$memory_port" "SELECT max(distlock.generate_snowflake_id(1)) FROM generate_series(1, 1000000) g")
table_1m=$(best_ms "$table_port" "SELECT max(distlock.generate_snowflake_id(1)) FROM generate_series(1, 1000000) g")
per_s() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.0f", n / (ms / 1000) }'; }
recipe_rate=$(per_s 10000 "$recipe_10k")
memory_rate=$(per_s 1000000 "$memory_1m")
table_rate=$(per_s 1000000 "$table_1m")
row "snowflake IDs/s, memory mode (1M vs 10k)" "$recipe_rate" "$memory_rate" "$(ratio "$memory_rate" "$recipe_rate")"
row "snowflake IDs/s, table mode (1M vs 10k)" "$recipe_rate" "$table_rate" "$(ratio "$table_rate" "$recipe_rate")"
# The ID layout's ceiling: 4096 sequence numbers per millisecond per worker id.
row "snowflake IDs/s, memory mode, of the layout's" "4096000" "$memory_rate" "$(ratio "$memory_rate" 4096000)"

echo "== pgbench, 8 clients, ${seconds}s each (tps)"
claim_base=$(tps "$memory_port" claim_release_plpgsql)
claim_ext=$(tps "$memory_port" claim_release_ext)
row "claim + release cycle, tps" "$claim_base" "$claim_ext" "$(ratio "$claim_ext" "$claim_base")"
# One commit per run: release_and_fetch_task ends a run and claims the next due
# task. Each run takes one of these due tasks (no cron: a finished one is not due
# again), more than a run of $seconds s can use; the ones left are checked after.
due_tasks=$((12000 * seconds))
psql_on "$memory_port" -c "
  INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at)
  SELECT 'due-' || g, 'bench', now() - interval '1 hour' FROM generate_series(1, $due_tasks) g" >/dev/null
fused_run() {
  psql_on "$memory_port" -c "UPDATE distlock.scheduled_tasks SET next_run_at = now() - interval '1 hour' WHERE task_name LIKE 'due-%'" \
    -c "VACUUM ANALYZE distlock.scheduled_tasks" >/dev/null
  tps "$memory_port" "$@"
  left=$(psql_on "$memory_port" -c "SELECT count(*) FROM distlock.scheduled_tasks WHERE task_name LIKE 'due-%' AND next_run_at IS NOT NULL")
  [ "$left" -gt 0 ] || echo "warning: every due task ran; the figure below is low" >&2
}
claim_fused=$(fused_run task_run_fused_ext -D held=0)
row "task run, one commit (release_and_fetch_task)" "$claim_base" "$claim_fused" "$(ratio "$claim_fused" "$claim_base")"
lease_fused=$(fused_run task_lease_run_fused_ext -D held=0 -D token=0)
row "  the same in lease mode" "$claim_base" "$lease_fused" "$(ratio "$lease_fused" "$claim_base")"
psql_on "$memory_port" -c "
  CREATE TABLE IF NOT EXISTS public.commit_ceiling (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
  INSERT INTO public.commit_ceiling (id) SELECT g FROM generate_series(0, 63) g ON CONFLICT DO NOTHING" >/dev/null
ceiling=$(tps "$memory_port" commit_ceiling)
row "  task runs of the commit ceiling" "$ceiling" "$claim_fused" "$(ratio "$claim_fused" "$ceiling")"
lease_base=$(tps "$memory_port" lease_plpgsql)
lease_ext=$(tps "$memory_port" lease_ext)
row "lease acquire + release, tps" "$lease_base" "$lease_ext" "$(ratio "$lease_ext" "$lease_base")"
# Steady state: each key's name is recorded once, on first use.
psql_on "$memory_port" -c "SELECT count(distlock.lock('key-' || g)) + count(distlock.unlock('key-' || g)) FROM generate_series(1, 10000) g" >/dev/null
lock_raw=$(tps "$memory_port" lock_text_raw)
lock_ext=$(tps "$memory_port" lock_text_ext)
row "lock + unlock (text key), tps" "$lock_raw" "$lock_ext" "$(ratio "$lock_ext" "$lock_raw")"
for keys in 10k hot; do
  base=$(tps "$memory_port" "rate_${keys}_plpgsql")
  memory=$(tps "$memory_port" "rate_${keys}_ext")
  table=$(tps "$table_port" "rate_${keys}_ext")
  row "check_rate_limit ($keys keys), memory mode, tps" "$base" "$memory" "$(ratio "$memory" "$base")"
  row "check_rate_limit ($keys keys), table mode, tps" "$base" "$table" "$(ratio "$table" "$base")"
  # The round-trip ceiling, measured next to the memory-mode run: what one
  # trivial statement per transaction reaches under the same settings.
  select_1=$(tps "$memory_port" select_1)
  memory_again=$(tps "$memory_port" "rate_${keys}_ext")
  row "  $keys keys, memory, of SELECT 1's round trips" "$select_1" "$memory_again" "$(ratio "$memory_again" "$select_1")"
  # 100 checks per transaction: the server's cost per check, with the
  # client round trip (the same for both) mostly taken out.
  base=$(tps "$memory_port" "rate_${keys}_batch_plpgsql")
  memory=$(tps "$memory_port" "rate_${keys}_batch_ext")
  if [ "${base:-0}" -gt 0 ]; then
    row "  $keys keys, 100 checks per transaction, memory" "$((base * 100))/s" "$((memory * 100))/s" "$(ratio "$memory" "$base")"
  else
    # The recipe releases its session lock before its row lock (held to
    # commit), so batched callers of one key deadlock.
    row "  $keys keys, 100 checks per transaction, memory" "deadlocks" "$((memory * 100))/s" "-"
  fi
done

echo "== a claim from a queue of 10 jobs while another queue holds 1M runnable ones (tps)"
psql_on "$memory_port" -c "SELECT distlock.enqueue_task('small-job', p_queue => 'small') FROM generate_series(1, 10)" >/dev/null
small_alone=$(tps "$memory_port" queue_small_ext)
# Higher priority than every small job: a claim reading the runnable jobs in
# priority order without the queue's index would step over all of them.
psql_on "$memory_port" -c "
  INSERT INTO distlock.task_queue (task_name, queue, priority) SELECT 'big-job', 'big', 10 FROM generate_series(1, 1000000);" >/dev/null
psql_on "$memory_port" -c "VACUUM ANALYZE distlock.task_queue" >/dev/null
small_beside_big=$(tps "$memory_port" queue_small_ext)
row "queue of 10 jobs: claim cycle beside 1M others" "$small_alone" "$small_beside_big" "$(ratio "$small_beside_big" "$small_alone")"
psql_on "$memory_port" -c "DELETE FROM distlock.task_queue WHERE queue = 'big'" >/dev/null
psql_on "$memory_port" -c "VACUUM distlock.task_queue" >/dev/null

echo "== one call's cost by security form, one backend (ms, best of 3)"
# The same C function bound three ways: as pg_distlock binds it (no pinned
# search_path, rights switched in the code), with a pinned search_path, and
# SECURITY DEFINER with a pinned search_path.
psql_on "$memory_port" -c "
  SELECT distlock.acquire_lease('bench-form', 'me', '1 hour');
  CREATE SCHEMA forms;
  CREATE FUNCTION forms.pinned(text, bigint) RETURNS boolean LANGUAGE c STABLE
    AS '\$libdir/pg_distlock', 'check_lease_token_wrapper' SET search_path = pg_catalog, pg_temp;
  CREATE FUNCTION forms.definer_pinned(text, bigint) RETURNS boolean LANGUAGE c STABLE SECURITY DEFINER
    AS '\$libdir/pg_distlock', 'check_lease_token_wrapper' SET search_path = pg_catalog, pg_temp;" >/dev/null
calls() { best_ms "$memory_port" "SELECT count($1('bench-form', 1)) FROM generate_series(1, 200000) g"; }
ours=$(calls distlock.check_lease_token)
pinned=$(calls forms.pinned)
definer=$(calls forms.definer_pinned)
row "lease check x 200k, ms: pinned search_path" "$pinned" "$ours" "$(ratio "$pinned" "$ours")"
row "  same, SECURITY DEFINER + pinned search_path" "$definer" "$ours" "$(ratio "$definer" "$ours")"

echo
echo "pg_distlock benchmark, $(date -u +%Y-%m-%d)"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "postgres: $("$bin/postgres" --version), fsync on, synchronous_commit on"
echo
printf '%-44s %16s %16s %9s\n' "benchmark" "baseline" "pg_distlock" "ratio"
printf '%s\n' "${rows[@]}"
echo
echo "pgbench sends every statement prepared (-M prepared), as an application's driver does."
echo "Baselines: benches/baseline.sql (PL/pgSQL recipes; the SQL md5 expression for lock_id);"
echo "lock + unlock is measured against pg_advisory_lock(hashtext(key)) + pg_advisory_unlock."
echo "One check per pgbench transaction is bound by the client round trip on this 2-core machine;"
echo "the 100-per-transaction rows show the server-side cost of a check."
echo "The PL/pgSQL snowflake generator rewrites one row per ID, which grows quadratically within"
echo "a statement, so it is measured over 10k IDs (its best per-ID rate) against 1M for pg_distlock."
echo "The lease-check rows compare ways of binding one function (baseline: the other form)."
echo "The queue row's baseline is the same cycle with no other queue holding jobs."
echo "Task runs: the recipe's claim + release (two commits per run) against release_and_fetch_task"
echo "(one commit per run, claiming the next due task); the ceiling is one one-row update per"
echo "transaction (benches/pgbench/commit_ceiling.sql)."
