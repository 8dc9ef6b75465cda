#!/usr/bin/env bash
# Runs every ```sh block of README.md and docs/api.md, in order, against a
# fresh memoryd (one per document), and fails when a documented command fails:
# the docs cannot drift from what the binary does. A block is left out only
# when the line before its fence says `<!-- doc-check: skip (why) -->`.
# First, every `§…` and `R-…` citation in src/ must name a heading of
# docs/contract.md or docs/rules.md (scripts/citations.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/citations.py --self-test
python3 scripts/citations.py
BIN=${MEMORYD_BIN:-target/debug/memoryd}
if [ ! -x "$BIN" ]; then
    cargo build --locked --bin memoryd
fi
exec python3 scripts/doc_check.py "$BIN" README.md docs/api.md
