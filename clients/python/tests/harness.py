"""Starting the real memoryd binary for tests: on SQLite, or on Postgres in a
schema of its own. Shared by the client's tests and the console's browser
tests (tests/browser).

``MEMORYD_BIN`` names the binary (default: the workspace's debug build);
``MEMORYD_TEST_DATABASE_URL`` the Postgres server; without it the Postgres
cases are skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


def start_memoryd(
    tmp: Path, backend: str, extra_env: dict[str, str] | None = None
) -> tuple[Server, Callable[[], None]]:
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
            # The tests' webhook receivers listen on plain http on loopback.
            "MEMORYD_WEBHOOK_ALLOW_HTTP": "true",
            "MEMORYD_WEBHOOK_ALLOW_PRIVATE": "true",
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
