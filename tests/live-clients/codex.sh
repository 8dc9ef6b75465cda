#!/usr/bin/env bash
# Codex CLI against memoryd's /v1/mcp, with the config block of docs/api.md and
# a scripted fake Responses API model (fake_model.py). Exits nonzero when an
# expectation fails. Usage: MEMORYD_BIN=target/debug/memoryd tests/live-clients/codex.sh
# Env: CODEX_VERSION (default 0.171.0), LC_PREFIX (npm prefix, /tmp/live-clients).
source "$(dirname "$0")/lib.sh"

lc_install node@22 "@openai/codex@${CODEX_VERSION:-0.171.0}"
say "$(codex --version 2>/dev/null)"
lc_start_memoryd
lc_seed

export CODEX_HOME="$LC_RUN/codex-home"
WORK="$LC_RUN/work"
mkdir -p "$CODEX_HOME" "$WORK"

# write_config FAKE_URL APPROVAL REQUIRED [MEMORYD_BASE]: the fake as the model
# provider, then the docs' block as it stands, but for the URL and, with
# APPROVAL or REQUIRED "no", without the approval table or the `required` line.
write_config() {
  {
    cat <<EOF
model = "fake-model"
model_provider = "fake"

[model_providers.fake]
name = "fake model"
base_url = "$1/v1"
wire_api = "responses"

EOF
    lc_docs_block toml 1 "${4:-$BASE}" | python3 -c '
import re, sys
block, approval, required = sys.stdin.read(), sys.argv[1], sys.argv[2]
if approval == "no":
    block = block[:block.index("\n# `codex exec` runs")] + "\n"
if required == "no":
    block = re.sub(r"(?m)^# Wait for memoryd.*\n(^#.*\n)*^required = true\n", "", block)
sys.stdout.write(block)' "$2" "$3"
  } >"$CODEX_HOME/config.toml"
  grep -q 'bearer_token_env_var = "MEMORYD_API_KEY"' "$CODEX_HOME/config.toml" || fail "no Codex block in docs/api.md"
}

# run NAME TOOL ARGUMENTS APPROVAL REQUIRED PROMPT [MEMORYD_BASE]: one `codex exec` against a fresh fake.
run() {
  local name=$1 tool=$2 arguments=$3 approval=$4 required=$5 prompt=$6 base=${7:-}
  lc_fake responses "$LC_RUN/$name" --tool "$tool" --arguments "$arguments"
  write_config "$FAKE_URL" "$approval" "$required" "$base"
  say "codex exec ($name): $tool $arguments [approval block: $approval, required: $required]"
  local start end
  start=$(date +%s.%N)
  (cd "$WORK" && timeout 120 codex exec --skip-git-repo-check "$prompt" \
    >"$LC_RUN/$name/stdout" 2>"$LC_RUN/$name/stderr" </dev/null) || echo "codex exec exited $?" >&2
  end=$(date +%s.%N)
  lc_stop "$FAKE_PID"
  echo "answer: $(cat "$LC_RUN/$name/stdout") ($(python3 -c "print(round($end - $start, 1))") s)" >&2
}

# tools_offered NAME: memoryd's tools in the first request's `tools` array.
tools_offered() {
  python3 - "$LC_RUN/$1/requests.jsonl" <<'EOF'
import json, sys
try:
    lines = open(sys.argv[1], encoding="utf-8").readlines()
except FileNotFoundError:
    lines = []
for line in lines:
    tools = (json.loads(line).get("body") or {}).get("tools")
    if tools is None:
        continue
    names = []
    for t in tools:
        if t.get("type") == "namespace":
            names += [f"{t['name']}.{i['name']}" for i in t.get("tools", [])]
        else:
            names.append(t.get("name", ""))
    print(" ".join(n for n in names if "memory_" in n) or "(none)")
    break
else:
    print("(no request)")
EOF
}

memory_md() { curl -sf "$BASE/v1/workspaces/alice/layouts/default/files/MEMORY.md" -H "Authorization: Bearer $MEMORYD_API_KEY"; }

# 1. The docs' block: the model is offered memoryd's tools, calls one, reads text.
run search memory_search '{"query": "runner image"}' yes yes "Which runner image do we pin?"
say "memoryd tools Codex offered the model: $(tools_offered search)"
tools_offered search | grep mcp__memoryd.memory_search >/dev/null || fail "Codex did not offer memory_search"
lc_seen "$LC_RUN/search" >&2
lc_expect_readable "$LC_RUN/search" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
grep -q 'memoryd said: MEMORY.md:' "$LC_RUN/search/stdout" || fail "codex exec did not print the model's answer"
pass "Codex: memory_search ran and the model saw path:line: text"

# 1b. The read tools need no approval setting: the same search with neither line.
run search-bare memory_search '{"query": "runner image"}' no no "Which runner image do we pin?"
lc_expect_readable "$LC_RUN/search-bare" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
pass "Codex: memory_search ran with no approval setting at all"

# 2. memory_read: numbered lines and the sha256.
run read memory_read '{"path": "MEMORY.md", "limit": 5}' yes yes "Read the memory."
lc_seen "$LC_RUN/read" >&2
lc_expect_readable "$LC_RUN/read" '^ +1	- Pin the runner image'
lc_expect_readable "$LC_RUN/read" '^sha256 [0-9a-f]{64}'
pass "Codex: memory_read ran and the model saw numbered lines and the sha256"

