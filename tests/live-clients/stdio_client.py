#!/usr/bin/env python3
"""Drive a stdio MCP server entry the way Claude Desktop does, and try memoryd through it.

Reads a client configuration (`{"mcpServers": {NAME: {"command", "args", "env"}}}`),
starts the command with its args as given (no shell: `${VAR}` in an argument
reaches the program unexpanded, as from Claude Desktop) and the process
environment plus `env`, then speaks newline-delimited JSON-RPC over its stdin
and stdout: initialize, tools/list, tools/call (memory_search, memory_read, an
unknown tool), resources/list, resources/read, prompts/get. Every message both
ways goes to --transcript; a summary goes to stdout as JSON. Exits 0 when the
session ran, whatever the answers; the caller checks them. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any


class Session:
    def __init__(self, proc: subprocess.Popen, transcript, timeout: float) -> None:
        self.proc = proc
        self.transcript = transcript
        self.timeout = timeout
        self.next_id = 0
        self.inbox: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            self.transcript.write(f"<- {line}\n")
            self.transcript.flush()
            try:
                self.inbox.put(json.loads(line))
            except json.JSONDecodeError:
                pass
        self.inbox.put(None)

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message)
        self.transcript.write(f"-> {line}\n")
        self.transcript.flush()
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return {"timeout": True}
            try:
                msg = self.inbox.get(timeout=left)
            except queue.Empty:
                return {"timeout": True}
            if msg is None:
                return {"closed": True}
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg
            # a server request or notification: answer pings, ignore the rest
            if msg.get("method") == "ping" and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})


def text_of(result: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a client configuration file with mcpServers")
    p.add_argument("--server", default="memoryd")
    p.add_argument("--transcript", required=True)
    p.add_argument("--stderr", required=True, help="where the server's stderr goes")
    p.add_argument("--cwd", default=None)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--workspace", default="alice")
    args = p.parse_args()

    entry = json.load(open(args.config, encoding="utf-8"))["mcpServers"][args.server]
    env = dict(os.environ) | entry.get("env", {})
    summary: dict[str, Any] = {"command": [entry["command"], *entry.get("args", [])]}
    with open(args.transcript, "w", encoding="utf-8") as transcript, open(args.stderr, "w", encoding="utf-8") as err:
        proc = subprocess.Popen([entry["command"], *entry.get("args", [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, env=env, cwd=args.cwd, text=True, bufsize=1,
                                start_new_session=True)
        s = Session(proc, transcript, args.timeout)
        try:
            init = s.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "live-clients-stdio", "version": "1.0"}})
            summary["initialize"] = init.get("result", init)
            if "result" not in init:
                return
            s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            tools = s.request("tools/list")
            summary["tools"] = [t["name"] for t in tools.get("result", {}).get("tools", [])]
            search = s.request("tools/call", {"name": "memory_search", "arguments": {"query": "runner image"}})
            summary["memory_search"] = search.get("result", search)
            summary["memory_search_text"] = text_of(search.get("result", {}))
            read = s.request("tools/call", {"name": "memory_read", "arguments": {"path": "MEMORY.md", "limit": 3}})
            summary["memory_read_text"] = text_of(read.get("result", {}))
            missing = s.request("tools/call", {"name": "memory_read", "arguments": {"path": "notes.md"}})
            summary["memory_read_missing"] = missing.get("result", missing)
            unknown = s.request("tools/call", {"name": "no_such_tool", "arguments": {}})
            summary["unknown_tool"] = unknown.get("error", unknown)
            resources = s.request("resources/list")
            summary["resources"] = [r["uri"] for r in resources.get("result", {}).get("resources", [])]
            uri = f"memory://{args.workspace}/default/MEMORY.md"
            res = s.request("resources/read", {"uri": uri})
            contents = res.get("result", {}).get("contents", [])
            summary["resource_text"] = contents[0].get("text", "") if contents else res
            prompt = s.request("prompts/get", {"name": "memory_instructions"})
            msgs = prompt.get("result", {}).get("messages", [])
            summary["prompt_start"] = (msgs[0]["content"].get("text", "")[:200] if msgs else prompt)
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            # npx runs mcp-remote as a child: end the whole process group it started.
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    continue
            json.dump(summary, sys.stdout, indent=1)
            print()


if __name__ == "__main__":
    main()
