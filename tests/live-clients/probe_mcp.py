#!/usr/bin/env python3
"""A minimal stateless MCP server (Streamable HTTP, JSON answers) with one tool,
`probe`, whose result carries both a text block and structuredContent: to see
which of the two a client hands its model. Standard library only.
Usage: probe_mcp.py PORT (serves http://127.0.0.1:PORT/mcp)."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL = {
    "name": "probe",
    "description": "Answers a text block and structuredContent.",
    "inputSchema": {"type": "object", "properties": {}},
    "outputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}
RESULT = {
    "content": [{"type": "text", "text": "TEXT-PART: the readable text"}],
    "structuredContent": {"x": "STRUCTURED-PART"},
    "isError": False,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.empty(405)

    def do_DELETE(self) -> None:
        self.empty(405)

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if "id" not in msg:
            self.empty(202)
            return
        method = msg.get("method")
        if method == "initialize":
            result = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            result = RESULT
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
