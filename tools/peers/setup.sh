#!/usr/bin/env bash
# Install the pinned peer engines (pyiceberg, DuckDB + iceberg extension, and
# optionally Spark + Iceberg runtime) into a venv OUTSIDE the repository.
#
#   bash tools/peers/setup.sh            # full install (with Spark)
#   FLOE_PEERS_NO_SPARK=1 bash tools/peers/setup.sh
#
# Environment:
#   FLOE_PEERS_DIR       cache root (default: $HOME/.cache/floe/peers); venv in $FLOE_PEERS_DIR/venv
#   FLOE_PEERS_NO_SPARK  =1 skips pyspark and the Iceberg Spark runtime
#   FLOE_PEERS_BASE_PYTHON  interpreter used to create the venv (default: python3)
#   FLOE_PEERS_FORCE     =1 re-installs and re-verifies even when the stamp matches
#
# Idempotent: a stamp holding a hash of the pin files is written after a
# successful install and verification; a re-run with the same pins returns at
# once. The last line printed on stdout is the venv's python path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peers_dir="${FLOE_PEERS_DIR:-$HOME/.cache/floe/peers}"
venv="$peers_dir/venv"
py="$venv/bin/python"
no_spark="${FLOE_PEERS_NO_SPARK:-0}"
base_python="${FLOE_PEERS_BASE_PYTHON:-python3}"

log() { echo "[floe-peers] $*" >&2; }

mkdir -p "$peers_dir"

# Serialize concurrent runs (tests may call this in parallel).
exec 9>"$peers_dir/.setup.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

pin_hash="$(cat "$here/requirements.txt" "$here/requirements-spark.txt" "$here/constraints.txt" \
  "$here/setup.sh" "$here/verify_env.py" | sha256sum | cut -c1-16)"
stamp="$venv/.floe-peers-stamp"

stamp_ok() {
  [ -x "$py" ] || return 1
  [ -f "$stamp" ] || return 1
  local h s
  read -r h s <"$stamp" || return 1
  [ "$h" = "$pin_hash" ] || return 1
  # A Spark-less install does not satisfy a request that wants Spark.
  if [ "$no_spark" != "1" ] && [ "$s" != "spark" ]; then return 1; fi
  "$py" -c 'import sys' >/dev/null 2>&1 || return 1
  return 0
}

if [ "${FLOE_PEERS_FORCE:-0}" != "1" ] && stamp_ok; then
  log "up to date ($venv, pins $pin_hash)"
  echo "$py"
  exit 0
fi

start=$(date +%s)
if ! [ -x "$py" ] || ! "$py" -c 'import sys' >/dev/null 2>&1; then
  log "creating venv at $venv"
  rm -rf "$venv"
  "$base_python" -m venv "$venv"
fi
rm -f "$stamp"

reqs=(-r "$here/requirements.txt")
mode="nospark"
if [ "$no_spark" != "1" ]; then
  reqs+=(-r "$here/requirements-spark.txt")
  mode="spark"
  command -v java >/dev/null 2>&1 || log "WARNING: java not found on PATH; Spark will not start"
fi

log "installing pinned packages ($mode)"
"$py" -m pip install --disable-pip-version-check --no-input -q "${reqs[@]}" -c "$here/constraints.txt" >&2

log "verifying"
verify_args=()
[ "$mode" = "spark" ] && verify_args+=(--spark)
"$py" "$here/verify_env.py" "${verify_args[@]}" >&2

echo "$pin_hash $mode" >"$stamp"
log "done in $(( $(date +%s) - start )) s"
echo "$py"
