#!/usr/bin/env bash
# Claude Code (`claude -p`) against memoryd's /v1/mcp, with the `.mcp.json` of
# docs/api.md and a scripted fake Messages API model (fake_model.py). Exits
# nonzero when an expectation fails.
# Usage: MEMORYD_BIN=target/debug/memoryd tests/live-clients/claude-code.sh
# Env: CLAUDE_CODE_VERSION (default 2.1.197), LC_PREFIX (npm prefix, /tmp/live-clients).
source "$(dirname "$0")/lib.sh"

lc_install node@22 "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION:-2.1.197}"
say "$(claude --version)"
lc_start_memoryd
lc_seed

# A throwaway home and config dir: no login, no earlier approvals.
export HOME="$LC_RUN/home" CLAUDE_CONFIG_DIR="$LC_RUN/claude-config"
export ANTHROPIC_API_KEY=dummy DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1
PROJECT="$LC_RUN/project"
mkdir -p "$HOME" "$CLAUDE_CONFIG_DIR" "$PROJECT"

# write_mcp_json FILE ALWAYS_LOAD [MEMORYD_BASE]: the docs' .mcp.json as it
# stands, but for the URL (and without "alwaysLoad" when ALWAYS_LOAD is no).
write_mcp_json() {
  lc_docs_block json 1 "${3:-$BASE}" | python3 -c '
import json, sys
config = json.load(sys.stdin)
if sys.argv[1] == "no":
    config["mcpServers"]["memoryd"].pop("alwaysLoad", None)
print(json.dumps(config, indent=2))' "$2" >"$1"
  grep -q 'Bearer ${MEMORYD_API_KEY}' "$1" || fail "no .mcp.json block in docs/api.md"
}
write_mcp_json "$PROJECT/.mcp.json" yes
cat "$PROJECT/.mcp.json" >&2

# run NAME TOOL ARGUMENTS PROMPT [claude options...]: one `claude -p` in the
# project against a fresh fake; the environment may add ENABLE_TOOL_SEARCH.
run() {
  local name=$1 tool=$2 arguments=$3 prompt=$4
  shift 4
  lc_fake messages "$LC_RUN/$name" --tool "$tool" --arguments "$arguments"
  say "claude -p ($name): $* ${ENABLE_TOOL_SEARCH+ENABLE_TOOL_SEARCH=$ENABLE_TOOL_SEARCH}"
  (cd "$PROJECT" && ANTHROPIC_BASE_URL="$FAKE_URL" timeout 120 claude -p "$prompt" "$@" \
    >"$LC_RUN/$name/stdout" 2>"$LC_RUN/$name/stderr" </dev/null) || echo "claude exited $?" >&2
  lc_stop "$FAKE_PID"
  echo "answer: $(cat "$LC_RUN/$name/stdout")" >&2
}

# offered NAME: for the main request (the first with tools), memoryd's tools
# as offered (deferred ones marked) and whether ToolSearch is there.
offered() {
  python3 - "$LC_RUN/$1/requests.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    body = json.loads(line).get("body") or {}
    tools = body.get("tools")
    if not tools:
        continue
    names = [t["name"] + (" (deferred)" if t.get("defer_loading") else "") for t in tools if "memoryd" in t.get("name", "")]
    search = any(t.get("name") == "ToolSearch" for t in tools)
    print(f"{len(tools)} tools; memoryd: {', '.join(names) or '(none)'}; ToolSearch: {'yes' if search else 'no'}")
    break
EOF
}

# 1. The docs' command in a project with the docs' .mcp.json.
run default memory_search '{"query": "runner image"}' "Which runner image do we pin?" --allowedTools mcp__memoryd
say "offered: $(offered default)"
lc_seen "$LC_RUN/default" >&2
lc_expect_readable "$LC_RUN/default" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
grep -q 'memoryd said: MEMORY.md:' "$LC_RUN/default/stdout" || fail "claude -p did not print the model's answer"
pass "Claude Code: the project's .mcp.json server ran in -p with no approval; the model saw path:line: text"

