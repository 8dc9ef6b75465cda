"""Retrieval evaluation of memoryd's search (docs/performance.md, "Search by meaning").

Starts memoryd (``--memoryd``, a built binary) on SQLite in a temporary folder
with an embeddings endpoint (``--embeddings``: a base URL such as
``http://127.0.0.1:8765/v1`` of ``minilm_server.py``), writes the corpus as one
memory edit, waits until every passage has its vector, and asks each query of
``queries.json`` in every mode. A hit at rank r: the r-th passage ranked (for
substring, the passage holding the r-th distinct matching line) is the
expected one. Prints recall@1 and recall@5 per mode, and each miss.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADMIN = "eval-admin-token"
MODES = ("substring", "ranked", "semantic", "hybrid")


def call(base: str, method: str, path: str, key: str, body: object | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("authorization", f"Bearer {key}")
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def corpus_operations() -> list[dict]:
    root = HERE / "corpus"
    files = sorted(p for p in root.rglob("*.md"))
    return [{"command": "create", "path": str(p.relative_to(root)), "file_text": p.read_text()} for p in files]


def ranked_passages(base: str, key: str, query: str, mode: str) -> list[tuple[str, str]]:
    """The first five passages a mode answers, as (path, heading)."""
    memory = "/v1/workspaces/default/layouts/default/memory"
    q = urllib.parse.quote(query)
    if mode != "substring":
        found = call(base, "GET", f"{memory}/search?query={q}&mode={mode}&limit=5", key)
        return [(m["path"], m["heading"]) for m in found["matches"]]
    found = call(base, "GET", f"{memory}/search?query={q}&limit=50", key)
    passages: list[tuple[str, str]] = []
    for hit in found["matches"]:
        text = (HERE / "corpus" / hit["path"]).read_text().splitlines()
        heading = next((line.lstrip("#").strip() for line in reversed(text[: hit["line"]]) if line.startswith("## ") or line.startswith("# ")), "")
        if (hit["path"], heading) not in passages:
            passages.append((hit["path"], heading))
    return passages[:5]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memoryd", required=True)
    parser.add_argument("--embeddings", required=True, help="an OpenAI-compatible base URL")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        env = dict(os.environ, MEMORYD_ADMIN_TOKEN=ADMIN, MEMORYD_LISTEN=f"127.0.0.1:{port}", MEMORYD_DATA_DIR=data,
                   MEMORYD_EMBEDDINGS_BASE_URL=args.embeddings, MEMORYD_EMBEDDINGS_MODEL=args.model,
                   MEMORYD_EMBEDDINGS_API_KEY="eval", MEMORYD_LOG="warn")
        server = subprocess.Popen([args.memoryd, "serve"], env=env)
        try:
            evaluate(f"http://127.0.0.1:{port}", json.loads((HERE / "queries.json").read_text()))
        finally:
            server.terminate()
            server.wait()


def evaluate(base: str, queries: list[dict]) -> None:
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    key = call(base, "POST", "/v1/admin/tenants", ADMIN, {"name": "eval"})["api_key"]
    call(base, "POST", "/v1/sessions/eval/layouts/default/segments", key, {"rollout_id": "eval", "input": "hi"})
    call(base, "POST", "/v1/workspaces/default/layouts/default/memory/edits?wait=60", key, {"operations": corpus_operations()})
    started = time.monotonic()
    while call(base, "GET", "/v1/workspaces/default/layouts/default/memory/search?query=x&mode=semantic", key)["not_embedded"]:
        time.sleep(0.2)
    print(f"indexed in {time.monotonic() - started:.1f} s")
    for mode in MODES:
        at1 = at5 = 0
        misses = []
        for q in queries:
            passages = ranked_passages(base, key, q["query"], mode)
            rank = next((i + 1 for i, (path, heading) in enumerate(passages) if path == q["path"] and q["heading"] in heading), None)
            at1 += rank == 1
            at5 += rank is not None
            if rank != 1:
                misses.append(f"    {q['query']!r}: rank {rank}; first {passages[0] if passages else None}")
        n = len(queries)
        print(f"{mode:9} recall@1 {at1}/{n} ({at1 / n:.2f})  recall@5 {at5}/{n} ({at5 / n:.2f})")
        print("\n".join(misses))


if __name__ == "__main__":
    main()
