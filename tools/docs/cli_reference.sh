#!/usr/bin/env bash
# Regenerates docs/src/reference/cli.md from the CLI's own `--help` output (every command and
# subcommand), the page tests/it/docs.rs checks. Run it after changing a command or option,
# and commit the page.
#
#   bash tools/docs/cli_reference.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/floe-target}"
FLOE_UPDATE_DOCS=1 cargo test --quiet --test it docs::cli_reference_is_current
echo "docs/src/reference/cli.md regenerated"
