"""The memory tools an openai-agents agent gets (memoryd.agents), with the
real SDK and a scripted model, against the real binary: search then read,
an edit that changes the server's file, refusals as text, usage, and
citations."""

from __future__ import annotations

import json

from agents import Agent, set_tracing_disabled
from conftest import text_reply, tool_call

from memoryd import AsyncMemoryd, Memoryd
from memoryd.agents import MemorydMemory, SyncMemorydMemory, memory_tools, strip_citations

set_tracing_disabled(True)

CITED = (
    "Green tea, in the morning.\n<oai-mem-citation>\n<citation_entries>\nMEMORY.md:3-4|note=[tea]\n"
    "</citation_entries>\n<rollout_ids>\ntea-chat\nother\n</rollout_ids>\n</oai-mem-citation>"
)


def remember(server, key: str, session: str, text: str) -> None:
    with Memoryd(server.base_url, key) as client:
        client.append_segment(session, {"rollout_id": session, "input": text, "final_output": "noted"})
        assert client.close_session(session, wait=30).state == "closed"


def outputs(request: dict) -> list[str]:
    return [str(i["output"]) for i in request["input"] if i.get("type") == "function_call_output"]


def test_strip_citations_takes_the_block_out_and_names_its_rollouts():
    assert strip_citations(CITED) == ("Green tea, in the morning.", ["tea-chat", "other"])
    assert strip_citations("no block") == ("no block", [])
    legacy = "ok <oai-mem-citation><thread_ids>a, b ../x</thread_ids></oai-mem-citation>"
    assert strip_citations(legacy) == ("ok", ["a", "b"])


def test_the_tools_have_strict_schemas_and_the_edit_is_optional():
    with Memoryd("http://127.0.0.1:9", "k") as client:
        tools = memory_tools(client)
        assert [t.name for t in tools] == ["memory_list", "memory_read", "memory_search", "memory_edit"]
        for tool in tools:
            assert tool.strict_json_schema and tool.params_json_schema["additionalProperties"] is False
            assert set(tool.params_json_schema["required"]) == set(tool.params_json_schema["properties"])
        assert "`memories/`" in tools[1].description
        assert [t.name for t in memory_tools(client, edit=False)] == ["memory_list", "memory_read", "memory_search"]


async def test_an_agent_searches_then_reads_its_memory(server, tenant, fake_model, agents_model):
    _, key = tenant
    remember(server, key, "tea-chat", "I prefer green tea in the morning.")
    async with AsyncMemoryd(server.base_url, key) as client:
        summary = next(e.path for e in (await client.list_memory("rollout_summaries")).entries if "tea-chat" in e.path)
        fake_model.script = [
            [tool_call("memory_search", {"query": "green tea", "path": None, "regex": None, "context": None})],
            [tool_call("memory_read", {"path": summary, "offset": None, "limit": None})],
            [text_reply(CITED)],
        ]
        memory = MemorydMemory(client, session_id="agent-tools-1")
        agent = Agent(name="assistant", instructions="Use your memory.", model=agents_model)
        result = await memory.run(agent, "What do I drink in the morning?", strip_citations=True)
        assert agent.tools == [], "the caller's agent is left as it was"
        assert result.final_output == "Green tea, in the morning."
        offered = {t["name"] for t in fake_model.requests[0]["tools"]}
        assert {"memory_list", "memory_read", "memory_search", "memory_edit"} <= offered
        searched = outputs(fake_model.requests[1])[0]
        assert searched.startswith("MEMORY.md:"), searched
        read = outputs(fake_model.requests[2])[-1]
        assert "     1\t" in read and "green tea" in read.lower(), read
        # The recorded segment keeps the block: memoryd counts it.
        segment = (server.rollout_file(tenant[0], "sessions/agent-tools-1.jsonl")).read_text()
        assert "oai-mem-citation" in segment
        await memory.close(wait=30)
        used = {s.rollout_id: s.usage_count for s in (await client.get_selection()).selected}
    assert used["tea-chat"] == 1, f"the read and the citation by one session count once: {used}"


async def test_an_edit_changes_the_servers_file_and_refusals_are_text(server, tenant, fake_model, agents_model):
    _, key = tenant
    remember(server, key, "ci-chat", "Pin the CI runner image.")
    async with AsyncMemoryd(server.base_url, key) as client:
        sha = (await client.read_memory("MEMORY.md")).sha256
        operation = {
            "command": "insert",
            "path": "MEMORY.md",
            "insert_line": 0,
            "insert_text": "- The runner image is ubuntu-24.04.",
            "file_text": None,
            "old_str": None,
            "new_str": None,
            "old_path": None,
            "new_path": None,
        }
        edit = {"patch": None, "operations": [operation], "expect": [{"path": "MEMORY.md", "sha256": sha}]}
        fake_model.script = [
            [tool_call("memory_read", {"path": "../sessions/ci-chat.jsonl", "offset": None, "limit": None})],
            [tool_call("memory_edit", {**edit, "reason": "the image moved"})],
            [text_reply("Noted the image.")],
        ]
        agent = Agent(
            name="assistant",
            instructions="Keep memory current.",
            model=agents_model,
            tools=memory_tools(client, session_id="agent-tools-2"),
        )
        from agents import Runner

        result = await Runner.run(agent, "The runner image is ubuntu-24.04 now.")
        assert result.final_output == "Noted the image."
        refused = outputs(fake_model.requests[1])[0]
        assert refused.startswith("Error (invalid_request):"), refused
        published = outputs(fake_model.requests[2])[-1]
        assert published == "The edit is published: modified MEMORY.md.", published
        memory = (await client.read_memory("MEMORY.md", limit=1)).text
        assert memory == "- The runner image is ubuntu-24.04.\n"
        runs = (await client.list_runs()).runs
        assert (runs[0].kind, runs[0].session_id, runs[0].reason) == ("edit", "agent-tools-2", "the image moved")


def test_the_sync_memory_offers_the_tools_too(server, tenant, fake_model, agents_model):
    _, key = tenant
    remember(server, key, "sync-chat", "I use vim.")
    fake_model.script = [
        [tool_call("memory_search", {"query": "vim", "path": None, "regex": None, "context": 1})],
        [text_reply("You use vim.")],
    ]
    with Memoryd(server.base_url, key) as client:
        memory = SyncMemorydMemory(client, session_id="sync-tools")
        agent = Agent(name="assistant", instructions="Use your memory.", model=agents_model)
        assert memory.run(agent, "Which editor do I use?").final_output == "You use vim."
        assert "vim" in outputs(fake_model.requests[1])[0]
        without = SyncMemorydMemory(client, session_id="sync-no-tools", tools=False)
        fake_model.script = [[text_reply("ok")]]
        without.run(agent, "hello")
        assert not [t for t in fake_model.requests[-1].get("tools", []) if t["name"].startswith("memory_")]
    assert json.dumps(fake_model.requests[0]["tools"]).count("memory_edit") == 1
