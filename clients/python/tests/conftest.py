"""The real memoryd binary (see ``harness.py``), on SQLite and on Postgres,
and the fakes the tests need: an OpenAI-compatible model for the agents and a
proxy that injects faults between the client and memoryd."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from harness import REPO, Server, start_memoryd  # noqa: F401 (REPO: for the tests)


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request, tmp_path_factory) -> Server:
    srv, stop = start_memoryd(tmp_path_factory.mktemp(request.param), request.param)
    yield srv
    stop()


@pytest.fixture
def tenant(server) -> tuple[str, str]:
    return server.tenant()


# -- a scripted OpenAI-compatible model (the Responses API) ---------------


def text_reply(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:12]}",
        "call_id": f"call_{uuid.uuid4().hex[:12]}",
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


@dataclass
class FakeModel:
    """Answers ``POST /responses`` with the next scripted output (a list of
    output items), or ``default``; keeps every request body."""

    base_url: str = ""
    script: list[list[dict[str, Any]]] = field(default_factory=list)
    default: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda body: [text_reply("ok")]
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append(body)
            output = self.script.pop(0) if self.script else self.default(body)
        return {
            "id": f"resp_{uuid.uuid4().hex[:12]}",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "fake"),
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "total_tokens": 15,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }


def serve(handler_cls) -> tuple[ThreadingHTTPServer, str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def fake_model() -> FakeModel:
    model = FakeModel()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
            if not self.path.rstrip("/").endswith("/responses"):
                self.send_error(404)
                return
            response = model.answer(body)
            if body.get("stream"):
                started = dict(response, status="in_progress", output=[])
                events = [("response.created", started), ("response.completed", response)]
                frames = ({"type": kind, "sequence_number": n, "response": r} for n, (kind, r) in enumerate(events))
                data = b"".join(f"event: {frame['type']}\ndata: {json.dumps(frame)}\n\n".encode() for frame in frames)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            data = json.dumps(response).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd, base = serve(Handler)
    model.base_url = f"{base}/v1"
    yield model
    httpd.shutdown()


@pytest.fixture
def agents_model(fake_model):
    """An openai-agents model that talks to the fake model."""
    from agents import OpenAIResponsesModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=fake_model.base_url, api_key="test", max_retries=0)
    return OpenAIResponsesModel(model="fake-model", openai_client=client)


# -- a proxy that injects faults -------------------------------------------


@dataclass
class FaultProxy:
    """Forwards requests to memoryd. ``faults`` are consumed one per request
    whose path contains ``match``: ``"503"`` / ``"429"`` answer that status
    (with ``Retry-After: 1``) *after* forwarding the request, so memoryd did
    the work; ``"drop"`` forwards it and closes the connection unanswered;
    ``"503-before"`` answers without forwarding."""

    target: str
    match: str = "/segments"
    faults: list[str] = field(default_factory=list)
    seen: list[tuple[str, str, str | None, int]] = field(default_factory=list)
    base_url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def fault_proxy(server):
    proxy = FaultProxy(target=server.base_url)
    upstream = httpx.Client(timeout=30)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with proxy.lock:
                fault = proxy.faults.pop(0) if proxy.match in self.path and proxy.faults else None
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")
            }
            status = None
            if fault != "503-before":
                answer = upstream.request(self.command, proxy.target + self.path, content=body, headers=headers)
                status = answer.status_code
            with proxy.lock:
                proxy.seen.append((self.command, self.path, self.headers.get("idempotency-key"), status or 0))
            if fault == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault in ("503", "429", "503-before"):
                code = 429 if fault == "429" else 503
                problem = json.dumps(
                    {
                        "type": "about:blank",
                        "title": "injected",
                        "status": code,
                        "detail": "injected by the test proxy",
                        "code": "rate_limited" if code == 429 else "unavailable",
                    }
                ).encode()
                self.send_response(code)
                self.send_header("content-type", "application/problem+json")
                self.send_header("retry-after", "1")
                self.send_header("x-request-id", "proxy-injected")
                self.send_header("content-length", str(len(problem)))
                self.end_headers()
                self.wfile.write(problem)
                return
            self.send_response(answer.status_code)
            for k, v in answer.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(k, v)
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = do_PUT = do_DELETE = relay

    httpd, base = serve(Handler)
    proxy.base_url = base
    yield proxy
    httpd.shutdown()
    upstream.close()
