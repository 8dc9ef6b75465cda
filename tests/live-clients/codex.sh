#!/usr/bin/env bash
# Codex CLI against memoryd's /v1/mcp, with the config block of docs/api.md and
# a scripted fake Responses API model (fake_model.py). Exits nonzero when an
# expectation fails. Usage: MEMORYD_BIN=target/debug/memoryd tests/live-clients/codex.sh
# Env: CODEX_VERSION (default 0.171.0), LC_PREFIX (npm prefix, /tmp/live-clients).
source "$(dirname "$0")/lib.sh"

lc_install node@22 "@openai/codex@${CODEX_VERSION:-0.171.0}"
say "$(codex --version)"
lc_start_memoryd
lc_seed

export CODEX_HOME="$LC_RUN/codex-home"
WORK="$LC_RUN/work"
mkdir -p "$CODEX_HOME" "$WORK"

# write_config FAKE_URL WITH_APPROVAL: the fake as the model provider, then the
# docs' block verbatim but for the URL.
write_config() {
  cat >"$CODEX_HOME/config.toml" <<EOF
model = "fake-model"
model_provider = "fake"

[model_providers.fake]
name = "fake model"
base_url = "$1/v1"
wire_api = "responses"

[mcp_servers.memoryd]
url = "$BASE/v1/mcp?workspace=alice"
bearer_token_env_var = "MEMORYD_API_KEY"
EOF
  if [ "$2" = yes ]; then
    cat >>"$CODEX_HOME/config.toml" <<'EOF'

# `codex exec` runs with approvals "never" and then refuses a tool that may
# change something: let memory_edit run (the read tools are read-only).
[mcp_servers.memoryd.tools.memory_edit]
approval_mode = "approve"
EOF
  fi
}

# run NAME TOOL ARGUMENTS WITH_APPROVAL PROMPT: one `codex exec` against a fresh fake.
run() {
  local name=$1 tool=$2 arguments=$3 approval=$4 prompt=$5
  lc_fake responses "$LC_RUN/$name" --tool "$tool" --arguments "$arguments"
  write_config "$FAKE_URL" "$approval"
  say "codex exec ($name): $tool $arguments"
  (cd "$WORK" && timeout 120 codex exec --skip-git-repo-check "$prompt" \
    >"$LC_RUN/$name/stdout" 2>"$LC_RUN/$name/stderr" </dev/null) || true
  lc_stop "$FAKE_PID"
  sed -n '/^codex$/,$p' "$LC_RUN/$name/stdout" "$LC_RUN/$name/stderr" | head -5 >&2 || true
}

# tools_offered DIR: memoryd's tools in the first request's `tools` array.
tools_offered() {
  python3 - "$1/requests.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    tools = (r.get("body") or {}).get("tools")
    if tools is None:
        continue
    names = []
    for t in tools:
        if t.get("type") == "namespace":
            names += [f"{t['name']}.{i['name']}" for i in t.get("tools", [])]
        elif "memory" in t.get("name", ""):
            names.append(t["name"])
    print(" ".join(n for n in names if "memory_" in n) or "(none)")
    break
EOF
}

# 1. memory_search: the model is offered memoryd's tools, calls one, reads text.
run search memory_search '{"query": "runner image"}' yes "Which runner image do we pin?"
say "memoryd tools Codex offered the model: $(tools_offered "$LC_RUN/search")"
tools_offered "$LC_RUN/search" | grep -q memory_search || fail "Codex did not offer memory_search"
lc_seen "$LC_RUN/search" >&2
lc_expect_readable "$LC_RUN/search" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
grep -q 'memoryd said: MEMORY.md:' "$LC_RUN/search/stdout" || fail "codex exec did not print the model's answer"
pass "Codex: memory_search ran and the model saw path:line: text"

# 1b. The read tools need no approval block: the same search with none.
run search-no-block memory_search '{"query": "runner image"}' no "Which runner image do we pin?"
lc_expect_readable "$LC_RUN/search-no-block" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
pass "Codex: memory_search ran with no approval setting at all"

