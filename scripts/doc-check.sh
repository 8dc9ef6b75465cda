#!/usr/bin/env bash
# Runs every ```sh block of README.md and docs/api.md, in order, against a
# fresh memoryd (one per document), and fails when a documented command fails:
# the docs cannot drift from what the binary does. A block is left out only
# when the line before its fence says `<!-- doc-check: skip (why) -->`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MEMORYD_BIN:-target/debug/memoryd}
if [ ! -x "$BIN" ]; then
    cargo build --locked --bin memoryd
fi
exec python3 scripts/doc_check.py "$BIN" README.md docs/api.md