# 2. Tool search. Against a base URL that is not api.anthropic.com (a proxy,
#    this fake) Claude Code leaves it off unless ENABLE_TOOL_SEARCH is set, so
#    step 1 had the tools up front anyway. With ENABLE_TOOL_SEARCH=true and no
#    "alwaysLoad", memoryd's tools are not in the first request: a system
#    message names memoryd among the servers whose tools ToolSearch finds; the
#    fake calls ToolSearch ("select:mcp__memoryd__memory_search"), gets a
#    tool_reference back, and the next request carries the tool with
#    defer_loading. "alwaysLoad": true keeps them up front.
write_mcp_json "$PROJECT/.mcp.json" no
ENABLE_TOOL_SEARCH=true run search-on memory_search '{"query": "runner image"}' "Which runner image do we pin?" --allowedTools mcp__memoryd
say "ENABLE_TOOL_SEARCH=true, no alwaysLoad, first request: $(offered search-on)"
offered search-on | grep 'memoryd: (none); ToolSearch: yes' >/dev/null || fail "ENABLE_TOOL_SEARCH=true did not defer memoryd's tools"
grep -q '"call": "ToolSearch"' "$LC_RUN/search-on/plans.jsonl" || fail "the fake did not need ToolSearch"
lc_expect_readable "$LC_RUN/search-on" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
pass "Claude Code: ENABLE_TOOL_SEARCH=true deferred memoryd's tools; ToolSearch loaded memory_search"
ENABLE_TOOL_SEARCH=false run search-off memory_search '{"query": "runner image"}' "Which runner image do we pin?" --allowedTools mcp__memoryd
say "ENABLE_TOOL_SEARCH=false, no alwaysLoad, first request: $(offered search-off)"
offered search-off | grep 'mcp__memoryd__memory_search.*ToolSearch: no' >/dev/null || fail "ENABLE_TOOL_SEARCH=false did not load memoryd's tools up front"
pass "Claude Code: ENABLE_TOOL_SEARCH=false loads memoryd's tools up front"
write_mcp_json "$PROJECT/.mcp.json" yes
ENABLE_TOOL_SEARCH=true run search-on-always memory_search '{"query": "runner image"}' "Which runner image do we pin?" --allowedTools mcp__memoryd
say "ENABLE_TOOL_SEARCH=true, alwaysLoad, first request: $(offered search-on-always)"
offered search-on-always | grep 'mcp__memoryd__memory_search.*ToolSearch: yes' >/dev/null || fail "alwaysLoad did not keep memoryd's tools out of tool search"
offered search-on-always | grep 'deferred' >/dev/null && fail "alwaysLoad: memoryd's tools were deferred"
pass "Claude Code: with \"alwaysLoad\": true memoryd's tools stay up front under tool search"

# 2b. A memoryd slow to answer (1 s a request, through slow_proxy.py): claude -p
#     connects in the background and starts without memoryd's tools, unless
#     "alwaysLoad": true (or MCP_CONNECTION_NONBLOCKING=false) makes it wait.
lc_slow 1
write_mcp_json "$PROJECT/.mcp.json" no "$SLOW_BASE"
run slow memory_search '{"query": "runner image"}' "Which runner image do we pin?" --allowedTools mcp__memoryd
say "slow memoryd, no alwaysLoad: $(offered slow)"
write_mcp_json "$PROJECT/.mcp.json" yes "$SLOW_BASE"
run slow-always memory_search '{"query": "runner image"}' "Which runner image do we pin?" --allowedTools mcp__memoryd
say "slow memoryd, alwaysLoad: $(offered slow-always)"
lc_stop "$SLOW_PID"
write_mcp_json "$PROJECT/.mcp.json" yes
offered slow | grep 'memoryd: (none)' >/dev/null || say "NOTE: claude -p now waits for a slow server without alwaysLoad"
lc_expect_readable "$LC_RUN/slow-always" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
pass "Claude Code: with \"alwaysLoad\": true, claude -p waited for a slow memoryd"

# 3. Without --allowedTools, -p refuses the call and the model is told so.
run not-allowed memory_search '{"query": "runner image"}' "Which runner image do we pin?"
lc_seen "$LC_RUN/not-allowed" >&2
grep -q "haven't granted it" "$LC_RUN/not-allowed/tool_results.jsonl" || fail "a call without --allowedTools was not refused"
pass "Claude Code: without --allowedTools the call is refused"

# 4. memory_edit runs under the same permission (mcp__memoryd covers every tool).
run edit memory_edit '{"operations": [{"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- Claude Code was here."}]}' \
  "Note that Claude Code was here." --allowedTools mcp__memoryd
lc_seen "$LC_RUN/edit" >&2
curl -sf "$BASE/v1/workspaces/alice/layouts/default/files/MEMORY.md" -H "Authorization: Bearer $MEMORYD_API_KEY" |
  grep 'Claude Code was here' >/dev/null || fail "memory_edit did not change MEMORY.md"
pass "Claude Code: memory_edit changed MEMORY.md"

# 5. The same server from --mcp-config (any directory) with --strict-mcp-config.
write_mcp_json "$LC_RUN/memoryd-mcp.json" yes
OUTSIDE="$LC_RUN/elsewhere"; mkdir -p "$OUTSIDE"
lc_fake messages "$LC_RUN/strict" --tool memory_search
(cd "$OUTSIDE" && ANTHROPIC_BASE_URL="$FAKE_URL" timeout 120 claude -p "Which runner image do we pin?" \
  --strict-mcp-config --mcp-config "$LC_RUN/memoryd-mcp.json" --allowedTools mcp__memoryd \
  >"$LC_RUN/strict/stdout" 2>"$LC_RUN/strict/stderr" </dev/null) || true
lc_stop "$FAKE_PID"
lc_expect_readable "$LC_RUN/strict" '^MEMORY\.md:[0-9]+: .*ubuntu-22\.04'
pass "Claude Code: --strict-mcp-config --mcp-config works outside the project"

