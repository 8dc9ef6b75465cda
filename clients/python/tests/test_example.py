"""The example runs offline against a real memoryd and remembers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_with_memory.py"


def test_the_example_remembers_offline(server, tenant):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update({"MEMORYD_URL": server.base_url, "MEMORYD_API_KEY": tenant[1]})
    done = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    assert first == "session 1: Noted, I will remember that."
    assert second.startswith("session 2: From memory:") and "black, no sugar" in second, done.stdout
