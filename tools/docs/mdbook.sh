#!/usr/bin/env bash
# Builds the user guide (docs/, an mdBook) with a pinned mdbook, installed once into a cache
# outside the clone (idempotent: skipped when that version is already there). Prints nothing
# but mdbook's own messages; fails when mdbook does.
#
#   bash tools/docs/mdbook.sh            # build into docs/book
#   bash tools/docs/mdbook.sh serve      # any other mdbook subcommand, on docs/
#
# Environment:
#   FLOE_TOOLS_DIR   where mdbook is installed (default: $HOME/.cache/floe/tools)
set -euo pipefail
cd "$(dirname "$0")/../.."

MDBOOK_VERSION=0.5.4
tools="${FLOE_TOOLS_DIR:-$HOME/.cache/floe/tools}"
mdbook="$tools/bin/mdbook"
if ! [ -x "$mdbook" ] || [ "$("$mdbook" --version)" != "mdbook v$MDBOOK_VERSION" ]; then
  echo "installing mdbook $MDBOOK_VERSION into $tools (once)" >&2
  # Its own target directory: not the project's (different features and profile).
  CARGO_TARGET_DIR="$tools/build" cargo install mdbook --version "$MDBOOK_VERSION" --locked \
    --no-default-features --features search --root "$tools" --quiet
  rm -rf "$tools/build"
fi
cmd="${1:-build}"
shift || true
"$mdbook" "$cmd" docs "$@"
