# Shared by codex.sh, claude-code.sh and mcp-remote.sh: install the clients,
# start memoryd and a fake model, seed Alice's memory, clean up.
# Sourced, not run. Needs: bash, curl, python3 (3.11), npm (any Node: the
# npm package `node` brings Node 22 where the machine's is older).

set -euo pipefail

LC_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LC_PREFIX="${LC_PREFIX:-/tmp/live-clients}"          # npm packages go here, never into the repo
MEMORYD_BIN="${MEMORYD_BIN:-$LC_HERE/../../target/debug/memoryd}"
LC_RUN="${LC_RUN:-$LC_PREFIX/runs/$(basename "$0" .sh)-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LC_RUN"
LC_PIDS=()

say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
pass() { printf 'ok: %s\n' "$*" >&2; }

lc_cleanup() {
  local pid
  if [ -n "${LC_TMUX:-}" ]; then tmux kill-session -t "$LC_TMUX" 2>/dev/null || true; fi
  for pid in "${LC_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${LC_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap lc_cleanup EXIT

lc_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# lc_install PKG...: npm install into $LC_PREFIX unless the exact spec is there;
# prints the time it took and the size of node_modules afterwards.
lc_install() {
  mkdir -p "$LC_PREFIX"
  [ -f "$LC_PREFIX/package.json" ] || echo '{"name":"live-clients","private":true}' >"$LC_PREFIX/package.json"
  local start end
  start=$(date +%s)
  (cd "$LC_PREFIX" && npm install --no-fund --no-audit --loglevel=error "$@" >&2)
  end=$(date +%s)
  # Node 22 from npm's `node` package first, unless LC_SYSTEM_NODE=1 (to try the machine's own).
  if [ "${LC_SYSTEM_NODE:-0}" = 1 ]; then
    export PATH="$PATH:$LC_PREFIX/node_modules/.bin"   # .bin holds a `node` too: last
  else
    export PATH="$LC_PREFIX/node_modules/.bin:$LC_PREFIX/node_modules/node/bin:$PATH"
  fi
  say "npm install $* took $((end - start)) s; $LC_PREFIX/node_modules is $(du -sh "$LC_PREFIX/node_modules" | cut -f1); node $(node --version)"
}

# lc_start_memoryd: memoryd on a free port with a fresh data dir; sets BASE.
lc_start_memoryd() {
  [ -x "$MEMORYD_BIN" ] || fail "no memoryd binary at $MEMORYD_BIN (set MEMORYD_BIN)"
  local port
  port=$(lc_free_port)
  BASE="http://127.0.0.1:$port"
  MEMORYD_ADMIN_TOKEN=change-me MEMORYD_DATA_DIR="$LC_RUN/memoryd-data" MEMORYD_LISTEN="127.0.0.1:$port" \
    "$MEMORYD_BIN" serve >"$LC_RUN/memoryd.log" 2>&1 &
  LC_PIDS+=($!)
  for _ in $(seq 100); do curl -sf "$BASE/healthz" >/dev/null && break; sleep 0.1; done
  curl -sf "$BASE/healthz" >/dev/null || fail "memoryd did not start (see $LC_RUN/memoryd.log)"
  say "memoryd $("$MEMORYD_BIN" --version 2>/dev/null || true) on $BASE, log $LC_RUN/memoryd.log"
}

# lc_seed: a tenant, its key (every permission: it may edit) in MEMORYD_API_KEY,
# a read-only key in READ_KEY, and Alice's memory from one closed session.
lc_seed() {
  local tenant
  tenant=$(curl -sf -X POST "$BASE/v1/admin/tenants" -H 'Authorization: Bearer change-me' -d '{"name": "live-clients"}')
  MEMORYD_API_KEY=$(echo "$tenant" | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')
  export MEMORYD_API_KEY
  READ_KEY=$(curl -sf -X POST "$BASE/v1/keys" -H "Authorization: Bearer $MEMORYD_API_KEY" \
    -d '{"name": "read only", "workspaces": ["alice"], "permissions": ["read"]}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')
  curl -sf -X POST "$BASE/v1/sessions" -H "Authorization: Bearer $MEMORYD_API_KEY" \
    -d '{"session_id": "seed", "workspace": "alice"}' >/dev/null
  curl -sf -X POST "$BASE/v1/sessions/seed/layouts/default/segments" -H "Authorization: Bearer $MEMORYD_API_KEY" \
    -d '{"rollout_id": "chat-1", "input": "The CI jobs fail at random. Pin the runner image ubuntu-22.04 in ci.yml.",
         "generated_items": [{"role": "assistant", "content": "Pinned the runner image ubuntu-22.04 in ci.yml; the jobs pass now."}],
         "terminal_metadata": {"terminal_state": "completed", "has_final_output": true},
         "final_output": "Pinned the runner image ubuntu-22.04."}' >/dev/null
  curl -sf -X POST "$BASE/v1/sessions/seed/close?wait=30" -H "Authorization: Bearer $MEMORYD_API_KEY" >"$LC_RUN/close.json"
  grep -q '"status":"complete"' "$LC_RUN/close.json" || fail "the close did not complete (see $LC_RUN/close.json)"
  # The extractive provider keeps the task, not every fact: add the fact as an
  # agent would, through the edit route.
  curl -sf -X POST "$BASE/v1/workspaces/alice/layouts/default/memory/edits" -H "Authorization: Bearer $MEMORYD_API_KEY" \
    -d '{"operations": [{"command": "insert", "path": "MEMORY.md", "insert_line": 0,
         "insert_text": "- Pin the runner image ubuntu-22.04 in ci.yml (the CI jobs fail at random otherwise)."}],
         "session_id": "seed", "reason": "seed"}' >"$LC_RUN/seed-edit.json"
  curl -sf "$BASE/v1/workspaces/alice/layouts/default/files/MEMORY.md" -H "Authorization: Bearer $MEMORYD_API_KEY" \
    >"$LC_RUN/MEMORY.md" || fail "no MEMORY.md after the close (see $LC_RUN/close.json)"
  grep -q 'ubuntu-22.04' "$LC_RUN/MEMORY.md" || fail "MEMORY.md does not mention ubuntu-22.04"
  say "seeded workspace alice: MEMORY.md has $(wc -l <"$LC_RUN/MEMORY.md") lines"
}

