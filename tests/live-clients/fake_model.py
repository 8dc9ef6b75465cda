#!/usr/bin/env python3
"""A scripted fake model for trying memoryd's MCP endpoint with real agent CLIs.

Speaks either the OpenAI Responses API (`--api responses`, for Codex CLI) or the
Anthropic Messages API (`--api messages`, for Claude Code), streaming over SSE
as the real services do. Python 3.11 standard library only.

The script, for every request that offers tools:

1. if the conversation holds the result of a call this fake made to a memoryd
   tool, it writes that result, exactly as the client sent it, to
   `<log-dir>/tool_results.jsonl` and answers with text that quotes it
   ("memoryd said: <first line>");
2. else, if the tool named by `--tool` (matched as `mcp__<server>__<tool>`,
   `<server>.<tool>`, or a name ending in `<tool>`) is offered and loaded, it
   calls it with `--arguments`;
3. else, if it is offered only deferred (Claude Code's tool search) and a
   `ToolSearch` tool is offered, it calls `ToolSearch` to load it;
4. else it answers "NO MEMORYD TOOL".

Requests without tools (titles, quota probes) get a short text answer. Every
request body is appended to `<log-dir>/requests.jsonl`, so the trial can show
what the client offered the model (its `tools` array) and what it sent back.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CALL_PREFIX = "call_memoryd_"
SEARCH_PREFIX = "call_toolsearch_"


class Script:
    def __init__(self, args: argparse.Namespace) -> None:
        self.api = args.api
        self.tool = args.tool
        self.arguments = json.loads(args.arguments)
        self.server = args.server
        self.log_dir = Path(args.log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.calls = 0

    # -- logging ---------------------------------------------------------
    def log(self, name: str, record: dict[str, Any]) -> None:
        with self.lock, open(self.log_dir / name, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    # -- tool lookup -----------------------------------------------------
    def tool_names(self, tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """(name as the model would call it, definition) for every tool,
        namespaced ones included."""
        out = []
        for t in tools or []:
            if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
                for inner in t["tools"]:
                    out.append((f"{t.get('name', '')}.{inner.get('name', '')}", inner | {"_namespace": t.get("name")}))
            elif "name" in t:
                out.append((t["name"], t))
        return out

    def find_target(self, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
        wanted = [f"mcp__{self.server}__{self.tool}", f"mcp__{self.server}.{self.tool}", f"{self.server}.{self.tool}"]
        named = self.tool_names(tools)
        for w in wanted:
            for name, t in named:
                if name == w:
                    return name, t
        for name, t in named:
            if name.endswith(self.tool):
                return name, t
        return None

    def next_call_id(self, prefix: str) -> str:
        with self.lock:
            self.calls += 1
            return f"{prefix}{self.calls}"

    def final_text(self, result_text: str) -> str:
        first = next((line for line in result_text.splitlines() if line.strip()), "")
        return f"memoryd said: {first}"


# ---------------------------------------------------------------- Responses
def responses_flatten(output: Any) -> str:
    """A function_call_output's `output`: a string, or a list of content items."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(p.get("text", "") for p in output if isinstance(p, dict))
    if isinstance(output, dict):
        return output.get("content", "") if isinstance(output.get("content"), str) else json.dumps(output)
    return json.dumps(output)


def responses_plan(script: Script, body: dict[str, Any]) -> dict[str, Any]:
    """What to answer: {"text": ...} or {"call": name, "arguments": {...}, "namespace": ...}."""
    items = body.get("input") or []
    tools = body.get("tools") or []
    ours = {i.get("call_id"): i for i in items if isinstance(i, dict) and i.get("type") == "function_call"
            and str(i.get("call_id", "")).startswith(CALL_PREFIX)}
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output")
               and i.get("call_id") in ours]
    if outputs:
        last = outputs[-1]
        raw = last.get("output")
        text = responses_flatten(raw)
        call = ours[last["call_id"]]
        script.log("tool_results.jsonl", {"api": "responses", "tool": call.get("name"), "namespace": call.get("namespace"),
                                          "raw_output": raw, "text": text})
        # Quote the tool's own part: Codex puts its framing ("Wall time: …") in a part before it.
        quoted = raw[-1].get("text", text) if isinstance(raw, list) and raw and isinstance(raw[-1], dict) else text
        return {"text": script.final_text(quoted)}
    if not tools:
        return {"text": "ok"}
    target = script.find_target(tools)
    if target is None:
        return {"text": "NO MEMORYD TOOL"}
    name, t = target
    ns = t.get("_namespace")
    return {"call": t["name"] if ns else name, "namespace": ns, "arguments": script.arguments}


