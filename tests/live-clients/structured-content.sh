#!/usr/bin/env bash
# Why memoryd sends no structuredContent (docs/api.md, "Over MCP"): a tool that
# answers both a text block and structuredContent (probe_mcp.py) is called by
# Codex CLI and by Claude Code through the fake model; the model of each sees
# the structured content as JSON, not the text. Needs no memoryd. Exits nonzero
# when a client shows its model the text instead (then the docs' reason is stale).
source "$(dirname "$0")/lib.sh"

lc_install node@22 "@openai/codex@${CODEX_VERSION:-0.171.0}" "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION:-2.1.197}"
PORT=$(lc_free_port)
python3 "$LC_HERE/probe_mcp.py" "$PORT" &
LC_PIDS+=($!)
sleep 0.5
mkdir -p "$LC_RUN/work"

export CODEX_HOME="$LC_RUN/codex-home"
mkdir -p "$CODEX_HOME"
lc_fake responses "$LC_RUN/codex" --server probe --tool probe --arguments '{}'
cat >"$CODEX_HOME/config.toml" <<TOML
model = "fake-model"
model_provider = "fake"

[model_providers.fake]
name = "fake model"
base_url = "$FAKE_URL/v1"
wire_api = "responses"

[mcp_servers.probe]
url = "http://127.0.0.1:$PORT/mcp"
required = true
TOML
(cd "$LC_RUN/work" && timeout 120 codex exec --skip-git-repo-check "probe" \
  >"$LC_RUN/codex/stdout" 2>"$LC_RUN/codex/stderr" </dev/null) || true
lc_stop "$FAKE_PID"
say "Codex $(codex --version 2>/dev/null) showed its model:"; lc_seen "$LC_RUN/codex" >&2

export HOME="$LC_RUN/home" CLAUDE_CONFIG_DIR="$LC_RUN/claude-config" ANTHROPIC_API_KEY=dummy
mkdir -p "$HOME" "$CLAUDE_CONFIG_DIR"
echo "{\"mcpServers\": {\"probe\": {\"type\": \"http\", \"url\": \"http://127.0.0.1:$PORT/mcp\", \"alwaysLoad\": true}}}" >"$LC_RUN/probe.json"
lc_fake messages "$LC_RUN/claude" --server probe --tool probe --arguments '{}'
(cd "$LC_RUN/work" && ANTHROPIC_BASE_URL="$FAKE_URL" timeout 120 claude -p "probe" --strict-mcp-config \
  --mcp-config "$LC_RUN/probe.json" --allowedTools mcp__probe >"$LC_RUN/claude/stdout" 2>"$LC_RUN/claude/stderr" </dev/null) || true
lc_stop "$FAKE_PID"
say "Claude Code $(claude --version) showed its model:"; lc_seen "$LC_RUN/claude" >&2

for client in codex claude; do
  [ -s "$LC_RUN/$client/tool_results.jsonl" ] || fail "$client: the probe tool was not called"
  grep STRUCTURED-PART "$LC_RUN/$client/tool_results.jsonl" >/dev/null || fail "$client: its model did not get the structured content"
  grep TEXT-PART "$LC_RUN/$client/tool_results.jsonl" >/dev/null && fail "$client: its model got the text block: docs/api.md's reason is stale"
done
pass "Codex and Claude Code show their model structuredContent (as JSON) in place of the text"
