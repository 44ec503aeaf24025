#!/usr/bin/env bash
# Install the Python package's test environment (maturin, pytest, pyarrow, polars, pandas,
# Ray, pyiceberg, DuckDB; exact pins) into a venv OUTSIDE the repository.
#
#   bash tools/python/setup.sh       # prints the venv's python on its last line
#
# Environment:
#   FLOE_PYTHON_DIR          cache root (default: $HOME/.cache/floe/python); venv in $FLOE_PYTHON_DIR/venv
#   FLOE_PYTHON_BASE_PYTHON  interpreter used to create the venv (default: python3)
#   FLOE_PYTHON_FORCE        =1 re-installs even when the stamp matches
#
# Idempotent (as tools/peers/setup.sh): a stamp holding a hash of the pin files is written
# after a successful install; a re-run with the same pins returns at once.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${FLOE_PYTHON_DIR:-$HOME/.cache/floe/python}"
venv="$root/venv"
py="$venv/bin/python"
base_python="${FLOE_PYTHON_BASE_PYTHON:-python3}"

log() { echo "[floe-python] $*" >&2; }

mkdir -p "$root"
exec 9>"$root/.setup.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

pin_hash="$(cat "$here/requirements.txt" "$here/constraints.txt" "$here/setup.sh" | sha256sum | cut -c1-16)"
stamp="$venv/.floe-python-stamp"

if [ "${FLOE_PYTHON_FORCE:-0}" != "1" ] && [ -x "$py" ] && [ -f "$stamp" ] \
  && [ "$(cat "$stamp")" = "$pin_hash" ] && "$py" -c 'import sys' >/dev/null 2>&1; then
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
log "installing pinned packages"
"$py" -m pip install --disable-pip-version-check --no-input -q \
  -r "$here/requirements.txt" -c "$here/constraints.txt" >&2
"$py" -c 'import maturin, pytest, pyarrow, polars, pandas, ray, pyiceberg, duckdb' >&2
echo "$pin_hash" >"$stamp"
log "done in $(( $(date +%s) - start )) s"
echo "$py"
