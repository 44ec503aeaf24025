#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the pinned peer engines (pyiceberg,
# DuckDB, Spark + Iceberg runtime) into a cache outside the clone, then runs every unit and
# integration test, including the interop checks against the peers.
#
#   bash tools/test.sh            # everything
#   FLOE_PEERS_NO_SPARK=1 bash tools/test.sh   # skip Spark (faster local runs)
#   FLOE_NO_POSTGRES=1 bash tools/test.sh      # skip the PostgreSQL catalog tests
#   FLOE_NO_S3=1 bash tools/test.sh            # no S3 server, S3 tests skipped (explicit only)
#   FLOE_NO_PYTHON=1 bash tools/test.sh        # skip the Python package's wheel and pytest
#
# Before the tests: cargo fmt --check, cargo clippy -D warnings, rustdoc -D warnings and the
# user guide's mdbook build (tools/docs/mdbook.sh: a pinned mdbook, installed once).
#
# Servers: a private PostgreSQL (tools/servers/postgres.sh) and a private SeaweedFS S3
# server (tools/servers/seaweedfs.sh, pinned, installed under ~/.cache/floe/servers) are
# started before `cargo test` and stopped on exit; if one cannot start, the run fails
# (unless its FLOE_NO_* switch is set).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/floe-target}"
export FLOE_PEERS_DIR="${FLOE_PEERS_DIR:-$HOME/.cache/floe/peers}"

if ! command -v cargo >/dev/null; then
  echo "cargo is required (rustup toolchain)" >&2
  exit 1
fi
if ! command -v script >/dev/null; then
  echo "installing script (bsdutils: the progress-bar test runs floe in a pseudo-terminal)"
  (apt-get update -qq && apt-get install -y -qq bsdutils) >/dev/null
fi
if ! command -v strace >/dev/null; then
  echo "installing strace (tests/it/faults.rs injects system-call errors with it)"
  (apt-get update -qq && apt-get install -y -qq strace) >/dev/null
fi
if ! command -v jq >/dev/null; then
  echo "installing jq (the examples of the README and docs/src use it; tests/it/readme.rs runs them)"
  (apt-get update -qq && apt-get install -y -qq jq) >/dev/null
fi
if [ "${FLOE_PEERS_NO_SPARK:-0}" != "1" ] && ! command -v java >/dev/null; then
  echo "installing a Java runtime for Spark"
  (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless) >/dev/null
fi

echo "== peers: installing pinned pyiceberg / DuckDB / Spark (cached in $FLOE_PEERS_DIR)"
peer_python="$(bash tools/peers/setup.sh | tail -n 1)"
export FLOE_PEERS_PYTHON="$peer_python"
echo "peers python: $FLOE_PEERS_PYTHON"

# Servers started here are stopped on any exit (also Ctrl-C / TERM).
cleanups=()
cleanup() {
  local c
  for c in "${cleanups[@]}"; do eval "$c" || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${FLOE_NO_POSTGRES:-0}" = "1" ]; then
  echo "== postgres: skipped (FLOE_NO_POSTGRES=1)"
else
  echo "== postgres: starting a private server"
  export FLOE_PG_DIR
  FLOE_PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/floe-pg.XXXXXX")"
  cleanups+=("bash tools/servers/postgres.sh stop >/dev/null 2>&1")
  if ! pg_env="$(bash tools/servers/postgres.sh start)"; then
    echo "PostgreSQL did not start (see above); FLOE_NO_POSTGRES=1 skips its tests" >&2
    exit 1
  fi
  while IFS= read -r line; do
    [ -n "$line" ] && export "${line?}"
  done <<<"$pg_env"
  echo "postgres: ${FLOE_TEST_POSTGRES_URI%%:*}://…@${FLOE_TEST_POSTGRES_URI##*@}"
fi

# S3: a private SeaweedFS for this run.
if [ "${FLOE_NO_S3:-0}" = "1" ]; then
  echo "== S3: FLOE_NO_S3=1, S3 tests skipped"
else
  echo "== S3: starting SeaweedFS"
  FLOE_SEAWEEDFS_RUN="$(mktemp -d "${TMPDIR:-/tmp}/floe-test-s3.XXXXXX")"
  export FLOE_SEAWEEDFS_RUN
  cleanups+=("FLOE_SEAWEEDFS_RUN='$FLOE_SEAWEEDFS_RUN' bash tools/servers/seaweedfs.sh stop")
  s3_env="$(bash tools/servers/seaweedfs.sh start)" || {
    echo "SeaweedFS (S3) did not start; see the log above. FLOE_NO_S3=1 skips the S3 tests." >&2
    exit 1
  }
  eval "$s3_env"
  echo "S3 endpoint: $FLOE_TEST_S3_ENDPOINT bucket $FLOE_TEST_S3_BUCKET"
fi

# Rules the compiler checks: formatting, clippy (the library's lints: missing docs,
# unreachable `pub`, no unwrap/expect/panic outside tests) and rustdoc, all as errors.
echo "== lints: cargo fmt --check, clippy -D warnings, rustdoc -D warnings"
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# The user guide (docs/, an mdBook) builds with a pinned mdbook, installed once outside the
# clone; its links are checked by tests/it/docs.rs (mdbook does not check relative links).
echo "== docs: mdbook build docs"
bash tools/docs/mdbook.sh build

echo "== cargo test"
# Every manifest a filtered or limited plan reads goes through the planner's probe (by
# default only manifests over 256 KiB do, which the suite's small tables never reach).
FLOE_MANIFEST_PROBE_BYTES=0 cargo test -- --test-threads "${FLOE_TEST_THREADS:-2}"

# The Python package (src/python): its wheel (dev profile, same target directory, so the
# library compiled above is reused), pinned pytest / pyarrow / polars / Ray / pyiceberg in a
# cached venv, and the pytest suite tests/python.
if [ "${FLOE_NO_PYTHON:-0}" = "1" ]; then
  echo "== python: skipped (FLOE_NO_PYTHON=1)"
else
  echo "== python: wheel + pytest"
  bash tools/python/test.sh
fi
