#!/usr/bin/env bash
# Tests of the Python client (clients/python) against clusters of its own:
# a primary with pg_cron and pg_distlock preloaded, its streaming standby
# (promoted by the failover test, which runs last), and a transaction-pooling
# PgBouncer in front of the primary, on ports 55436-55438. The client is
# installed into a fresh venv from the checkout, as a user would.
#   PYTHON (default python3), DISTLOCK_PY_TEST_DIR, PYTEST_ARGS
set -euo pipefail
cd "$(dirname "$0")/.."

v=${PG_MAJOR:-15}
pgbin=/usr/lib/postgresql/$v/bin
work=${DISTLOCK_PY_TEST_DIR:-/tmp/pg_distlock_pytest}/pg$v
primary_port=55436
standby_port=55437
pooler_port=55438

if [ ! -f "$("$pgbin/pg_config" --sharedir)/extension/pg_distlock.control" ]; then
  scripts/install.sh
fi

cleanup() {
  scripts/cluster.sh stop "$work/pgbouncer" || true
  scripts/cluster.sh stop "$work/standby" || true
  scripts/cluster.sh stop "$work/primary" || true
}
trap cleanup EXIT

cleanup
rm -rf "$work/primary" "$work/standby" "$work/pgbouncer"
mkdir -p "$work"
chown postgres "$work" "$(dirname "$work")"

echo "== python client: clusters on $primary_port (primary), $standby_port (standby), $pooler_port (PgBouncer)"
scripts/cluster.sh start "$work/primary" "$primary_port" pg_cron,pg_distlock
scripts/cluster.sh standby "$work/standby" "$standby_port" "$primary_port"
scripts/cluster.sh bouncer "$work/pgbouncer" "$pooler_port" "$primary_port"

echo "== python client: building its wheel and sdist, installing each into a fresh venv"
rm -rf "$work/venv" "$work/build-venv" "$work/sdist-venv" "$work/dist"
"${PYTHON:-python3}" -m venv "$work/build-venv"
"$work/build-venv/bin/pip" install --quiet --disable-pip-version-check build
"$work/build-venv/bin/python" -m build --outdir "$work/dist" clients/python >/dev/null
# Building writes nothing into the checkout (setuptools left build/ and an
# egg-info beside the sources).
if git rev-parse --git-dir >/dev/null 2>&1; then
  left=$(git status --porcelain --ignored -- clients/python | grep '^!!' | grep -v '__pycache__/$' || true)
  if [ -n "$left" ]; then
    echo "python client: building wrote into the checkout:" >&2
    echo "$left" >&2
    exit 1
  fi
fi
wheel=$(ls "$work"/dist/pg_distlock-*.whl)
sdist=$(ls "$work"/dist/pg_distlock-*.tar.gz)
# The tests run against the wheel, as a user would install it.
"${PYTHON:-python3}" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[test]"
# The sdist installs and imports on its own, with nothing but its declared dependencies.
"${PYTHON:-python3}" -m venv "$work/sdist-venv"
"$work/sdist-venv/bin/pip" install --quiet --disable-pip-version-check "$sdist"
"$work/sdist-venv/bin/python" -c "import pg_distlock, pg_distlock.aio; pg_distlock.Client; pg_distlock.aio.Client"

echo "== python client: mypy --strict"
(cd clients/python && "$work/venv/bin/mypy" --cache-dir "$work/mypy_cache")

echo "== python client: pytest"
# The tests import the installed package (src/ is not on the path).
(
  cd clients/python
  DISTLOCK_PY_PRIMARY_PORT=$primary_port \
  DISTLOCK_PY_STANDBY_PORT=$standby_port \
  DISTLOCK_PY_POOLER_PORT=$pooler_port \
  DISTLOCK_PY_PRIMARY_PGDATA="$work/primary" \
  DISTLOCK_PY_STANDBY_PGDATA="$work/standby" \
  DISTLOCK_PY_PGBIN="$pgbin" \
    "$work/venv/bin/python" -m pytest -p no:cacheprovider ${PYTEST_ARGS:-}
)
# Passed: in lean mode (scripts/test.sh) its clusters need not stay.
if [ "${DISTLOCK_LEAN_DISK:-}" = 1 ]; then
  cleanup
  rm -rf "$work/primary" "$work/standby" "$work/venv" "$work/build-venv" "$work/sdist-venv"
fi