EDIT='{"operations": [{"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- Codex CLI was here."}]}'

# 3. memory_edit without the approval block: refused by Codex, memory unchanged.
run edit-refused memory_edit "$EDIT" no yes "Note that Codex was here."
lc_seen "$LC_RUN/edit-refused" >&2
memory_md | grep 'Codex CLI was here' >/dev/null && fail "memory_edit ran without approval_mode = \"approve\""
grep 'requires approval, but approval policy is never' "$LC_RUN/edit-refused/tool_results.jsonl" >/dev/null ||
  fail "the refused memory_edit did not say why"
pass "Codex: without approval_mode, memory_edit was refused"

# 4. memory_edit with the docs' approval block: it runs and memory changes.
run edit memory_edit "$EDIT" yes yes "Note that Codex was here."
lc_seen "$LC_RUN/edit" >&2
memory_md | grep 'Codex CLI was here' >/dev/null || fail "memory_edit with approval_mode = \"approve\" did not change MEMORY.md"
pass "Codex: with approval_mode = \"approve\", memory_edit changed MEMORY.md"

# 5. A memoryd slow to answer (1 s a request, through slow_proxy.py): without
#    `required` the turn starts without memoryd's tools; with it Codex waits.
lc_slow 1
run slow-optional memory_search '{"query": "runner image"}' yes no "Which runner image do we pin?" "$SLOW_BASE"
say "slow memoryd, no required: $(tools_offered slow-optional)"
run slow-required memory_search '{"query": "runner image"}' yes yes "Which runner image do we pin?" "$SLOW_BASE"
say "slow memoryd, required = true: $(tools_offered slow-required)"
lc_stop "$SLOW_PID"
tools_offered slow-optional | grep memory_search >/dev/null &&
  say "NOTE: Codex now waits for a slow server without required = true"
lc_expect_readable "$LC_RUN/slow-required" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
pass "Codex: with required = true, codex exec waited for a slow memoryd"

# 6. Without MEMORYD_API_KEY. `codex mcp list` lists the server either way.
write_config "http://127.0.0.1:9" yes yes
codex mcp list >"$LC_RUN/mcp-list-with-key.txt" 2>&1 || true
env -u MEMORYD_API_KEY codex mcp list >"$LC_RUN/mcp-list-without-key.txt" 2>&1 || true
say "codex mcp list (MEMORYD_API_KEY set):"; grep -E '^(Name|memoryd)' "$LC_RUN/mcp-list-with-key.txt" >&2
say "codex mcp list (MEMORYD_API_KEY unset):"; grep -E '^(Name|memoryd)' "$LC_RUN/mcp-list-without-key.txt" >&2
#    Without `required`: no memoryd tools and not a word, but at RUST_LOG=warn.
lc_fake responses "$LC_RUN/no-key" --tool memory_search
write_config "$FAKE_URL" yes no
(cd "$WORK" && env -u MEMORYD_API_KEY timeout 120 codex exec --skip-git-repo-check "Which runner image do we pin?" \
  >"$LC_RUN/no-key/stdout" 2>"$LC_RUN/no-key/stderr" </dev/null) || true
(cd "$WORK" && env -u MEMORYD_API_KEY RUST_LOG=warn timeout 120 codex exec --skip-git-repo-check "Which runner image do we pin?" \
  >"$LC_RUN/no-key/stdout-warn" 2>"$LC_RUN/no-key/stderr-warn" </dev/null) || true
lc_stop "$FAKE_PID"
say "no key, no required: memoryd tools offered: $(tools_offered no-key); exit as usual, answer: $(cat "$LC_RUN/no-key/stdout")"
tools_offered no-key | grep memory_search >/dev/null && fail "Codex offered memoryd's tools without a key"
grep -i 'MEMORYD_API_KEY' "$LC_RUN/no-key/stderr" >/dev/null && say "NOTE: Codex now names the missing key without RUST_LOG"
grep 'MEMORYD_API_KEY' "$LC_RUN/no-key/stderr-warn" >&2 || fail "RUST_LOG=warn did not name the missing MEMORYD_API_KEY"
#    With `required = true`: codex exec stops and names the variable.
lc_fake responses "$LC_RUN/no-key-required" --tool memory_search
write_config "$FAKE_URL" yes yes
rc=0
(cd "$WORK" && env -u MEMORYD_API_KEY timeout 120 codex exec --skip-git-repo-check "Which runner image do we pin?" \
  >"$LC_RUN/no-key-required/stdout" 2>"$LC_RUN/no-key-required/stderr" </dev/null) || rc=$?
lc_stop "$FAKE_PID"
say "no key, required = true: exit $rc; $(grep -m1 -o 'required MCP servers failed to initialize: [^(]*' "$LC_RUN/no-key-required/stderr" || true)"
[ "$rc" -ne 0 ] || fail "codex exec went on without memoryd although it is required"
grep 'Environment variable MEMORYD_API_KEY for MCP server .memoryd. is not set' "$LC_RUN/no-key-required/stderr" >/dev/null ||
  fail "codex exec did not name the missing MEMORYD_API_KEY"
pass "Codex: without the key, memoryd is left out silently; with required = true codex exec stops and says why"

say "all Codex trials passed; logs in $LC_RUN"
