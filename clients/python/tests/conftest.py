"""The real memoryd binary, on SQLite and on Postgres, and the fakes the
tests need: an OpenAI-compatible model for the agents and a proxy that
injects faults between the client and memoryd.

``MEMORYD_BIN`` names the binary (default: the workspace's debug build);
``MEMORYD_TEST_DATABASE_URL`` the Postgres server (each memoryd gets a
schema of its own on it); without it the Postgres cases are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]


def memoryd_binary() -> Path:
    named = os.environ.get("MEMORYD_BIN")
    if named:
        return Path(named)
    for profile in ("debug", "release"):
        candidate = REPO / "target" / profile / "memoryd"
        if candidate.exists():
            return candidate
    pytest.exit("no memoryd binary: build it (cargo build) or set MEMORYD_BIN", returncode=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_schema_url(admin_url: str) -> tuple[str, Callable[[], None]]:
    """A URL whose search_path is a new schema, and how to drop it."""
    schema = f"py_{uuid.uuid4().hex}"
    psql = shutil.which("psql") or "psql"
    subprocess.run([psql, admin_url, "-qc", f"CREATE SCHEMA {schema}"], check=True)
    sep = "&" if "?" in admin_url else "?"

    def drop() -> None:
        subprocess.run([psql, admin_url, "-qc", f"DROP SCHEMA {schema} CASCADE"], check=False, capture_output=True)

    return f"{admin_url}{sep}options=-c%20search_path%3D{schema}", drop


@dataclass
class Server:
    """A running memoryd with an admin token; ``tenant()`` makes a fresh tenant."""

    base_url: str
    admin_token: str
    data_dir: Path
    backend: str
    process: subprocess.Popen
    log_path: Path

    def tenant(self) -> tuple[str, str]:
        """``(tenant_id, api_key)`` of a new tenant."""
        r = httpx.post(
            f"{self.base_url}/v1/admin/tenants",
            json={"name": f"py-{uuid.uuid4().hex[:8]}"},
            headers={"authorization": f"Bearer {self.admin_token}"},
        )
        r.raise_for_status()
        return r.json()["tenant_id"], r.json()["api_key"]

    def rollout_file(self, tenant_id: str, rollout_path: str, workspace: str = "default") -> Path:
        return self.data_dir / "workspaces" / tenant_id / workspace / rollout_path


def start_memoryd(tmp: Path, backend: str, extra_env: Optional[dict[str, str]] = None) -> tuple[Server, Callable[[], None]]:
    cleanups: list[Callable[[], None]] = []
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_") and k != "DATABASE_URL"}
    admin = uuid.uuid4().hex
    port = free_port()
    env.update(
        {
            "MEMORYD_LISTEN": f"127.0.0.1:{port}",
            "MEMORYD_DATA_DIR": str(data_dir),
            "MEMORYD_ADMIN_TOKEN": admin,
            "MEMORYD_LLM_PROVIDER": "extractive",
            "MEMORYD_MIN_FREE_BYTES": "0",
            "MEMORYD_LOG": "warn",
        }
    )
    if backend == "postgres":
        admin_url = os.environ.get("MEMORYD_TEST_DATABASE_URL")
        if not admin_url:
            pytest.skip("MEMORYD_TEST_DATABASE_URL is not set: no Postgres for this case")
        url, drop = postgres_schema_url(admin_url)
        env["DATABASE_URL"] = url
        cleanups.append(drop)
    env.update(extra_env or {})
    log_path = tmp / f"memoryd-{backend}.log"
    log = open(log_path, "wb")
    process = subprocess.Popen([str(memoryd_binary()), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"memoryd did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.05)

    def stop() -> None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        for cleanup in cleanups:
            cleanup()

    return Server(base, admin, data_dir, backend, process, log_path), stop


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
                data = b"".join(
                    f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, 'response': r})}\n\n".encode()
                    for n, (kind, r) in enumerate(events)
                )
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
    seen: list[tuple[str, str, Optional[str], int]] = field(default_factory=list)
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
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
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
                    {"type": "about:blank", "title": "injected", "status": code, "detail": "injected by the test proxy",
                     "code": "rate_limited" if code == 429 else "unavailable"}
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
