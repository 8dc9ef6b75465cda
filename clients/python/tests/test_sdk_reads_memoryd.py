"""A workspace memoryd wrote (offline, with its extractive provider), exported
and opened by the openai-agents SDK's own memory code: its read side puts
memoryd's summary in the agent's instructions, and its selection and storage
code read memoryd's raw memories, rollout summaries and selection file as if
its own phase two had written them."""

from __future__ import annotations

import asyncio
import json
import tarfile
from pathlib import Path

from agents.sandbox.capabilities.memory import Memory
from agents.sandbox.config import MemoryLayoutConfig
from agents.sandbox.manifest import Manifest
from agents.sandbox.memory.prompts import render_memory_consolidation_prompt
from agents.sandbox.memory.storage import SandboxMemoryStorage
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

from memoryd import Memoryd, RetryPolicy

SDK_SELECTION_KEYS = ["rollout_id", "updated_at", "rollout_path", "rollout_summary_file", "terminal_state"]


def run(rollout_id: str, updated_at: str, user: str, items: list[dict], state: str = "completed") -> dict:
    return {
        "rollout_id": rollout_id,
        "updated_at": updated_at,
        "input": [{"role": "user", "content": user}],
        "generated_items": items,
        "terminal_metadata": {
            "terminal_state": state,
            "exception_type": None,
            "exception_message": None,
            "has_final_output": state == "completed",
        },
        **({"final_output": items[-1]["content"][0]["text"]} if state == "completed" else {}),
    }


def say(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def shell(call_id: str, command: str, output: str) -> list[dict]:
    return [
        {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": json.dumps({"command": command})},
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]


CONVERSATIONS = {
    "ci": [
        run(
            "ci-lint",
            "2026-11-28T10:00:00+00:00",
            "Add a lint step to CI. We use pnpm here, never npm.",
            [*shell("c1", "pnpm lint", "0 problems"), say("Added `pnpm lint` to .github/workflows/ci.yml.")],
        ),
        run(
            "ci-lint",
            "2026-11-28T10:05:00+00:00",
            "Also cache the pnpm store.",
            [say("Cached ~/.local/share/pnpm/store with actions/cache.")],
        ),
    ],
    "flaky": [
        run(
            "flaky-test",
            "2026-11-29T14:00:00+00:00",
            "The integration test test_upload is flaky, fix it.",
            [
                *shell("c2", "pytest tests/test_upload.py", "FAILED tests/test_upload.py::test_upload - TimeoutError"),
                *shell("c3", "pytest tests/test_upload.py -p no:randomly", "1 passed"),
                say("The test depended on order; it now creates its own bucket. It passes."),
            ],
        ),
    ],
    "deploy": [
        run(
            "deploy-staging",
            "2026-11-30T09:00:00+00:00",
            "Deploy the release to staging. Always ask before touching production.",
            [*shell("c4", "make deploy ENV=staging", "waiting for approval")],
            state="interrupted",
        ),
    ],
}


def open_sdk_workspace(root: Path):
    """The SDK's memory read side and storage over `root`, as its sandbox
    agent would see them."""

    async def read() -> tuple[str | None, list, object, str, str]:
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
        async with session:
            memory = Memory(generate=None)
            memory.bind(session)
            instructions = await memory.instructions(session.state.manifest)
            storage = SandboxMemoryStorage(session=session, layout=MemoryLayoutConfig())
            prior = await storage.read_phase_two_selection()
            selection = await storage.build_phase_two_input_selection(max_raw_memories_for_consolidation=256)
            ours = (root / "memories" / "raw_memories.md").read_text()
            assert await storage.rebuild_raw_memories(selected_items=selection.selected)
            rebuilt = (root / "memories" / "raw_memories.md").read_text()
            return instructions, prior, selection, ours, rebuilt

    return asyncio.run(read())


def test_the_sdk_reads_a_workspace_memoryd_wrote(server, tenant, tmp_path):
    _, key = tenant
    with Memoryd(server.base_url, key, retry=RetryPolicy(max_retries=2, base_delay=0.01)) as client:
        for session, runs in CONVERSATIONS.items():
            for segment in runs:
                client.append_segment(session, segment)
            closed = client.close_session(session, wait=60)
            assert closed.state == "closed", closed
        archive = tmp_path / "export.tar.gz"
        client.export_workspace("default", archive)
    root = tmp_path / "sandbox"
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    memories = root / "memories"
    summary = (memories / "memory_summary.md").read_text()
    assert summary.startswith("## User Profile"), summary[:200]

    instructions, prior, selection, ours, rebuilt = open_sdk_workspace(root)

    # The read side: memoryd's summary, whole, between the SDK's markers.
    assert instructions is not None
    served = instructions.split("========= MEMORY_SUMMARY BEGINS =========\n")[1]
    assert served.split("\n========= MEMORY_SUMMARY ENDS =========")[0] == summary.strip()
    assert "pnpm" in served

    # The selection file: the SDK's keys exactly, read back without a loss.
    written = json.loads((memories / "phase_two_selection.json").read_text())
    assert list(written) == ["version", "updated_at", "selected"]
    assert all(list(item) == SDK_SELECTION_KEYS for item in written["selected"])
    assert [item.to_dict() for item in prior] == written["selected"]
    assert {item.rollout_id for item in prior} == {"ci-lint", "flaky-test", "deploy-staging"}

    # The SDK's own selection over memoryd's raw memories: the same rollouts,
    # newest first, nothing added or removed, so its phase two sees no drift.
    assert selection.selected == prior
    assert [item.rollout_id for item in selection.selected] == ["deploy-staging", "flaky-test", "ci-lint"]
    assert selection.retained_rollout_ids == {"ci-lint", "flaky-test", "deploy-staging"}
    assert selection.removed == []
    for item in selection.selected:
        assert (memories / item.rollout_summary_file).is_file(), item
        assert (root / item.rollout_path).is_file(), item
        assert item.terminal_state in ("completed", "interrupted")
    # The SDK rebuilds memoryd's phase-two input byte for byte.
    assert rebuilt == ours
    prompt = render_memory_consolidation_prompt(memory_root="memories", selection=selection)
    assert "- [retained] rollout_id=deploy-staging, rollout_summary_file=rollout_summaries/deploy-staging_" in prompt

    # What memoryd wrote is in the SDK's formats (the headings its prompts ask for).
    memory = (memories / "MEMORY.md").read_text()
    assert memory.startswith("# Task Group: ")
    for heading in ("scope: ", "## Task 1: ", "### rollout_summary_files", "### keywords"):
        assert heading in memory, heading
    assert "(rollout_id=flaky-test, updated_at=2026-11-29T14:00:00+00:00, terminal_state=completed" in memory
    for heading in ("## User preferences", "## General Tips", "## What's in Memory"):
        assert heading in summary, heading
    deploy = next(item for item in selection.selected if item.rollout_id == "deploy-staging")
    raw = (memories / "raw_memories" / "deploy-staging.md").read_text()
    assert "task_outcome: fail" not in raw, "an interrupted run is not a failure by itself"
    assert (memories / deploy.rollout_summary_file).read_text().startswith("session_id: ")
