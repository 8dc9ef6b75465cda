"""memoryd over MCP with the official Python client (the `mcp` package that
openai-agents installs) and with openai-agents' ``MCPServerStreamableHttp``,
against the real binary: the tools, their annotations and failures, the
prompt, the key, the tenant's walls, a read-only layout, and an agent that
answers from what it searched."""

from __future__ import annotations

import httpx
import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from conftest import text_reply, tool_call
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from memoryd import Memoryd

set_tracing_disabled(True)


def remember(server, key: str, session: str, text: str) -> None:
    with Memoryd(server.base_url, key) as client:
        client.append_segment(session, {"rollout_id": session, "input": text, "final_output": "noted"})
        assert client.close_session(session, wait=30).state == "closed"


def mcp_url(server, query: str = "") -> str:
    return f"{server.base_url}/v1/mcp{query}"


def connect(server, key: str, query: str = ""):
    """The official client's transport to memoryd's endpoint, with the key."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return streamable_http_client(mcp_url(server, query), http_client=http)


async def test_the_tools_over_mcp(server, tenant):
    _, key = tenant
    remember(server, key, "mcp-tea", "I prefer green tea in the morning.")
    async with (
        connect(server, key, "?session_id=mcp-agent-1") as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        assert init.server_info.name == "memoryd"
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"memory_list", "memory_read", "memory_search", "memory_edit"}
        for name in ("memory_list", "memory_read", "memory_search"):
            assert tools[name].annotations.read_only_hint is True, name
        assert tools["memory_edit"].annotations.read_only_hint is False
        assert tools["memory_search"].input_schema["required"] == ["query"]

        found = await session.call_tool("memory_search", {"query": "green tea"})
        assert not found.is_error
        assert found.content[0].text.startswith("MEMORY.md:"), found.content[0].text
        assert found.structured_content["matches"][0]["path"] == "MEMORY.md"

        listed = await session.call_tool("memory_list", {"path": "rollout_summaries"})
        summary = listed.structured_content["entries"][0]["path"]
        read = await session.call_tool("memory_read", {"path": summary})
        assert "     1\t" in read.content[0].text
        sha = (await session.call_tool("memory_read", {"path": "MEMORY.md"})).structured_content["sha256"]

        edited = await session.call_tool(
            "memory_edit",
            {
                "operations": [
                    {"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- oat milk"}
                ],
                "expect": {"MEMORY.md": sha},
                "reason": "the user said so",
            },
        )
        assert not edited.is_error, edited.content
        assert edited.structured_content["changes"] == [{"path": "MEMORY.md", "change": "modified"}]

        # Failures come back as tool results the model can read.
        stale = await session.call_tool(
            "memory_edit",
            {"patch": "*** Begin Patch\n*** Delete File: MEMORY.md\n*** End Patch", "expect": {"MEMORY.md": sha}},
        )
        assert stale.is_error and "changed" in stale.content[0].text
        assert stale.structured_content["code"] == "memory_changed"
        outside = await session.call_tool("memory_read", {"path": "../sessions/mcp-tea.jsonl"})
        assert outside.is_error and outside.structured_content["code"] == "invalid_request"
        missing = await session.call_tool("memory_read", {"path": "nothing.md"})
        assert missing.is_error and missing.structured_content["code"] == "not_found"
        unknown = await session.call_tool("memory_forget_everything", {})
        assert unknown.is_error

        prompts = await session.list_prompts()
        assert [p.name for p in prompts.prompts] == ["memory_instructions"]
        prompt = await session.get_prompt("memory_instructions")
        assert "MEMORY_SUMMARY BEGINS" in prompt.messages[0].content.text

    with Memoryd(server.base_url, key) as client:
        run = client.get_run(edited.structured_content["run_id"])
        assert (run.kind, run.session_id, run.reason) == ("edit", "mcp-agent-1", "the user said so")
    # The next consolidation's selection counts the summary read by the endpoint's session.
    remember(server, key, "mcp-later", "Another day.")
    with Memoryd(server.base_url, key) as client:
        used = {s.rollout_id: s.usage_count for s in client.get_selection().selected}
    assert used["mcp-tea"] == 1, used


async def test_the_key_and_the_tenant_bound_mcp(server, tenant):
    _, key = tenant
    remember(server, key, "mcp-secret", "My locker code is 4711.")
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            mcp_url(server),
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            headers={"accept": "application/json, text/event-stream"},
        )
    assert answer.status_code == 401 and answer.json()["code"] == "unauthorized"

    _, other = server.tenant()
    async with connect(server, other) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        found = await session.call_tool("memory_search", {"query": "4711"})
        assert not found.is_error and found.structured_content["matches"] == []
        elsewhere = await session.call_tool("memory_list", {"workspace": "nope"})
        assert elsewhere.is_error and elsewhere.structured_content["code"] == "not_found"


async def test_a_read_only_layout_offers_no_edit(server, tenant):
    _, key = tenant
    with Memoryd(server.base_url, key) as client:
        client.put_layout(
            "mcp-ro", {"memories_dir": "ro-memories", "sessions_dir": "ro-sessions", "read": {"live_update": False}}
        )
    async with connect(server, key, "?layout=mcp-ro") as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {"memory_list", "memory_read", "memory_search"}
        refused = await session.call_tool(
            "memory_edit", {"operations": [{"command": "create", "path": "a.md", "file_text": "x"}]}
        )
        assert refused.is_error and refused.structured_content["code"] == "read_only"


async def test_an_agent_answers_from_its_memory_over_mcp(server, tenant, fake_model, agents_model):
    _, key = tenant
    remember(server, key, "mcp-ci", "Pin the CI runner image to ubuntu-24.04.")
    fake_model.script = [
        [tool_call("memory_search", {"query": "runner image"})],
        [text_reply("From memory: pin it to ubuntu-24.04.")],
    ]
    with Memoryd(server.base_url, key) as client:
        params = client.mcp_params(session_id="mcp-ci-run")
    assert params["url"].endswith("/v1/mcp?session_id=mcp-ci-run")
    async with MCPServerStreamableHttp(params=params, name="memoryd", cache_tools_list=True) as memoryd_mcp:
        agent = Agent(name="ci", instructions="Use your memory.", model=agents_model, mcp_servers=[memoryd_mcp])
        result = await Runner.run(agent, "Which runner image do we use?")
    assert result.final_output == "From memory: pin it to ubuntu-24.04."
    tool_names = {t["name"] for t in fake_model.requests[0]["tools"]}
    assert {"memory_search", "memory_read"} <= tool_names
    outputs = [i for i in fake_model.requests[1]["input"] if i.get("type") == "function_call_output"]
    assert "ubuntu-24.04" in str(outputs[0]["output"]), outputs


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_only_posts_carry_mcp_here(server, tenant, method):
    _, key = tenant
    answer = httpx.request(
        method, mcp_url(server), headers={"Authorization": f"Bearer {key}", "accept": "text/event-stream"}
    )
    assert answer.status_code == 405, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
