#!/usr/bin/env bash
# The Python package's tests: builds the wheel (dev profile, sharing CARGO_TARGET_DIR and so
# the compiled library with `cargo test`), installs it into the pinned venv of
# tools/python/setup.sh (outside the clone), and runs pytest on tests/python.
#
#   bash tools/python/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/floe-target}"
py="$(bash tools/python/setup.sh | tail -n 1)"
wheels="$(mktemp -d "${TMPDIR:-/tmp}/floe-wheel.XXXXXX")"
trap 'rm -rf "$wheels"' EXIT
start=$(date +%s)
"$py" -m maturin build --profile dev --interpreter "$py" --out "$wheels" >&2
"$py" -m pip install --disable-pip-version-check --no-input -q --force-reinstall --no-deps "$wheels"/floe-*.whl
echo "[floe-python] wheel built and installed in $(( $(date +%s) - start )) s" >&2
cd tests/python
exec "$py" -m pytest -q -p no:cacheprovider "$@"