def responses_events(script: Script, plan: dict[str, Any]) -> list[dict[str, Any]]:
    rid = f"resp_{int(time.time() * 1000)}"
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}},
        {"type": "response.in_progress", "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}},
    ]
    if "call" in plan:
        item: dict[str, Any] = {"type": "function_call", "id": f"fc_{rid}", "call_id": script.next_call_id(CALL_PREFIX),
                                "name": plan["call"], "arguments": json.dumps(plan["arguments"]), "status": "completed"}
        if plan.get("namespace"):
            item["namespace"] = plan["namespace"]
        events.append({"type": "response.output_item.added", "output_index": 0, "item": item | {"arguments": "", "status": "in_progress"}})
        events.append({"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": item["id"], "delta": item["arguments"]})
        events.append({"type": "response.function_call_arguments.done", "output_index": 0, "item_id": item["id"], "arguments": item["arguments"]})
        events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
        output = [item]
    else:
        text = plan["text"]
        mid = f"msg_{rid}"
        msg = {"type": "message", "id": mid, "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": msg | {"status": "in_progress", "content": []}})
        events.append({"type": "response.content_part.added", "output_index": 0, "item_id": mid, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}})
        events.append({"type": "response.output_text.delta", "output_index": 0, "item_id": mid, "content_index": 0, "delta": text})
        events.append({"type": "response.output_text.done", "output_index": 0, "item_id": mid, "content_index": 0, "text": text})
        events.append({"type": "response.content_part.done", "output_index": 0, "item_id": mid, "content_index": 0,
                       "part": {"type": "output_text", "text": text, "annotations": []}})
        events.append({"type": "response.output_item.done", "output_index": 0, "item": msg})
        output = [msg]
    usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
    events.append({"type": "response.completed",
                   "response": {"id": rid, "object": "response", "status": "completed", "output": output, "usage": usage}})
    for n, e in enumerate(events):
        e["sequence_number"] = n
    return events


# ---------------------------------------------------------------- Messages
def messages_flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return json.dumps(content)


def messages_plan(script: Script, body: dict[str, Any]) -> dict[str, Any]:
    msgs = body.get("messages") or []
    tools = body.get("tools") or []
    uses: dict[str, dict[str, Any]] = {}
    for m in msgs:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_use":
                    uses[b["id"]] = b
    results = []
    for m in msgs:
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_result" and b.get("tool_use_id") in uses:
                    results.append(b)
    ours = [r for r in results if r["tool_use_id"].startswith(CALL_PREFIX)]
    if ours:
        last = ours[-1]
        text = messages_flatten(last.get("content"))
        script.log("tool_results.jsonl", {"api": "messages", "tool": uses[last["tool_use_id"]].get("name"),
                                          "raw_output": last.get("content"), "is_error": last.get("is_error", False),
                                          "text": text})
        return {"text": script.final_text(text)}
    if not tools:
        return {"text": "ok"}
    target = script.find_target(tools)
    searched = any(r["tool_use_id"].startswith(SEARCH_PREFIX) for r in results)
    if target is not None and (not target[1].get("defer_loading") or searched):
        return {"call": target[0], "arguments": script.arguments, "id": script.next_call_id(CALL_PREFIX)}
    search = next((t for t in tools if t.get("name") == "ToolSearch"), None)
    if search is not None and not searched:
        return {"call": "ToolSearch", "arguments": {"query": f"select:mcp__{script.server}__{script.tool}", "max_results": 5},
                "id": script.next_call_id(SEARCH_PREFIX)}
    return {"text": "NO MEMORYD TOOL"}


def messages_message(body: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    if "call" in plan:
        content = [{"type": "tool_use", "id": plan["id"], "name": plan["call"], "input": plan["arguments"]}]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": plan["text"]}]
        stop = "end_turn"
    return {"id": f"msg_{int(time.time() * 1000)}", "type": "message", "role": "assistant",
            "model": body.get("model", "fake"), "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def messages_events(msg: dict[str, Any]) -> list[dict[str, Any]]:
    start = msg | {"content": [], "stop_reason": None, "usage": msg["usage"] | {"output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(msg["content"]):
        if block["type"] == "tool_use":
            events.append({"type": "content_block_start", "index": i, "content_block": block | {"input": {}}})
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        else:
            events.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            events.append({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}})
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                   "usage": {"output_tokens": 10}})
    events.append({"type": "message_stop"})
    return events


# ---------------------------------------------------------------- HTTP
def make_handler(script: Script):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet
            pass

        def send_json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_sse(self, events: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for e in events:
                self.wfile.write(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

        def do_GET(self) -> None:
            script.log("requests.jsonl", {"method": "GET", "path": self.path})
            if self.path.split("?")[0].endswith("/models"):
                self.send_json(200, {"object": "list", "data": [], "models": []})
            else:
                self.send_json(404, {"error": {"message": f"fake model: no GET {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            path = self.path.split("?")[0]
            script.log("requests.jsonl", {"method": "POST", "path": self.path, "body": body})
            if path.endswith("/count_tokens"):
                self.send_json(200, {"input_tokens": 100})
                return
            if script.api == "responses" and path.endswith("/responses"):
                plan = responses_plan(script, body)
                script.log("plans.jsonl", {"path": self.path, "plan": plan})
                self.send_sse(responses_events(script, plan))
                return
            if script.api == "messages" and path.endswith("/messages"):
                plan = messages_plan(script, body)
                script.log("plans.jsonl", {"path": self.path, "plan": plan})
                msg = messages_message(body, plan)
                if body.get("stream"):
                    self.send_sse(messages_events(msg))
                else:
                    self.send_json(200, msg)
                return
            self.send_json(404, {"error": {"type": "not_found_error", "message": f"fake model: no POST {self.path}"}})

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--api", choices=["responses", "messages"], required=True)
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--log-dir", required=True)
    p.add_argument("--server", default="memoryd", help="the MCP server's name in the client's configuration")
    p.add_argument("--tool", default="memory_search")
    p.add_argument("--arguments", default='{"query": "runner image"}')
    args = p.parse_args()
    script = Script(args)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(script))
    port = httpd.server_address[1]
    if args.port_file:
        Path(args.port_file).write_text(str(port))
    print(f"fake model ({args.api}) on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
