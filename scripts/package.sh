#!/usr/bin/env bash
# Builds what a user installs without Rust, one artifact per PostgreSQL
# version, into dist/ (or DIST_DIR):
#   15  postgresql-15-pg-distlock_VERSION-1_ARCH.deb   for Debian 12
#   17  postgresql-17-pg-distlock_VERSION-1_ARCH.deb   for Debian 13
#   18  pg_distlock-VERSION-pg18-linux-ARCH.tar.gz     lib/, extension/ and
#       install.sh, which copies them where pg_config says (or under a
#       prefix that extension_control_path and dynamic_library_path name)
# and the Python client's wheel and sdist (pg_distlock-VERSION-py3-none-any.whl,
# pg_distlock-VERSION.tar.gz).
# Each holds the library, the control file, this version's install script,
# every upgrade script and the frozen install scripts of earlier releases,
# so that ALTER EXTENSION pg_distlock UPDATE works from each of them.
# 15 builds on the host, 17 and 18 in their roots (scripts/pgroot.sh).
#   PG_VERSIONS   the versions to package (default "15 17 18")
set -euo pipefail
cd "$(dirname "$0")/.."

dist=${DIST_DIR:-$PWD/dist}
# shellcheck source=packaging.sh
source scripts/packaging.sh

# One artifact for PG_MAJOR, built where that version's pg_config runs.
build_one() {
  local v=${PG_MAJOR:?} pg_config stage version arch libdir extdir
  pg_config=/usr/lib/postgresql/$v/bin/pg_config
  version=$(cargo pkgid | sed 's/.*[#@]//')
  arch=$(dpkg --print-architecture)
  libdir=$("$pg_config" --pkglibdir)
  extdir=$("$pg_config" --sharedir)/extension
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  echo "package: building pg_distlock $version for PostgreSQL $v"
  package_tree "$PWD" "$stage/root" "${CARGO_TARGET_DIR:-$PWD/target}" "$pg_config" "pg$v"
  strip --strip-unneeded "$stage/root$libdir/pg_distlock.so"
  mkdir -p "$dist"
  if [ "$v" = 18 ]; then
    tarball "$stage" "$v" "$version" "$libdir" "$extdir"
  else
    deb "$stage" "$v" "$version" "$arch" "$libdir"
  fi
}

# Depends: the server, and the packages that ship the libraries the .so needs.
library_depends() {
  local library=$1 needed glibc deps=()
  for needed in $(objdump -p "$library" | awk '/NEEDED/ {print $2}'); do
    case "$needed" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
      libgcc_s.so.1) deps+=("libgcc-s1") ;;
      *) echo "package: no Debian package known for $needed" >&2; exit 1 ;;
    esac
  done
  glibc=$(objdump -T "$library" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  deps+=("libc6 (>= $glibc)")
  local IFS=,
  echo "${deps[*]}" | sed 's/,/, /g'
}

deb() {
  local stage=$1 v=$2 version=$3 arch=$4 libdir=$5 name file
  name=postgresql-$v-pg-distlock
  file="$dist/${name}_${version}-1_${arch}.deb"
  mkdir -p "$stage/root/DEBIAN" "$stage/root/usr/share/doc/$name"
  install -m 644 LICENSE "$stage/root/usr/share/doc/$name/copyright"
  cat >"$stage/root/DEBIAN/control" <<CONTROL
Package: $name
Version: $version-1
Architecture: $arch
Maintainer: pg_distlock developers <pg_distlock@localhost>
Depends: postgresql-$v, $(library_depends "$stage/root$libdir/pg_distlock.so")
Suggests: postgresql-$v-cron
Section: database
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$stage/root" | cut -f1)
Description: distributed locks and coordination for PostgreSQL $v
 pg_distlock turns PostgreSQL into a lock and coordination service:
 exclusive claims of scheduled tasks with fencing tokens and a recovery
 sweep, a job queue with leases, leases, semaphores and leader election,
 rate limits and snowflake IDs. CREATE EXTENSION pg_distlock in a database
 to use it; preloading it (shared_preload_libraries) keeps rate limits and
 IDs in shared memory.
CONTROL
  dpkg-deb --root-owner-group -Zxz --build "$stage/root" "$file" >/dev/null
  echo "package: $file"
}

