"""Runs a document's ```sh blocks against a fresh memoryd, and parses its
```json and ```toml blocks (the clients' configuration files, copied as they
stand); see doc-check.sh."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request

SKIP = re.compile(r"<!--\s*doc-check:\s*skip")
DOCUMENTED_BASE = "http://127.0.0.1:8080"

# Every curl fails on an HTTP error (its body shown), is retried when the
# tenant's rate limit (set by one example) answers 429, and a stream (-N)
# is read for three seconds.
PRELUDE = r"""
curl() {
    local streaming=0 arg
    for arg in "$@"; do
        if [[ "$arg" == -[a-zA-Z]*N* ]]; then streaming=1; fi
    done
    if [ "$streaming" = 1 ]; then
        command curl --fail-with-body --show-error --max-time 3 "$@" || [ $? = 28 ]
        return
    fi
    command curl --fail-with-body --show-error --retry 5 --retry-delay 1 "$@"
}
"""


def blocks(path, language="sh"):
    """(line number, text) of each ```<language> block not marked to skip."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, at = [], 0
    while at < len(lines):
        if lines[at].strip() == f"```{language}":
            end = lines.index("```", at + 1)
            marked = at > 0 and SKIP.search(lines[at - 1])
            if not marked:
                found.append((at + 1, "\n".join(lines[at + 1 : end])))
            at = end
        at += 1
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, workdir):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY")}
    env.update(
        MEMORYD_ADMIN_TOKEN="change-me",
        MEMORYD_LISTEN=f"127.0.0.1:{port}",
        # The webhook example names an endpoint that does not resolve here:
        # created without the address check, its deliveries simply fail.
        MEMORYD_WEBHOOK_ALLOW_PRIVATE="true",
        MEMORYD_LOG="warn",
    )
    log = open(os.path.join(workdir, "memoryd.log"), "w")
    server = subprocess.Popen([binary, "serve"], cwd=workdir, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(f"{base}/readyz", timeout=1)
            return server, base
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit(f"memoryd did not start; see {log.name}")
            time.sleep(0.1)


def configurations_parse(doc):
    """Every ```json and ```toml block of `doc` is what its parser takes."""
    parsers = {"json": json.loads, "toml": tomllib.loads}
    wrong = []
    for language, parse in parsers.items():
        for line, text in blocks(doc, language):
            try:
                parse(text)
            except ValueError as e:
                wrong.append(f"{doc}:{line}: not {language}: {e}")
    for problem in wrong:
        print(f"doc-check: {problem}", file=sys.stderr)
    return not wrong


def check(binary, doc):
    if not configurations_parse(doc):
        return False
    workdir = tempfile.mkdtemp(prefix="memoryd-doc-check-")
    server, base = start(os.path.abspath(binary), workdir)
    script = [PRELUDE]
    for line, text in blocks(doc):
        script.append(f'DOC_BLOCK="{doc}:{line}"')
        script.append(text.replace(DOCUMENTED_BASE, base))
    script_path = os.path.join(workdir, "doc.sh")
    with open(script_path, "w", encoding="utf-8") as f:
        f.write("\n".join(script) + "\n")
    trap = 'trap \'echo "doc-check: a command of the block at ${DOC_BLOCK} failed (line $LINENO of doc.sh)" >&2\' ERR'
    try:
        run = subprocess.run(
            ["bash", "-c", f"set -eEuo pipefail; {trap}; source doc.sh"],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    if run.returncode != 0:
        print(run.stdout[-4000:])
        print(run.stderr[-4000:], file=sys.stderr)
        print(f"doc-check: {doc} FAILED (its script and memoryd's log are in {workdir})", file=sys.stderr)
        return False
    print(f"doc-check: {doc}: {len(blocks(doc))} blocks ran")
    shutil.rmtree(workdir, ignore_errors=True)
    return True


def main():
    binary, docs = sys.argv[1], sys.argv[2:]
    results = [check(binary, doc) for doc in docs]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
