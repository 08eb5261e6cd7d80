#!/usr/bin/env bash
# PostgreSQL versions that Debian 12 does not carry run from Debian's own
# binaries in a debootstrapped root: 17 from trixie, 18 from sid (their
# binaries need a newer glibc than bookworm's). The host's Rust toolchain,
# cargo-pgrx, /tmp and this checkout are bind-mounted into the root, so a
# build and a test run there exactly as on the host; servers started there
# listen on the host's loopback like any other.
#   scripts/pgroot.sh prepare VERSION         create or refresh the root (cached)
#   scripts/pgroot.sh run VERSION CMD [ARG…]  run CMD in the root, in this checkout
#   scripts/pgroot.sh dir VERSION [clean]     where the root is
#   scripts/pgroot.sh prepare-clean VERSION   a root with that version's server
#                                             and nothing of this project (15:
#                                             bookworm), to test packages in
#   scripts/pgroot.sh run-clean VERSION CMD…  run CMD there, nothing bound in
# The host's own apt sources are never touched: debootstrap and the root's
# apt fetch the other suites.
set -euo pipefail

project=$(cd "$(dirname "$0")/.." && pwd)
roots=${DISTLOCK_ROOTS:-/var/cache/pg_distlock/roots}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

suite_of() {
  case "$1" in
    15) echo bookworm ;;
    17) echo trixie ;;
    18) echo sid ;;
    *) echo "pgroot: no root for PostgreSQL $1" >&2; exit 2 ;;
  esac
}

packages_of() {
  local v=$1
  if [ "${2:-}" = clean ]; then
    echo "postgresql-$v ca-certificates"
    return
  fi
  # Build: the server headers, clang for pgrx's bindgen, a C toolchain for
  # crates that build C. Tests: pg_cron, PgBouncer, sudo for
  # `cargo pgrx test --runas`, Python for the client, Patroni and etcd for
  # the failover stack.
  echo "postgresql-$v postgresql-server-dev-$v postgresql-$v-cron clang libclang-dev gcc libc6-dev make" \
       "pkg-config sudo ca-certificates pgbouncer python3 python3-venv patroni python3-etcd etcd-server procps iproute2"
  # The newest version runs the Python client's tests (scripts/test.sh):
  # Prometheus scrapes the exporter, Chromium shows the console.
  local versions=${PG_VERSIONS:-"15 17 18"}
  if [ "$v" = "${versions##* }" ]; then
    echo "prometheus chromium chromium-driver fonts-dejavu-core"
  fi
}

dir_of() { echo "$roots/$(suite_of "$1")-pg$1${2:+-$2}"; }

# enter ROOT BIND_COUNT BIND… CMD…: runs CMD chrooted in ROOT, with /proc,
# /dev and /sys (package scripts need them) and the given host directories
# bound at the same paths, in a mount namespace of its own: the binds end
# with the last process in it, so nothing is left mounted on the host.
enter() {
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --mount --propagation private -- bash -euc '
    root=$1 nmounts=$2; shift 2
    for ((i = 0; i < nmounts; i++)); do
      mkdir -p "$root$1"
      mount --rbind "$1" "$root$1"
      shift
    done
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    mount -t tmpfs -o size=1g shm "$root/dev/shm"
    exec chroot "$root" "$@"
  ' pgroot "$@"
}

root_apt() {
  local root=$1; shift
  enter "$root" 0 /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get -qq \
    -o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false "$@"
}

prepare() {
  local v=$1 kind=${2:-} suite root want stamp
  suite=$(suite_of "$v")
  root=$(dir_of "$v" "$kind")
  want=$(packages_of "$v" "$kind")
  stamp="$root/.pg_distlock-packages"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    trust_as_host "$root"
    return
  fi
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  if [ ! -x "$root/usr/bin/apt-get" ]; then
    echo "pgroot: debootstrap $suite into $root (about a minute)"
    rm -rf "$root"
    mkdir -p "$roots"
    debootstrap --variant=minbase "$suite" "$root" "$mirror" >/dev/null
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # No server may start inside the root at package installation.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  # Nor is a default cluster wanted: tests make their own.
  mkdir -p "$root/etc/postgresql-common"
  echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.conf"
  echo "pgroot: installing PostgreSQL $v and the test tools into the $suite root"
  root_apt "$root" update
  # A run cut short may have left packages unconfigured.
  enter "$root" 0 /usr/bin/dpkg --configure -a >/dev/null
  # shellcheck disable=SC2086 # the list is words
  root_apt "$root" install -y $want >/dev/null
  # The downloaded .debs are half a GB a root, and never read again.
  root_apt "$root" clean
  trust_as_host "$root"
  echo "$want" >"$stamp"
}

# The host's own trust anchors and pip settings (a proxy's CA, a mirror) hold
# in the root too, so that pip and cargo there reach the registries as here.
trust_as_host() {
  local root=$1
  if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
    enter "$root" 0 /usr/sbin/update-ca-certificates >/dev/null 2>&1
  fi
  if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
}

run() {
  local v=$1; shift
  local root
  root=$(dir_of "$v")
  [ -f "$root/.pg_distlock-packages" ] || prepare "$v"
  local home=${HOME:-/root}
  local mounts=("/tmp" "$project" "$home/.cargo" "$home/.rustup")
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then mounts+=("$CARGO_TARGET_DIR"); fi
  local target=${CARGO_TARGET_DIR:-$project/target}/pg$v-root
  local keep=() name
  while IFS= read -r name; do keep+=("$name=${!name}"); done < <(
    compgen -e | grep -E '^(DISTLOCK_.*|PYTEST_ARGS|RUSTFLAGS|CARGO_BUILD_JOBS|CARGO_INCREMENTAL|CI|PG_VERSIONS|PIP_DEFAULT_TIMEOUT|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)$' || true)
  enter "$root" "${#mounts[@]}" "${mounts[@]}" /usr/bin/env -i \
    HOME="$home" PATH="$home/.cargo/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" TERM="${TERM:-dumb}" \
    LANG=C.UTF-8 PG_MAJOR="$v" PGRX_HOME=/var/lib/pgrx CARGO_TARGET_DIR="$target" "${keep[@]}" \
    bash -c 'cd "$0" && exec "$@"' "$project" "$@"
}

case "${1:-}" in
  prepare) prepare "$2" ;;
  prepare-clean) prepare "$2" clean ;;
  run-clean)
    v=$2; shift 2
    root=$(dir_of "$v" clean)
    [ -f "$root/.pg_distlock-packages" ] || prepare "$v" clean
    enter "$root" 0 /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive "$@"
    ;;
  run) v=$2; shift 2; run "$v" "$@" ;;
  dir) dir_of "$2" "${3:-}" ;;
  *) echo "usage: $0 prepare|run|dir VERSION [CMD…]" >&2; exit 2 ;;
esac
