#!/usr/bin/env bash
# The whole test suite, against Postgres and against SQLite.
#
# Postgres is found in this order: $DATABASE_URL, then a server on
# 127.0.0.1:5432 (user postgres), else a throwaway cluster is started with
# initdb/pg_ctl in a temp dir (Debian's postgresql package is installed first
# when its binaries are missing). The tests use a fresh database
# `memoryd_test` on it; SQLite needs nothing. The tests of workspaces in a
# bucket use moto's S3-compatible server, installed from PyPI and started here.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'test.sh: %s\n' "$*" >&2; }
# Each part's start, in seconds since the run began: where a slow run spends its time.
part() { log "[${SECONDS}s] $*"; }

pg_bin_dir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
  return 1
}

ensure_pg_binaries() {
  pg_bin_dir >/dev/null && return 0
  log "PostgreSQL binaries are missing; installing Debian's postgresql package"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
}

pg_answers() {
  local psql
  psql="$(command -v psql || true)"
  [ -z "$psql" ] && psql="$(pg_bin_dir 2>/dev/null)/psql"
  [ -x "$psql" ] && "$psql" "$1" -Atqc 'select 1' >/dev/null 2>&1
}

THROWAWAY=""
DROP_TEST_DATABASE=""
cleanup() {
  if [ -n "$DROP_TEST_DATABASE" ] && [ -z "$THROWAWAY" ]; then
    "$PSQL" "$ADMIN_URL" -qc 'DROP DATABASE IF EXISTS memoryd_test WITH (FORCE)' >/dev/null 2>&1 ||
      log "could not drop the tests' database memoryd_test"
  fi
  if [ -n "$THROWAWAY" ]; then
    local bin; bin="$(pg_bin_dir)"
    if [ "$(id -u)" -eq 0 ]; then
      runuser -u postgres -- "$bin/pg_ctl" -D "$THROWAWAY/data" -m immediate stop >/dev/null 2>&1 || true
    else
      "$bin/pg_ctl" -D "$THROWAWAY/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$THROWAWAY"
  fi
}
S3_PID=""
stop_s3() { [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null || true; }
trap 'stop_s3; cleanup' EXIT

start_throwaway() {
  ensure_pg_binaries
  local bin port as
  bin="$(pg_bin_dir)"
  port=$(( 20000 + RANDOM % 20000 ))
  THROWAWAY="$(mktemp -d /tmp/memoryd-pg.XXXXXX)"
  as=()
  if [ "$(id -u)" -eq 0 ]; then
    # initdb refuses to run as root.
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$THROWAWAY"
    as=(runuser -u postgres --)
  fi
  "${as[@]}" "$bin/initdb" -D "$THROWAWAY/data" -U postgres --auth=trust >/dev/null
  "${as[@]}" "$bin/pg_ctl" -D "$THROWAWAY/data" -l "$THROWAWAY/log" -w \
    -o "-p $port -k $THROWAWAY -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  ADMIN_URL="postgres://postgres@127.0.0.1:$port/postgres"
  log "started a throwaway PostgreSQL on port $port"
}

if [ -n "${DATABASE_URL:-}" ] && [[ "$DATABASE_URL" == postgres* ]] && pg_answers "$DATABASE_URL"; then
  ADMIN_URL="$DATABASE_URL"
elif pg_answers "postgres://postgres@127.0.0.1:5432/postgres"; then
  ADMIN_URL="postgres://postgres@127.0.0.1:5432/postgres"
else
  start_throwaway
fi

PSQL="$(command -v psql || echo "$(pg_bin_dir)/psql")"
"$PSQL" "$ADMIN_URL" -qc 'DROP DATABASE IF EXISTS memoryd_test WITH (FORCE)' >/dev/null
"$PSQL" "$ADMIN_URL" -qc 'CREATE DATABASE memoryd_test' >/dev/null
export MEMORYD_TEST_DATABASE_URL="${ADMIN_URL%/*}/memoryd_test"
# Every Postgres test makes a schema of its own in this database; the database
# goes when the run ends, so a server the runs share keeps nothing of them
# (MEMORYD_KEEP_TEST_DATABASE=1 keeps it to look into a failure).
[ "${MEMORYD_KEEP_TEST_DATABASE:-}" = "1" ] || DROP_TEST_DATABASE=1
log "Postgres for the tests: ${MEMORYD_TEST_DATABASE_URL}"

# The API description must be valid OpenAPI (the drift against the router is a Rust test).
if ! python3 -c 'import openapi_spec_validator' 2>/dev/null; then
  log "installing openapi-spec-validator from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check openapi-spec-validator
fi
python3 -m openapi_spec_validator openapi.yaml

# Test tools from PyPI, in a virtual environment of their own (about 30 s to
# install once; no build): moto's S3-compatible server, for the tests of
# workspaces in a bucket, and kubernetes-validate, which checks the Kubernetes
# manifests against the API's schemas (it carries them: no cluster needed).
TOOLS="$PWD/target/testtools"
if [ ! -x "$TOOLS/bin/moto_server" ] || [ ! -x "$TOOLS/bin/kubernetes-validate" ]; then
  log "installing moto's S3 server and kubernetes-validate from PyPI into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check \
    "moto[server]==5.2.1" "kubernetes-validate==1.37.0"
fi
"$TOOLS/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml

# moto's server on a free loopback port (about 2 s to start), stopped when the run ends.
S3_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$TOOLS/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >target/moto_server.log 2>&1 &
S3_PID=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$S3_PORT/" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$S3_PORT/" >/dev/null || { log "moto's S3 server did not start"; exit 1; }
export MEMORYD_TEST_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
log "S3 for the tests: $MEMORYD_TEST_S3_ENDPOINT"

status=0
part "the Rust tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast "$@" || status=$?
else
  cargo test --no-fail-fast "$@" || status=$?
fi

# The Python client (clients/python) and the console in a headless Chromium
# (tests/browser), against the binary the Rust tests built, in a virtual
# environment of their own (MEMORYD_SKIP_PYTHON=1 skips both). The client is
# type-checked (mypy --strict) and linted (ruff) first.
if [ "${MEMORYD_SKIP_PYTHON:-}" != "1" ]; then
  part "the Python client's checks and tests"
  cargo build --quiet --bin memoryd
  BIN="$PWD/target/debug/memoryd"
  VENV="$PWD/target/pyvenv"
  if [ ! -x "$VENV/bin/pytest" ] || [ clients/python/pyproject.toml -nt "$VENV/bin/pytest" ]; then
    log "creating the Python tests' virtual environment in $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "clients/python[agents,anthropic,test,check]" playwright
    touch "$VENV/bin/pytest"
  fi
  (cd clients/python && "$VENV/bin/mypy" && "$VENV/bin/ruff" check src tests &&
    "$VENV/bin/ruff" format --check src tests) || status=$?
  # The MCP Inspector CLI (and the Node 22 it needs), from its lockfile, for
  # the test that reads memoryd as the Inspector shows it.
  if command -v npm >/dev/null 2>&1 &&
    (cd tests/mcp-inspector && npm ci --no-audit --no-fund --loglevel=error); then
    export MEMORYD_MCP_INSPECTOR="$PWD/tests/mcp-inspector"
  elif [ "${CI:-}" = "true" ]; then
    log "could not install the MCP Inspector"
    status=1
  fi
  part "the Python client's tests"
  (cd clients/python && MEMORYD_BIN="$BIN" "$VENV/bin/pytest" -q -p no:cacheprovider) || status=$?
  if ! command -v chromium >/dev/null 2>&1; then
    log "installing Debian's chromium for the browser tests"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null; } ||
      log "could not install chromium: the browser tests will say SKIPPED"
  fi
  part "the console's browser tests"
  (cd tests/browser && MEMORYD_BIN="$BIN" MEMORYD_CHROMIUM="$(command -v chromium)" \
    "$VENV/bin/pytest" -q -p no:cacheprovider) || status=$?
fi

# The TypeScript client (clients/typescript): installed from its lockfile,
# type-checked strictly, built, and tested with node:test against the same
# binary (MEMORYD_SKIP_TYPESCRIPT=1 skips).
if [ "${MEMORYD_SKIP_TYPESCRIPT:-}" != "1" ]; then
  if command -v npm >/dev/null 2>&1; then
    part "the TypeScript client's checks and tests"
    cargo build --quiet --bin memoryd
    BIN="$PWD/target/debug/memoryd"
    (cd clients/typescript &&
      npm ci --no-audit --no-fund --loglevel=error &&
      npm run --silent typecheck &&
      npm run --silent build &&
      MEMORYD_BIN="$BIN" node --test test/) || status=$?
  else
    log "npm is missing: the TypeScript client's tests are SKIPPED"
  fi
fi
part "done"
exit "$status"