tarball() {
  local stage=$1 v=$2 version=$3 libdir=$4 extdir=$5 name file
  name=pg_distlock-$version-pg$v-linux-$(uname -m)
  file="$dist/$name.tar.gz"
  mkdir -p "$stage/$name/lib" "$stage/$name/extension"
  install -m 755 "$stage/root$libdir/pg_distlock.so" "$stage/$name/lib/"
  install -m 644 "$stage/root$extdir"/pg_distlock* "$stage/$name/extension/"
  install -m 644 LICENSE "$stage/$name/"
  cat >"$stage/$name/install.sh" <<'INSTALL'
#!/bin/sh
# Installs pg_distlock into the PostgreSQL whose pg_config is $PG_CONFIG (or
# the first on PATH), as `make install` of an extension would:
#   ./install.sh                 lib/ into --pkglibdir, extension/ into --sharedir/extension
#   ./install.sh --prefix DIR    into DIR/lib and DIR/extension instead; then set
#                                extension_control_path = '$system:DIR' and
#                                dynamic_library_path = '$libdir:DIR/lib'
#   ./install.sh --uninstall [--prefix DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pg_config=${PG_CONFIG:-pg_config}
prefix= uninstall=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    *) echo "usage: $0 [--prefix DIR] [--uninstall]" >&2; exit 2 ;;
  esac
done
major=$("$pg_config" --version | sed 's/^PostgreSQL \([0-9]*\).*/\1/')
want=@MAJOR@
if [ "$major" != "$want" ]; then
  echo "install.sh: this build is for PostgreSQL $want; $pg_config is PostgreSQL $major" >&2
  exit 1
fi
if [ -n "$prefix" ]; then
  libdir=$prefix/lib extdir=$prefix/extension
else
  libdir=$("$pg_config" --pkglibdir) extdir=$("$pg_config" --sharedir)/extension
fi
if [ -n "$uninstall" ]; then
  rm -f "$libdir/pg_distlock.so"
  for f in "$here"/extension/*; do rm -f "$extdir/$(basename "$f")"; done
  echo "pg_distlock removed from $libdir and $extdir"
  exit 0
fi
mkdir -p "$libdir" "$extdir"
# A new file renamed into place: a running server keeps the library it loaded.
install -m 755 "$here/lib/pg_distlock.so" "$libdir/.pg_distlock.so.new"
mv -f "$libdir/.pg_distlock.so.new" "$libdir/pg_distlock.so"
install -m 644 "$here"/extension/* "$extdir/"
echo "pg_distlock installed into $libdir and $extdir: run CREATE EXTENSION pg_distlock"
INSTALL
  sed -i "s/@MAJOR@/$v/" "$stage/$name/install.sh"
  chmod 755 "$stage/$name/install.sh"
  tar -C "$stage" --owner=0 --group=0 -czf "$file" "$name"
  echo "package: $file"
}

# The Python client's wheel and sdist, built in a venv of their own.
python_client() {
  local venv
  venv=$(mktemp -d)
  trap 'rm -rf "$venv"' RETURN
  echo "package: building the Python client"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check build
  "$venv/bin/python" -m build --outdir "$dist" clients/python >/dev/null
  ls "$dist"/pg_distlock-*.whl "$dist"/pg_distlock-*.tar.gz | sed 's/^/package: /'
}

case "${1:-}" in
  build-one) dist=${2:?}; build_one ;;
  "")
    for v in ${PG_VERSIONS:-15 17 18}; do
      if [ "$v" = 15 ]; then
        PG_MAJOR=15 "$0" build-one "$dist"
      else
        scripts/pgroot.sh run "$v" scripts/package.sh build-one "$dist"
      fi
    done
    python_client
    ;;
  *) echo "usage: $0 [build-one DIST_DIR]" >&2; exit 2 ;;
esac
