#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the pinned peer engines (pyiceberg,
# DuckDB, Spark + Iceberg runtime) into a cache outside the clone, then runs every unit and
# integration test, including the interop checks against the peers.
#
#   bash tools/test.sh            # everything
#   FLOE_PEERS_NO_SPARK=1 bash tools/test.sh   # skip Spark (faster local runs)
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/floe-target}"
export FLOE_PEERS_DIR="${FLOE_PEERS_DIR:-$HOME/.cache/floe/peers}"

if ! command -v cargo >/dev/null; then
  echo "cargo is required (rustup toolchain)" >&2
  exit 1
fi
if [ "${FLOE_PEERS_NO_SPARK:-0}" != "1" ] && ! command -v java >/dev/null; then
  echo "installing a Java runtime for Spark"
  (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless) >/dev/null
fi

echo "== peers: installing pinned pyiceberg / DuckDB / Spark (cached in $FLOE_PEERS_DIR)"
peer_python="$(bash tools/peers/setup.sh | tail -n 1)"
export FLOE_PEERS_PYTHON="$peer_python"
echo "peers python: $FLOE_PEERS_PYTHON"

echo "== cargo test"
cargo test -- --test-threads "${FLOE_TEST_THREADS:-2}"