# 2. memory_read: numbered lines and the sha256.
run read memory_read '{"path": "MEMORY.md", "limit": 5}' yes "Read the memory."
lc_seen "$LC_RUN/read" >&2
lc_expect_readable "$LC_RUN/read" 'sha256'
pass "Codex: memory_read ran and the model saw numbered lines"

EDIT='{"operations": [{"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- Codex CLI was here."}]}'

# 3. memory_edit without the approval block: refused, memory unchanged.
run edit-refused memory_edit "$EDIT" no "Note that Codex was here."
lc_seen "$LC_RUN/edit-refused" >&2
if curl -sf "$BASE/v1/workspaces/alice/layouts/default/files/MEMORY.md" -H "Authorization: Bearer $MEMORYD_API_KEY" |
  grep -q 'Codex CLI was here'; then
  fail "memory_edit ran without approval_mode = \"approve\""
fi
[ -s "$LC_RUN/edit-refused/tool_results.jsonl" ] || fail "no tool result for the refused memory_edit"
pass "Codex: without approval_mode, memory_edit was refused: $(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["text"][:120])' "$LC_RUN/edit-refused/tool_results.jsonl")"

# 4. memory_edit with the docs' approval block: it runs and memory changes.
run edit memory_edit "$EDIT" yes "Note that Codex was here."
lc_seen "$LC_RUN/edit" >&2
curl -sf "$BASE/v1/workspaces/alice/layouts/default/files/MEMORY.md" -H "Authorization: Bearer $MEMORYD_API_KEY" |
  grep -q 'Codex CLI was here' || fail "memory_edit with approval_mode = \"approve\" did not change MEMORY.md"
pass "Codex: with approval_mode = \"approve\", memory_edit changed MEMORY.md"

# 5. Without MEMORYD_API_KEY: `codex mcp list` lists the server as before;
#    `codex exec` offers none of its tools and says so only at RUST_LOG=warn.
write_config "http://127.0.0.1:9" yes
codex mcp list >"$LC_RUN/mcp-list-with-key.txt" 2>&1 || true
env -u MEMORYD_API_KEY codex mcp list >"$LC_RUN/mcp-list-without-key.txt" 2>&1 || true
say "codex mcp list (MEMORYD_API_KEY set):"; grep -E '^(Name|memoryd)' "$LC_RUN/mcp-list-with-key.txt" >&2
say "codex mcp list (MEMORYD_API_KEY unset):"; grep -E '^(Name|memoryd)' "$LC_RUN/mcp-list-without-key.txt" >&2
lc_fake responses "$LC_RUN/no-key" --tool memory_search
write_config "$FAKE_URL" yes
(cd "$WORK" && env -u MEMORYD_API_KEY timeout 120 codex exec --skip-git-repo-check "Which runner image do we pin?" \
  >"$LC_RUN/no-key/stdout" 2>"$LC_RUN/no-key/stderr" </dev/null) || true
(cd "$WORK" && env -u MEMORYD_API_KEY RUST_LOG=warn timeout 120 codex exec --skip-git-repo-check "Which runner image do we pin?" \
  >"$LC_RUN/no-key/stdout-warn" 2>"$LC_RUN/no-key/stderr-warn" </dev/null) || true
lc_stop "$FAKE_PID"
say "codex exec without MEMORYD_API_KEY: memoryd tools offered: $(tools_offered "$LC_RUN/no-key")"
tools_offered "$LC_RUN/no-key" | grep -q memory_search && fail "Codex offered memoryd's tools without a key"
grep -q -i 'MEMORYD_API_KEY' "$LC_RUN/no-key/stderr" && fail "Codex now names the missing key without RUST_LOG: update docs/api.md"
grep 'MEMORYD_API_KEY' "$LC_RUN/no-key/stderr-warn" >&2 || fail "RUST_LOG=warn did not name the missing MEMORYD_API_KEY"
pass "Codex: without the key, memoryd is left out; only RUST_LOG=warn says why"

say "all Codex trials passed; logs in $LC_RUN"
