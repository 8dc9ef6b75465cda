"""memoryd.agents with the real openai-agents SDK and a fake model: what is
recorded is byte for byte what the SDK's own memory writes, and the next
agent's instructions carry what memoryd made of it."""

from __future__ import annotations

import json
import logging
import re
import socket
import time

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.exceptions import MaxTurnsExceeded
from agents.sandbox.memory.rollouts import (
    build_rollout_payload,
    build_rollout_payload_from_result,
    dump_rollout_json,
    terminal_metadata_for_exception,
)
from conftest import text_reply, tool_call

from memoryd import AsyncMemoryd, Memoryd, RetryPolicy
from memoryd.agents import MemorydMemory, SyncMemorydMemory, segment_from_result

set_tracing_disabled(True)

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$")


def sdk_line(payload: dict, rollout_id: str, updated_at: str) -> bytes:
    """The line the SDK's memory manager appends for ``payload``: updated_at,
    then the rollout id, then the rest in order, as compact ASCII JSON."""
    payload = dict(payload)
    payload.pop("updated_at")
    payload.pop("rollout_id", None)
    ordered = {"updated_at": updated_at, "rollout_id": rollout_id, **payload}
    return dump_rollout_json(ordered).encode()


def stored_lines(server, tenant_id: str, rollout_path: str) -> list[bytes]:
    return server.rollout_file(tenant_id, rollout_path).read_bytes().splitlines(keepends=True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sonnig in {city}, 21.5 °C ☀"


async def test_a_recorded_run_is_the_sdks_own_line(server, tenant, fake_model, agents_model):
    tenant_id, key = tenant
    fake_model.script = [
        [tool_call("get_weather", {"city": "Zürich"})],
        [text_reply("In Zürich ist es sonnig 😀, 21.5 °C.")],
    ]
    agent = Agent(name="weather", instructions="Be brief.", model=agents_model, tools=[get_weather])
    async with AsyncMemoryd(server.base_url, key) as client:
        memory = MemorydMemory(client, session_id="py-sdk-line")
        result = await memory.run(agent, "Wie ist das Wetter in Zürich? ☕")
        session = await client.get_session("py-sdk-line")
    assert [(r.rollout_id, r.segment_count) for r in session.rollouts] == [("py-sdk-line", 1)]
    (line,) = stored_lines(server, tenant_id, "sessions/py-sdk-line.jsonl")
    updated_at = json.loads(line)["updated_at"]
    assert ISO_UTC.match(updated_at), updated_at
    expected = sdk_line(build_rollout_payload_from_result(result), "py-sdk-line", updated_at)
    assert line == expected
    kinds = [item.get("type") or item.get("role") for item in json.loads(line)["generated_items"]]
    assert kinds == ["function_call", "function_call_output", "message"]
    assert b"\\u00fc" in line and b"\\ud83d\\ude00" in line, "non-ASCII must be escaped as the SDK does"


async def test_a_streamed_run_is_recorded_too(server, tenant, fake_model, agents_model):
    tenant_id, key = tenant
    fake_model.script = [[text_reply("streamed answer")]]
    agent = Agent(name="streamer", instructions="Be brief.", model=agents_model)
    result = Runner.run_streamed(agent, "stream please")
    async for _ in result.stream_events():
        pass
    async with AsyncMemoryd(server.base_url, key) as client:
        memory = MemorydMemory(client, session_id="py-streamed")
        appended = await memory.record(result)
    (line,) = stored_lines(server, tenant_id, appended.rollout_path)
    updated_at = json.loads(line)["updated_at"]
    assert line == sdk_line(build_rollout_payload_from_result(result), "py-streamed", updated_at)
    assert json.loads(line)["final_output"] == "streamed answer"


async def test_a_failed_run_is_recorded_with_the_sdks_terminal_metadata(server, tenant, fake_model, agents_model):
    tenant_id, key = tenant
    fake_model.default = lambda body: [tool_call("get_weather", {"city": "Bern"})]
    agent = Agent(name="looper", instructions="Use tools.", model=agents_model, tools=[get_weather])
    async with AsyncMemoryd(server.base_url, key) as client:
        memory = MemorydMemory(client, session_id="py-failed")
        with pytest.raises(MaxTurnsExceeded) as raised:
            await memory.run(agent, "loop forever", max_turns=1)
    exc = raised.value
    (line,) = stored_lines(server, tenant_id, "sessions/py-failed.jsonl")
    stored = json.loads(line)
    assert stored["terminal_metadata"] == terminal_metadata_for_exception(exc).model_dump(mode="json")
    assert stored["terminal_metadata"]["terminal_state"] == "max_turns_exceeded"
    assert stored["terminal_metadata"]["exception_type"] == "MaxTurnsExceeded"
    assert "final_output" not in stored
    # What the SDK's runner enqueues for a run that raised: the items made so far.
    expected = build_rollout_payload(
        input="loop forever",
        new_items=exc.run_data.new_items,
        final_output=None,
        interruptions=[],
        terminal_metadata=terminal_metadata_for_exception(exc),
    )
    assert line == sdk_line(expected, "py-failed", stored["updated_at"])
    assert segment_from_result(exc.run_data, exception=exc)["terminal_metadata"] == stored["terminal_metadata"]


async def test_the_next_agent_is_given_the_memory(server, tenant, fake_model, agents_model):
    _, key = tenant
    async with AsyncMemoryd(server.base_url, key) as client:
        async with MemorydMemory(client, close_wait=30) as first:
            barista = Agent(name="barista", instructions=first.instructions("You are a barista."), model=agents_model)
            fake_model.script = [[text_reply("Noted: green tea with oat milk.")]]
            await first.run(barista, "Remember: I always drink green tea with oat milk.")
            assert "MEMORY_SUMMARY" not in fake_model.requests[-1]["instructions"], "no memory before the first close"
        closed = await client.get_session(first.session_id)
        assert closed.state == "closed" and closed.memory_status["status"] == "complete"

        second = MemorydMemory(client)
        barista = Agent(name="barista", instructions=second.instructions("You are a barista."), model=agents_model)
        fake_model.script = [[text_reply("Green tea with oat milk, as always.")]]
        await second.run(barista, "The usual, please.")
    instructions = fake_model.requests[-1]["instructions"]
    assert instructions.startswith("You are a barista.\n\n")
    summary = instructions.split("========= MEMORY_SUMMARY BEGINS =========")[1]
    summary = summary.split("========= MEMORY_SUMMARY ENDS =========")[0]
    assert "green tea with oat milk" in summary


async def test_instructions_fall_back_to_the_base(server, tenant, caplog):
    _, key = tenant
    async with AsyncMemoryd(server.base_url, key) as client:
        fresh = MemorydMemory(client)
        assert await fresh.instructions("Base only.")(None, None) == "Base only."  # 204: no memory yet
    async with AsyncMemoryd("http://127.0.0.1:9", key, retry=RetryPolicy(max_retries=0)) as down:
        unreachable = MemorydMemory(down)
        with caplog.at_level(logging.WARNING, logger="memoryd.agents"):
            assert await unreachable.instructions("Base only.")(None, None) == "Base only."
    assert "without memory" in caplog.text


async def test_a_recording_failure_never_breaks_the_run(tenant, fake_model, agents_model, caplog):
    fake_model.script = [[text_reply("fine")]]
    agent = Agent(name="a", instructions="x", model=agents_model)
    async with AsyncMemoryd("http://127.0.0.1:9", tenant[1], retry=RetryPolicy(max_retries=0)) as down:
        memory = MemorydMemory(down)
        with caplog.at_level(logging.ERROR, logger="memoryd.agents"):
            result = await memory.run(agent, "hello")
    assert result.final_output == "fine"
    assert "could not record" in caplog.text


async def test_leaving_the_context_closes_the_session(server, tenant, fake_model, agents_model):
    _, key = tenant
    agent = Agent(name="a", instructions="x", model=agents_model)
    async with AsyncMemoryd(server.base_url, key) as client:
        async with MemorydMemory(client, session_id="py-ctx", rollout_id="conv-7") as memory:
            await memory.run(agent, "one")
            await memory.run(agent, "two")
        session = await client.get_session("py-ctx")
        assert session.state in ("closing", "closed")
        assert [(r.rollout_id, r.segment_count) for r in session.rollouts] == [("conv-7", 2)]
        async with MemorydMemory(client) as unused:
            pass
        assert await unused.close() is None, "a session never written to has nothing to close"


def test_a_sync_memory_records_the_sdks_line_and_gives_the_next_agent_the_memory(
    server, tenant, fake_model, agents_model
):
    tenant_id, key = tenant
    with Memoryd(server.base_url, key) as client:
        with SyncMemorydMemory(client, session_id="py-sync", close_wait=30) as first:
            barista = Agent(name="barista", instructions=first.instructions("You are a barista."), model=agents_model)
            fake_model.script = [[text_reply("Noted: black coffee, no sugar.")]]
            result = first.run(barista, "Remember: I drink my coffee black, no sugar.")
        assert client.get_session("py-sync").memory_status["status"] == "complete"
        (line,) = stored_lines(server, tenant_id, "sessions/py-sync.jsonl")
        updated_at = json.loads(line)["updated_at"]
        assert line == sdk_line(build_rollout_payload_from_result(result), "py-sync", updated_at)

        second = SyncMemorydMemory(client)
        barista = Agent(name="barista", instructions=second.instructions("You are a barista."), model=agents_model)
        fake_model.script = [[text_reply("Black, no sugar, coming up.")]]
        second.run(barista, "The usual, please.")
    instructions = fake_model.requests[-1]["instructions"]
    assert instructions.startswith("You are a barista.\n\n")
    assert "black, no sugar" in instructions.split("========= MEMORY_SUMMARY BEGINS =========")[1]


def test_a_sync_memory_records_a_failed_run_and_never_breaks_one(server, tenant, fake_model, agents_model, caplog):
    tenant_id, key = tenant
    fake_model.default = lambda body: [tool_call("get_weather", {"city": "Chur"})]
    looper = Agent(name="looper", instructions="Use tools.", model=agents_model, tools=[get_weather])
    with Memoryd(server.base_url, key) as client:
        memory = SyncMemorydMemory(client, session_id="py-sync-failed")
        with pytest.raises(MaxTurnsExceeded):
            memory.run(looper, "loop forever", max_turns=1)
    (line,) = stored_lines(server, tenant_id, "sessions/py-sync-failed.jsonl")
    assert json.loads(line)["terminal_metadata"]["terminal_state"] == "max_turns_exceeded"

    fake_model.script = [[text_reply("fine")]]
    with Memoryd("http://127.0.0.1:9", key, retry=RetryPolicy(max_retries=0)) as down:
        unreachable = SyncMemorydMemory(down)
        with caplog.at_level(logging.WARNING, logger="memoryd.agents"):
            plain = Agent(name="a", instructions=unreachable.instructions("Base only."), model=agents_model)
            assert unreachable.run(plain, "hello").final_output == "fine"
    assert fake_model.requests[-1]["instructions"] == "Base only."
    assert "without memory" in caplog.text and "could not record" in caplog.text
    with Memoryd(server.base_url, key) as client:
        with SyncMemorydMemory(client) as unused:
            pass
        assert unused.close() is None, "a session never written to has nothing to close"


async def test_the_instructions_wait_no_longer_than_their_timeout(tenant):
    """A memoryd that takes the connection and never answers costs a run
    ``instructions_timeout``, not the client's 30 s timeout and its retries."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    base_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        with Memoryd(base_url, tenant[1]) as client:
            started = time.monotonic()
            assert SyncMemorydMemory(client, instructions_timeout=0.5).instructions("Base.")(None, None) == "Base."
            sync_took = time.monotonic() - started
        async with AsyncMemoryd(base_url, tenant[1]) as client:
            started = time.monotonic()
            assert await MemorydMemory(client, instructions_timeout=0.5).instructions("Base.")(None, None) == "Base."
            async_took = time.monotonic() - started
    finally:
        silent.close()
    assert sync_took < 5 and async_took < 5, (sync_took, async_took)


def test_a_workspace_the_sdks_memory_wrote_is_imported_and_selected(server, tenant, tmp_path):
    """The SDK's own writers make a sandbox workspace (a rollout line, a raw
    memory and a rollout summary, as its memory manager writes them); once
    imported, the next phase two selects its memory like memoryd's own."""
    import tarfile

    from agents.sandbox.memory.manager import _format_raw_memory, _format_rollout_summary
    from agents.sandbox.memory.rollouts import RolloutTerminalMetadata, _normalize_jsonl_line

    sandbox = tmp_path / "sandbox"
    (sandbox / "sessions").mkdir(parents=True)
    (sandbox / "memories" / "raw_memories").mkdir(parents=True)
    (sandbox / "memories" / "rollout_summaries").mkdir(parents=True)
    payload = build_rollout_payload(
        input="Deploy with pnpm, never npm.",
        new_items=[],
        final_output="Noted: pnpm.",
        interruptions=[],
        terminal_metadata=RolloutTerminalMetadata(terminal_state="completed", has_final_output=True),
    )
    line = _normalize_jsonl_line(rollout_contents=json.dumps(payload))
    (sandbox / "sessions" / "sdk-run.jsonl").write_bytes(line)
    summary_file = "rollout_summaries/sdk-run_deploy-with-pnpm.md"
    (sandbox / "memories" / "raw_memories" / "sdk-run.md").write_text(
        _format_raw_memory(
            updated_at=payload["updated_at"],
            rollout_id="sdk-run",
            rollout_path="sessions/sdk-run.jsonl",
            rollout_summary_file=summary_file,
            terminal_state="completed",
            raw_memory="The user deploys with pnpm, never npm.\n\n",
        )
    )
    (sandbox / "memories" / summary_file).write_text(
        _format_rollout_summary(
            updated_at=payload["updated_at"],
            rollout_path="sessions/sdk-run.jsonl",
            session_id="7c9e6679-7425-40de-944b-e07fc1f90ae7",
            terminal_state="completed",
            rollout_summary="Deploys with pnpm.",
        )
    )
    archive = tmp_path / "sdk.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for folder in ("sessions", "memories"):
            tar.add(sandbox / folder, arcname=folder)

    tenant_id, key = tenant
    with Memoryd(server.base_url, key, retry=RetryPolicy(max_retries=2, base_delay=0.01)) as client:
        job = client.import_workspace("sdk-team", archive)
        deadline = time.monotonic() + 30
        while (job := client.get_job(job.job_id)).state in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert job.state == "succeeded", job
        assert server.rollout_file(tenant_id, "sessions/sdk-run.jsonl", "sdk-team").read_bytes() == line
        client.append_segment(
            "after-import",
            {"rollout_id": "own-run", "input": "hello", "final_output": "hi"},
            workspace="sdk-team",
        )
        closed = client.close_session("after-import", wait=30)
        assert closed.state == "closed"
        selected = [item.rollout_id for item in client.get_selection("sdk-team").selected]
        assert "sdk-run" in selected and "own-run" in selected, selected
