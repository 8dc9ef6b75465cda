"""The console's browser tests run the real memoryd (the harness of the
Python client's tests) and drive Debian's Chromium through Playwright."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "tests"))
