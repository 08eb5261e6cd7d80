#!/usr/bin/env bash
# Installs everything pg_distlock needs on Debian 12 and registers
# PostgreSQL 15 with pgrx; for each other version in PG_VERSIONS (17, 18) it
# prepares a Debian root with that version (scripts/pgroot.sh) and registers
# it with pgrx there. Idempotent: quick when all is already there.
set -euo pipefail

PGRX_VERSION=0.18.1
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron pgbouncer libclang-dev clang sudo patroni etcd-server
          prometheus chromium chromium-driver)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
  echo "setup: installing cargo-pgrx ${PGRX_VERSION} (about 5-13 minutes the first time)"
  cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
fi

if ! grep -qs "^pg15 = \"${PG_CONFIG}\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  cargo pgrx init --pg15 "${PG_CONFIG}"
fi

# The test, benchmark and demo clusters listen on fixed loopback ports that
# lie inside Linux's ephemeral range (32768-60999): an outgoing connection of
# an earlier step could be handed one of them as its local port, and a
# server started later then fails with "address already in use". Reserving
# them keeps the kernel from handing them out.
# 55536 is the PgBouncer of tests/scripts/stale_pidfiles.sh (55535 + 1).
RESERVED_PORTS="55432-55445,55532-55536,55632"
reserved=$(cat /proc/sys/net/ipv4/ip_local_reserved_ports 2>/dev/null || true)
case ",$reserved," in
  *",55432-55445,55532-55536,"*) ;;
  *)
    if ! as_root sysctl -q -w net.ipv4.ip_local_reserved_ports="${reserved:+$reserved,}$RESERVED_PORTS" 2>/dev/null; then
      echo "setup: could not reserve ports $RESERVED_PORTS; a server may rarely find its port taken" >&2
    fi
    ;;
esac

for v in ${PG_VERSIONS:-15}; do
  [ "$v" = 15 ] && continue
  scripts_dir=$(dirname "$0")
  "$scripts_dir/pgroot.sh" prepare "$v"
  "$scripts_dir/pgroot.sh" run "$v" bash -c \
    'grep -qs "^pg$PG_MAJOR = " "$PGRX_HOME/config.toml" ||
       { mkdir -p "$PGRX_HOME" && cargo pgrx init "--pg$PG_MAJOR" "/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" >/dev/null; }'
done