# 6. @memoryd:memory://… in a prompt. With -p it stays text: nothing is attached.
MENTION="What does @memoryd:memory://alice/default/MEMORY.md say?"
attached() {
  python3 - "$LC_RUN/$1/requests.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    body = json.loads(line).get("body") or {}
    if body.get("tools"):
        text = json.dumps(body["messages"])
        print("yes" if "Full contents of resource" in text and "ubuntu-22.04" in text else "no")
        break
EOF
}
run attach-p memory_search '{"query": "runner image"}' "$MENTION" --allowedTools mcp__memoryd
say "-p with an @ mention: resource attached: $(attached attach-p)"
[ "$(attached attach-p)" = no ] || say "NOTE: claude -p now attaches @ mentions of MCP resources: docs/api.md can drop the caveat"
#    In -p the model reads it with ReadMcpResourceTool, a tool of Claude Code's
#    own that mcp__memoryd does not cover.
run read-resource ReadMcpResourceTool '{"server": "memoryd", "uri": "memory://alice/default/MEMORY.md"}' \
  "What does MEMORY.md say?" --allowedTools mcp__memoryd ReadMcpResourceTool
lc_seen "$LC_RUN/read-resource" >&2
#    (Claude Code hands the model this tool's answer as JSON of its own: the
#    resources/read result, the file's text in "contents"[0]."text".)
grep -q 'ubuntu-22.04' "$LC_RUN/read-resource/tool_results.jsonl" || fail "ReadMcpResourceTool did not read MEMORY.md"
pass "Claude Code: in -p, ReadMcpResourceTool reads memory://alice/default/MEMORY.md"

#    Interactively (tmux) the mention attaches the file ("Full contents of resource").
if command -v tmux >/dev/null; then
  cat >"$CLAUDE_CONFIG_DIR/.claude.json" <<EOF
{"hasCompletedOnboarding": true, "theme": "dark", "customApiKeyResponses": {"approved": ["dummy"], "rejected": []},
 "projects": {"$PROJECT": {"hasTrustDialogAccepted": true, "enabledMcpjsonServers": ["memoryd"]}}}
EOF
  lc_fake messages "$LC_RUN/attach-tui" --tool memory_search
  TMUX_SESSION="lc-claude-$$"
  LC_TMUX=$TMUX_SESSION   # ended by lc_cleanup if a step fails
  tmux new-session -d -s "$TMUX_SESSION" -x 200 -y 50 \
    "cd '$PROJECT' && env ANTHROPIC_BASE_URL='$FAKE_URL' claude --allowedTools mcp__memoryd; sleep 5"
  sleep 6
  tmux send-keys -t "$TMUX_SESSION" -l "$MENTION"
  sleep 2
  tmux send-keys -t "$TMUX_SESSION" Escape
  sleep 0.5
  tmux send-keys -t "$TMUX_SESSION" Enter
  for _ in $(seq 30); do [ -s "$LC_RUN/attach-tui/tool_results.jsonl" ] && break; sleep 1; done
  tmux capture-pane -p -t "$TMUX_SESSION" >"$LC_RUN/attach-tui/screen.txt" || true
  tmux kill-session -t "$TMUX_SESSION" || true
  LC_TMUX=
  lc_stop "$FAKE_PID"
  say "interactive with an @ mention: resource attached: $(attached attach-tui)"
  [ "$(attached attach-tui)" = yes ] || fail "the interactive session did not attach memory://alice/default/MEMORY.md"
  pass "Claude Code: interactively, @memoryd:memory://alice/default/MEMORY.md attaches the file"
  rm -f "$CLAUDE_CONFIG_DIR/.claude.json"
else
  say "no tmux: the interactive @ mention trial is skipped"
fi

# 7. Without MEMORYD_API_KEY: memoryd answers 401 and the run goes on without
#    memoryd's tools; the debug log says why.
(
  unset MEMORYD_API_KEY
  cd "$PROJECT" && claude mcp list >"$LC_RUN/mcp-list-without-key.txt" 2>&1 || true
)
(cd "$PROJECT" && claude mcp list >"$LC_RUN/mcp-list-with-key.txt" 2>&1) || true
lc_fake messages "$LC_RUN/no-key" --tool memory_search
(cd "$PROJECT" && env -u MEMORYD_API_KEY ANTHROPIC_BASE_URL="$FAKE_URL" timeout 120 claude -p "Which runner image do we pin?" \
  --allowedTools mcp__memoryd --debug-file "$LC_RUN/no-key/debug.txt" \
  >"$LC_RUN/no-key/stdout" 2>"$LC_RUN/no-key/stderr" </dev/null) || true
lc_stop "$FAKE_PID"
say "claude mcp list (key set): $(grep memoryd "$LC_RUN/mcp-list-with-key.txt")"
say "claude mcp list (key unset): $(grep memoryd "$LC_RUN/mcp-list-without-key.txt")"
say "no key, first request: $(offered no-key); stderr: $(head -c 300 "$LC_RUN/no-key/stderr")"
grep -i -E 'memoryd.*(MEMORYD_API_KEY|401|auth|fail|error)|missing environment' "$LC_RUN/no-key/debug.txt" | cut -c1-300 | head -8 >&2 || true
offered no-key | grep 'memoryd: (none)' >/dev/null || fail "Claude Code offered memoryd's tools without a key"

say "all Claude Code trials passed; logs in $LC_RUN"
