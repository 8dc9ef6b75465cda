#!/usr/bin/env bash
# mcp-remote (stdio to Streamable HTTP) against memoryd's /v1/mcp, started from
# the Claude Desktop block of docs/api.md and driven over stdio by
# stdio_client.py as Claude Desktop would (no shell: `${MEMORYD_API_KEY}` in
# args reaches mcp-remote unexpanded). Exits nonzero when an expectation fails.
# Usage: MEMORYD_BIN=target/debug/memoryd tests/live-clients/mcp-remote.sh
# Env: MCP_REMOTE_VERSION (default 0.15.1), LC_PREFIX (npm prefix, /tmp/live-clients).
source "$(dirname "$0")/lib.sh"

lc_install node@22 "mcp-remote@${MCP_REMOTE_VERSION:-0.15.1}"
say "mcp-remote $(cd "$LC_PREFIX" && npx --no-install mcp-remote --version 2>/dev/null || echo '?'), node $(node --version)"
lc_start_memoryd
lc_seed
URL="$BASE/v1/mcp?workspace=alice"
SECRET="$MEMORYD_API_KEY"   # for the leak check, where MEMORYD_API_KEY is unset

# drive NAME CONFIG: run the server entry of CONFIG and try memoryd through it.
# npx runs in $LC_PREFIX so that it takes the installed mcp-remote, not the newest.
drive() {
  local name=$1 config=$2
  mkdir -p "$LC_RUN/$name"
  say "$name: $(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["mcpServers"]["memoryd"]; print(json.dumps([e["command"], *e["args"]]))' "$config")"
  timeout 120 python3 "$LC_HERE/stdio_client.py" --config "$config" --cwd "$LC_PREFIX" --timeout 30 \
    --transcript "$LC_RUN/$name/transcript.jsonl" --stderr "$LC_RUN/$name/mcp-remote.stderr" \
    >"$LC_RUN/$name/summary.json" || fail "$name: the stdio driver failed"
  # No key in any log: mcp-remote names the variable it expands, never its value.
  if grep -q -F "$SECRET" "$LC_RUN/$name/mcp-remote.stderr" "$LC_RUN/$name/transcript.jsonl"; then
    fail "$name: the key appears in mcp-remote's output"
  fi
}

field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2], ""); print(v if isinstance(v, str) else json.dumps(v))' "$LC_RUN/$1/summary.json" "$2"; }

expect_works() {
  local name=$1
  field "$name" tools | grep memory_search >/dev/null || { cat "$LC_RUN/$name/mcp-remote.stderr" >&2; fail "$name: no memory_search in tools/list"; }
  field "$name" memory_search_text | grep -E '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04' >/dev/null || fail "$name: memory_search did not answer path:line: text"
  field "$name" memory_read_text | grep -E '^ +1	' >/dev/null || fail "$name: memory_read did not answer numbered lines"
  field "$name" resources | grep 'memory://alice/default/MEMORY.md' >/dev/null || fail "$name: resources/list lacks MEMORY.md"
  field "$name" resource_text | grep 'ubuntu-22.04' >/dev/null || fail "$name: resources/read did not answer MEMORY.md"
}

# 1. The docs' block as it stands (npx mcp-remote … --header "Authorization:
#    Bearer ${MEMORYD_API_KEY}", the key in env), but for the URL and the key.
lc_docs_block json 2 | python3 -c '
import json, sys
config = json.load(sys.stdin)
config["mcpServers"]["memoryd"]["env"]["MEMORYD_API_KEY"] = sys.argv[1]
print(json.dumps(config, indent=2))' "$MEMORYD_API_KEY" >"$LC_RUN/docs-block.json"
grep -q 'mcp-remote' "$LC_RUN/docs-block.json" || fail "no mcp-remote block in docs/api.md"
(unset MEMORYD_API_KEY; drive docs-block "$LC_RUN/docs-block.json")
expect_works docs-block
say "what a model behind mcp-remote reads from memory_search:"; field docs-block memory_search_text >&2
say "memory_read:"; field docs-block memory_read_text >&2
say "a missing file: $(field docs-block memory_read_missing)"
say "an unknown tool: $(field docs-block unknown_tool)"
say "mcp-remote's stderr about the header:"; grep -i -E 'header|Replacing' "$LC_RUN/docs-block/mcp-remote.stderr" >&2 || true
grep -q 'Replacing ${MEMORYD_API_KEY} with environment value' "$LC_RUN/docs-block/mcp-remote.stderr" ||
  fail "mcp-remote did not say it expanded \${MEMORYD_API_KEY} itself"
pass "mcp-remote: the docs' block works; mcp-remote itself expands \${MEMORYD_API_KEY} from env"

# 2. mcp-remote's README form for clients that split arguments at spaces:
#    "Authorization:${AUTH_HEADER}" with AUTH_HEADER="Bearer <key>".
python3 - "$URL" "$MEMORYD_API_KEY" >"$LC_RUN/no-space.json" <<'EOF'
import json, sys
print(json.dumps({"mcpServers": {"memoryd": {
    "command": "npx",
    "args": ["-y", "mcp-remote", sys.argv[1], "--header", "Authorization:${AUTH_HEADER}"],
    "env": {"AUTH_HEADER": f"Bearer {sys.argv[2]}"}}}}, indent=2))
EOF
(unset MEMORYD_API_KEY; drive no-space "$LC_RUN/no-space.json")
expect_works no-space
pass "mcp-remote: \"Authorization:\${AUTH_HEADER}\" (no space) works too"

# 3. What a client that splits arguments at spaces does to the docs' form:
#    "Authorization:", "Bearer", "${MEMORYD_API_KEY}" as three arguments.
python3 - "$URL" "$MEMORYD_API_KEY" >"$LC_RUN/split.json" <<'EOF'
import json, sys
print(json.dumps({"mcpServers": {"memoryd": {
    "command": "npx",
    "args": ["-y", "mcp-remote", sys.argv[1], "--header", "Authorization:", "Bearer", "${MEMORYD_API_KEY}"],
    "env": {"MEMORYD_API_KEY": sys.argv[2]}}}}, indent=2))
EOF
(unset MEMORYD_API_KEY; drive split "$LC_RUN/split.json") || true
say "split at spaces: initialize -> $(field split initialize | head -c 300)"
grep -i -E 'error|401|unauthor|oauth' "$LC_RUN/split/mcp-remote.stderr" | head -5 >&2 || true

# 4. The key missing from env: mcp-remote sends "Bearer ${MEMORYD_API_KEY}" as it stands.
python3 - "$URL" >"$LC_RUN/no-key.json" <<'EOF'
import json, sys
print(json.dumps({"mcpServers": {"memoryd": {
    "command": "npx",
    "args": ["-y", "mcp-remote", sys.argv[1], "--header", "Authorization: Bearer ${MEMORYD_API_KEY}"]}}}, indent=2))
EOF
(unset MEMORYD_API_KEY; drive no-key "$LC_RUN/no-key.json") || true
say "no key: initialize -> $(field no-key initialize | head -c 300)"
grep -i -E 'warning|error|401|unauthor|oauth' "$LC_RUN/no-key/mcp-remote.stderr" | head -8 >&2 || true
field no-key tools | grep memory_search >/dev/null && fail "mcp-remote listed memoryd's tools without a key"

say "all mcp-remote trials passed; logs in $LC_RUN"
