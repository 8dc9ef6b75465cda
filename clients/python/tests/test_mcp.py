"""memoryd over MCP with the official Python client (the `mcp` package that
openai-agents installs) and with openai-agents' ``MCPServerStreamableHttp``,
against the real binary: the tools, their annotations and failures, the
prompt, the key, the tenant's walls, a read-only layout, and an agent that
answers from what it searched."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from conftest import text_reply, tool_call
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from memoryd import Memoryd

set_tracing_disabled(True)


def remember(server, key: str, session: str, text: str) -> None:
    with Memoryd(server.base_url, key) as client:
        client.append_segment(session, {"rollout_id": session, "input": text, "final_output": "noted"})
        assert client.close_session(session, wait=30).state == "closed"


def mcp_url(server, query: str = "") -> str:
    return f"{server.base_url}/v1/mcp{query}"


def said(result) -> str:
    """What a model reads of a tool result: its one text block (memoryd sends
    no structuredContent, which Codex CLI and Claude Code would show instead)."""
    assert result.structured_content is None, result.structured_content
    assert len(result.content) == 1
    return result.content[0].text


def digest(read_text: str) -> str:
    """The sha256 a `memory_read` result ends with."""
    last = read_text.rstrip("\n").splitlines()[-1]
    assert last.startswith("sha256 "), read_text
    return last.split()[1]


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
        assert said(found).startswith("MEMORY.md:"), said(found)

        listed = await session.call_tool("memory_list", {"path": "rollout_summaries"})
        summary = said(listed).splitlines()[0].rsplit(" (", 1)[0]
        assert summary.startswith("rollout_summaries/mcp-tea"), said(listed)
        read = await session.call_tool("memory_read", {"path": summary})
        assert "     1\t" in said(read)
        sha = digest(said(await session.call_tool("memory_read", {"path": "MEMORY.md"})))

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
        assert said(edited) == "The edit is published: modified MEMORY.md."

        # Failures come back as tool results the model can read.
        stale = await session.call_tool(
            "memory_edit",
            {"patch": "*** Begin Patch\n*** Delete File: MEMORY.md\n*** End Patch", "expect": {"MEMORY.md": sha}},
        )
        assert stale.is_error and "changed" in said(stale) and said(stale).endswith("(memory_changed)")
        outside = await session.call_tool("memory_read", {"path": "../sessions/mcp-tea.jsonl"})
        assert outside.is_error and said(outside).endswith("(invalid_request)")
        missing = await session.call_tool("memory_read", {"path": "nothing.md"})
        assert missing.is_error and said(missing).endswith("(not_found)")
        folder = await session.call_tool("memory_read", {"path": "rollout_summaries"})
        assert "memory_list" in said(folder) and "memory/list" not in said(folder), said(folder)
        wrong = await session.call_tool("memory_read", {"path": "MEMORY.md", "offset": 0})
        assert said(wrong) == "memory_read: argument offset must be at least 1, not 0. (invalid_request)"
        # An unknown tool is the protocol's error, not a tool result.
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("memory_forget_everything", {})
        assert unknown.value.error.code == -32602 and "memory_search" in unknown.value.error.message

        prompts = await session.list_prompts()
        assert [p.name for p in prompts.prompts] == ["memory_instructions"]
        prompt = await session.get_prompt("memory_instructions")
        assert "MEMORY_SUMMARY BEGINS" in prompt.messages[0].content.text

    with Memoryd(server.base_url, key) as client:
        run = next(r for r in client.list_runs().runs if r.kind == "edit")
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
        assert not found.is_error and said(found) == "No line of the memory folder matches."
        elsewhere = await session.call_tool("memory_list", {"workspace": "nope"})
        assert elsewhere.is_error and said(elsewhere).endswith("(not_found)")
        assert (await session.list_resources()).resources == [], "another tenant's files are no resources here"


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
        assert refused.is_error and said(refused).endswith("(read_only)")


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


async def test_memory_files_are_resources(server, tenant):
    _, key = tenant
    remember(server, key, "mcp-res", "The deploy needs the VPN.")
    async with connect(server, key) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.capabilities.resources is not None
        listed = (await session.list_resources()).resources
        uris = [str(r.uri) for r in listed]
        assert "memory://default/default/MEMORY.md" in uris, uris
        assert uris == sorted(uris) and all(u.startswith("memory://default/default/") for u in uris)
        memory = next(r for r in listed if str(r.uri).endswith("/MEMORY.md"))
        assert memory.mime_type == "text/markdown" and memory.size and memory.size > 0
        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["memory://{workspace}/{layout}/{path}"]

        contents = (await session.read_resource("memory://default/default/MEMORY.md")).contents
        assert "VPN" in contents[0].text and len(contents[0].text.encode()) == memory.size
        with pytest.raises(MCPError) as outside:
            await session.read_resource("memory://default/default/../sessions/mcp-res.jsonl")
        assert outside.value.error.code == -32602
        with pytest.raises(MCPError) as missing:
            await session.read_resource("memory://default/default/nothing.md")
        assert missing.value.error.code == -32002
        with pytest.raises(MCPError) as foreign:
            await session.read_resource("file:///etc/passwd")
        assert foreign.value.error.code == -32602


async def test_results_keep_to_64_kib_and_say_how_to_read_on(server, tenant):
    _, key = tenant
    remember(server, key, "mcp-big", "Big files ahead.")
    long_line = "word " * 40_000  # 200 KB on one line
    many = "\n".join(f"- tea note {i}: " + "x" * 300 for i in range(1_000))
    operations = [
        {"command": "create", "path": "notes/long.md", "file_text": f"first\n{long_line}\nlast\n"},
        {"command": "create", "path": "notes/many.md", "file_text": many + "\n"},
    ]
    with Memoryd(server.base_url, key) as client:
        client.edit_memory(operations=operations)
    async with connect(server, key) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        pieces, byte_offset = "", 0
        for _ in range(10):
            args = {"path": "notes/long.md", "offset": 2}
            if byte_offset:
                args["byte_offset"] = byte_offset
            text = said(await session.call_tool("memory_read", args))
            assert len(text.encode()) <= 64 * 1024
            lines = text.splitlines()
            pieces += lines[0].split("\t", 1)[1]
            hint = next((line for line in lines if "goes on" in line), None)
            if hint is None:
                break
            byte_offset = int(hint.rsplit(" ", 1)[1])
        assert pieces == long_line, "reading on as told gives the whole line"

        found = said(await session.call_tool("memory_search", {"query": "tea note", "limit": 200, "context": 20}))
        assert len(found.encode()) <= 64 * 1024 and "pass cursor" in found.splitlines()[-1]
        cursor = found.splitlines()[-1].rsplit(" ", 1)[1]
        more = said(await session.call_tool("memory_search", {"query": "tea note", "cursor": cursor}))
        assert more.startswith("notes/many.md"), more[:200]

        whole = said(await session.call_tool("memory_read", {"path": "notes/many.md"}))
        assert len(whole.encode()) <= 64 * 1024 and "read on with offset" in whole


def test_a_post_without_both_accept_types_is_told_which(server, tenant):
    _, key = tenant
    answer = httpx.post(
        mcp_url(server),
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Authorization": f"Bearer {key}", "accept": "application/json"},
    )
    assert answer.status_code == 406
    assert "Accept" in answer.json()["detail"] and "text/event-stream" in answer.json()["detail"]


INSPECTOR = os.environ.get("MEMORYD_MCP_INSPECTOR")


def inspect(server, key: str, *args: str) -> dict:
    """One call of the MCP Inspector CLI (tests/mcp-inspector) against memoryd: its JSON output."""
    bin_dir = Path(INSPECTOR or "") / "node_modules" / ".bin"
    command = [str(bin_dir / "node"), str(bin_dir / "mcp-inspector"), "--cli", mcp_url(server)]
    command += ["--transport", "http", "--header", f"Authorization: Bearer {key}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


@pytest.mark.skipif(not INSPECTOR, reason="MEMORYD_MCP_INSPECTOR is not set (scripts/test.sh installs the Inspector)")
def test_the_mcp_inspector_reads_what_a_model_reads(server, tenant):
    _, key = tenant
    remember(server, key, "mcp-insp", "The staging database is on port 6543.")
    listed = inspect(server, key, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == ["memory_list", "memory_read", "memory_search", "memory_edit"]
    found = inspect(server, key, "--method", "tools/call", "--tool-name", "memory_search", "--tool-arg", "query=6543")
    assert "structuredContent" not in found and found["isError"] is False, found
    assert found["content"][0]["text"].startswith("MEMORY.md:"), found
    read = inspect(server, key, "--method", "tools/call", "--tool-name", "memory_read", "--tool-arg", "path=MEMORY.md")
    assert read["content"][0]["text"].startswith("     1\t") and "sha256 " in read["content"][0]["text"]
    resources = inspect(server, key, "--method", "resources/list")["resources"]
    assert "memory://default/default/MEMORY.md" in [r["uri"] for r in resources]
    memory = inspect(server, key, "--method", "resources/read", "--uri", "memory://default/default/MEMORY.md")
    assert "6543" in memory["contents"][0]["text"]
