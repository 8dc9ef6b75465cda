#!/usr/bin/env bash
# Rewrites openapi.yaml from openapi.base.yaml, the route table and the types,
# then the TypeScript client's types from it (when its tools are installed).
set -euo pipefail
cd "$(dirname "$0")/.."
MEMORYD_WRITE_OPENAPI=1 cargo test --quiet --test it -- openapi::openapi_yaml_is_what_the_generator_writes
if [ -d clients/typescript/node_modules ]; then
  (cd clients/typescript && npm run --silent generate)
fi
