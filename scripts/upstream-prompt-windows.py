#!/usr/bin/env python3
"""Writes tests/data/upstream_prompt_windows.txt: one 32-bit FNV-1a hash per
run of seven words of the SDK's memory prompts, so that a test can tell that
no such run of upstream text is in memoryd's prompts without the repository
holding upstream's text.

Usage: scripts/upstream-prompt-windows.py <checkout of openai/openai-agents-python>
The tokenisation must stay the one of tests/it/prompts.rs."""
import pathlib
import re
import sys

WINDOW = 7
FILES = [
    "rollout_extraction_prompt.md",
    "rollout_extraction_user_message.md",
    "memory_consolidation_prompt.md",
    "memory_read_prompt.md",
]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def fnv1a32(text: str) -> int:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def main() -> None:
    sdk = pathlib.Path(sys.argv[1])
    prompts = sdk / "src/agents/sandbox/memory"
    texts = [(prompts / "prompts" / name).read_text() for name in FILES]
    texts.append((prompts / "prompts.py").read_text())
    hashes = set()
    for text in texts:
        w = words(text)
        for i in range(len(w) - WINDOW + 1):
            hashes.add(fnv1a32(" ".join(w[i : i + WINDOW])))
    out = pathlib.Path(__file__).resolve().parent.parent / "tests/data/upstream_prompt_windows.txt"
    out.write_text("".join(f"{h:08x}\n" for h in sorted(hashes)))
    print(f"{len(hashes)} windows -> {out}")


if __name__ == "__main__":
    main()