# lc_fake API LOGDIR [fake_model.py options...]: start the fake model; sets FAKE_URL.
lc_fake() {
  local api=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  rm -f "$dir/port"
  python3 "$LC_HERE/fake_model.py" --api "$api" --log-dir "$dir" --port-file "$dir/port" "$@" 2>"$dir/fake.log" &
  LC_PIDS+=($!)
  for _ in $(seq 50); do [ -s "$dir/port" ] && break; sleep 0.1; done
  [ -s "$dir/port" ] || fail "the fake model did not start"
  FAKE_PID=$!
  FAKE_URL="http://127.0.0.1:$(cat "$dir/port")"
}

lc_stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# lc_seen DIR: what the model saw from memoryd (the fake's tool_results.jsonl), as text.
lc_seen() {
  python3 - "$1/tool_results.jsonl" <<'EOF'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
except FileNotFoundError:
    rows = []
for r in rows:
    print(f"--- {r['tool']} (raw output type: {type(r['raw_output']).__name__})")
    print(r["text"])
EOF
}

# lc_expect_readable DIR PATTERN: the model got memoryd's text (not JSON) holding PATTERN.
lc_expect_readable() {
  local dir=$1 pattern=$2
  [ -s "$dir/tool_results.jsonl" ] || fail "the model never got a memoryd tool result ($dir)"
  python3 - "$dir/tool_results.jsonl" "$pattern" <<'EOF' || fail "the model did not see readable text matching '$pattern' (see $dir/tool_results.jsonl)"
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
raw = rows[-1]["raw_output"]
# The client's own framing (Codex: "Wall time: …\nOutput:") is a part of its own;
# memoryd's text is another, unchanged.
parts = [p.get("text", "") for p in raw if isinstance(p, dict)] if isinstance(raw, list) else [rows[-1]["text"]]
for part in parts:
    try:
        json.loads(part)
        sys.exit(f"a part of the tool result is JSON: {part[:200]}")
    except ValueError:
        pass
if not any(re.search(sys.argv[2], part, re.M) for part in parts):
    sys.exit(f"no part matches {sys.argv[2]!r}")
EOF
}

# lc_slow DELAY: a slow_proxy.py in front of memoryd; sets SLOW_BASE (and SLOW_PID).
lc_slow() {
  local port
  port=$(lc_free_port)
  python3 "$LC_HERE/slow_proxy.py" "$port" "${BASE##*:}" "$1" &
  SLOW_PID=$!
  LC_PIDS+=("$SLOW_PID")
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  SLOW_BASE="http://127.0.0.1:$port"
}

# lc_docs_block LANG N [BASE]: the Nth (from 1) LANG block of docs/api.md's
# "Over MCP" section, its example URL pointed at BASE (default $BASE): the
# trials run the documented configuration itself.
lc_docs_block() {
  python3 - "$LC_HERE/../../docs/api.md" "$1" "$2" "${3:-$BASE}" <<'PY'
import re, sys
doc, lang, n, base = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
text = open(doc, encoding="utf-8").read()
section = text[text.index("### Over MCP"):]
section = section[:section.index("\n### ", 1)]
blocks = re.findall(r"^```" + lang + r"\n(.*?)^```", section, re.S | re.M)
print(blocks[n - 1].replace("https://memoryd.example.com", base), end="")
PY
}
