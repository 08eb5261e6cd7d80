# Sourced by cluster.sh and ha.sh. A pid file outlives its process: after a
# restart of the machine its number may belong to an unrelated process, which
# a blind `kill` would stop and which makes PgBouncer refuse to start. A pid
# counts as ours only while that process's command line names our file or
# directory; a file naming anything else is stale and removed.

# our_pid FILE MARK: prints the pid in FILE when it is alive and its command
# line contains MARK; otherwise removes FILE and fails.
our_pid() {
  local file=$1 mark=$2 pid
  [ -f "$file" ] || return 1
  pid=$(head -n 1 "$file" 2>/dev/null | tr -dc 0-9)
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$mark"; then
    echo "$pid"
    return 0
  fi
  rm -f "$file"
  return 1
}
