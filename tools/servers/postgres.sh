#!/usr/bin/env bash
# A private PostgreSQL server for the tests: initdb + pg_ctl under a directory of its own,
# listening on 127.0.0.1 at a free port. No systemd, no shared cluster.
#
#   bash tools/servers/postgres.sh start   # start (or find running) and print the env vars
#   bash tools/servers/postgres.sh env     # print the env vars of the running server
#   bash tools/servers/postgres.sh stop    # stop it and delete its directory
#
# stdout of start/env is KEY=VALUE lines (eval-able), logs go to stderr:
#   FLOE_TEST_POSTGRES_URI=postgresql://floe:floe-test@127.0.0.1:PORT/floe
#   FLOE_TEST_POSTGRES_DIR=<the server's directory>
# The user `floe` is the cluster's superuser (tests create a database each); password
# authentication (scram-sha-256) on TCP.
#
# Environment:
#   FLOE_PG_DIR   directory of the server (data, socket, log, env); default /tmp/floe-postgres-<uid>.
#                 tools/test.sh passes a fresh temporary directory.
#   FLOE_PG_PORT  port (default: a free one)
#
# Idempotent: start on a running server prints its env again; stop on a stopped one is a
# no-op. Installs Debian's `postgresql` with apt-get when initdb is missing. initdb refuses
# to run as root, so as root the server runs as the `postgres` user (runuser).
set -euo pipefail

cmd="${1:-}"
dir="${FLOE_PG_DIR:-/tmp/floe-postgres-$(id -u)}"
data="$dir/data"
user=floe
password=floe-test
db=floe

log() { echo "[postgres.sh] $*" >&2; }
die() { echo "[postgres.sh] ERROR: $*" >&2; exit 1; }

find_bin() {
  local d
  if command -v pg_config >/dev/null 2>&1; then
    d="$(pg_config --bindir 2>/dev/null || true)"
    if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    if [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

ensure_installed() {
  if bin="$(find_bin)"; then return 0; fi
  [ "$(id -u)" = 0 ] || die "PostgreSQL (initdb) is not installed; run: sudo apt-get install -y postgresql"
  command -v apt-get >/dev/null 2>&1 || die "PostgreSQL (initdb) is not installed and apt-get is not available"
  log "installing postgresql with apt-get"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2 \
    || die "apt-get install postgresql failed"
  bin="$(find_bin)" || die "postgresql installed, but initdb was not found under /usr/lib/postgresql/*/bin"
}

# Runs a command as the server's owner (postgres when we are root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' user (apt-get install postgresql creates it)"
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

running() {
  [ -f "$data/PG_VERSION" ] && [ -f "$dir/env" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

free_port() {
  if [ -n "${FLOE_PG_PORT:-}" ]; then echo "$FLOE_PG_PORT"; return; fi
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null && return
  local p
  for p in $(seq 55432 55632); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  die "no free port found"
}

print_env() { cat "$dir/env"; }

start() {
  ensure_installed
  if running; then
    log "already running ($dir)"
    print_env
    return 0
  fi
  # A stale directory (crashed run): stop whatever is left, start afresh.
  if [ -f "$data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$data" "$dir/sock" "$dir/env"
  mkdir -p "$dir"
  chmod 755 "$dir"
  mkdir -p "$data" "$dir/sock"
  chmod 700 "$data"
  local pwfile="$dir/pwfile"
  echo "$password" >"$pwfile"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' user (apt-get install postgresql creates it)"
    chown postgres: "$data" "$dir/sock" "$pwfile"
  fi
  log "initdb $data ($bin)"
  as_owner "$bin/initdb" -D "$data" -U "$user" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  rm -f "$pwfile"
  local port tries=0
  while :; do
    port="$(free_port)"
    log "starting on 127.0.0.1:$port"
    if as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
      -o "-p $port -k $dir/sock -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >&2; then
      break
    fi
    tries=$((tries + 1))
    tail -n 20 "$data/server.log" >&2 || true
    [ "$tries" -lt 3 ] && [ -z "${FLOE_PG_PORT:-}" ] || die "pg_ctl start failed (log: $data/server.log)"
  done
  local i=0
  until as_owner "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres -U "$user"; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || die "PostgreSQL on 127.0.0.1:$port does not accept connections (log: $data/server.log)"
    sleep 0.1
  done
  as_owner "$bin/psql" -X -q -h "$dir/sock" -p "$port" -U "$user" -d postgres \
    -c "CREATE DATABASE $db" >&2 || die "CREATE DATABASE $db failed"
  # The same check the tests make: a password login over TCP.
  PGPASSWORD="$password" "$bin/psql" -X -q -At -h 127.0.0.1 -p "$port" -U "$user" -d "$db" -c "SELECT 1" >/dev/null \
    || die "cannot log in as $user over TCP on 127.0.0.1:$port"
  {
    echo "FLOE_TEST_POSTGRES_URI=postgresql://$user:$password@127.0.0.1:$port/$db"
    echo "FLOE_TEST_POSTGRES_DIR=$dir"
  } >"$dir/env"
  log "ready: postgresql://$user:***@127.0.0.1:$port/$db"
  print_env
}

stop() {
  if ! bin="$(find_bin)"; then
    rm -rf "$dir"
    return 0
  fi
  if [ -f "$data/postmaster.pid" ]; then
    log "stopping ($dir)"
    as_owner "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >&2 \
      || as_owner "$bin/pg_ctl" -D "$data" -m immediate -w stop >&2 || true
  fi
  rm -rf "$dir"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  env)
    bin="$(find_bin)" || die "PostgreSQL is not installed"
    running || die "no server running in $dir (run: bash tools/servers/postgres.sh start)"
    print_env
    ;;
  *) die "usage: postgres.sh start|stop|env" ;;
esac
