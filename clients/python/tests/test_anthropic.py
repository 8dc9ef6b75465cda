"""memoryd as the backend of Anthropic's memory tool, with the real
``anthropic`` package, against the real binary: every command, and the
refusals a memory backend owes Claude."""

from __future__ import annotations

import pytest
from anthropic.lib.tools import ToolError

from memoryd import AsyncMemoryd, Memoryd
from memoryd.anthropic import AsyncMemorydMemoryTool, MemorydMemoryTool


def run(tool, **command):
    return tool.call(command)


def test_every_command_of_the_memory_tool(server, tenant):
    _, key = tenant
    with Memoryd(server.base_url, key) as client:
        tool = MemorydMemoryTool(client, workspace="claude", session_id="claude-1")
        assert tool.to_dict()["name"] == "memory"
        client.open_session("claude-open", workspace="claude")
        assert run(tool, command="create", path="/memories/notes/tea.md", file_text="green tea\nin the morning\n") == (
            "File created successfully at: /memories/notes/tea.md"
        )
        folder = run(tool, command="view", path="/memories")
        assert folder.startswith("Here're the files and directories up to 2 levels deep in /memories")
        assert "\t/memories/notes/" in folder and "\t/memories/notes/tea.md" in folder, folder
        assert run(tool, command="view", path="/memories/notes/tea.md") == (
            "Here's the content of /memories/notes/tea.md with line numbers:\n     1\tgreen tea\n     2\tin the morning"
        )
        ranged = run(tool, command="view", path="/memories/notes/tea.md", view_range=[2, -1])
        assert ranged.endswith("     2\tin the morning") and "green tea" not in ranged
        run(tool, command="str_replace", path="/memories/notes/tea.md", old_str="green", new_str="black")
        run(tool, command="insert", path="/memories/notes/tea.md", insert_line=0, insert_text="# Tea")
        assert client.read_memory("notes/tea.md", workspace="claude").text == "# Tea\nblack tea\nin the morning\n"
        assert run(tool, command="rename", old_path="/memories/notes/tea.md", new_path="/memories/drinks.md") == (
            "Successfully renamed /memories/notes/tea.md to /memories/drinks.md"
        )
        assert run(tool, command="delete", path="/memories/drinks.md") == "Successfully deleted /memories/drinks.md"
        kinds = [r.kind for r in client.list_runs("claude").runs]
        assert kinds == ["edit"] * 5, "each change is a run of memoryd's history"

        refusals = [
            ({"command": "view", "path": "/etc/passwd"}, "Path must start with /memories"),
            ({"command": "view", "path": "/memories/nope.md"}, "does not exist"),
            ({"command": "create", "path": "/memories/../x.md", "file_text": "x"}, "relative to the memory folder"),
            ({"command": "str_replace", "path": "/memories/nope.md", "old_str": "a", "new_str": "b"}, "does not exist"),
            ({"command": "delete", "path": "/memories"}, "Cannot delete the /memories directory itself"),
        ]
        for command, said in refusals:
            with pytest.raises(ToolError) as refused:
                tool.call(command)
            assert said in str(refused.value), (command, refused.value)
        run(tool, command="create", path="/memories/a.md", file_text="one one\n")
        for command, said in [
            (
                {"command": "create", "path": "/memories/a.md", "file_text": "again"},
                "File /memories/a.md already exists",
            ),
            ({"command": "str_replace", "path": "/memories/a.md", "old_str": "two", "new_str": "x"}, "did not appear"),
            ({"command": "str_replace", "path": "/memories/a.md", "old_str": "one", "new_str": "x"}, "Multiple"),
        ]:
            with pytest.raises(ToolError) as refused:
                tool.call(command)
            assert said in str(refused.value), (command, refused.value)
        with pytest.raises(ToolError) as refused:
            tool.clear_all_memory()
        assert "not available" in str(refused.value)


async def test_the_async_memory_tool(server, tenant):
    _, key = tenant
    async with AsyncMemoryd(server.base_url, key) as client:
        tool = AsyncMemorydMemoryTool(client)
        created = await tool.call({"command": "create", "path": "/memories/async.md", "file_text": "a\n"})
        assert created == "File created successfully at: /memories/async.md"
        shown = await tool.call({"command": "view", "path": "/memories/async.md"})
        assert shown.endswith("     1\ta")
        with pytest.raises(ToolError):
            await tool.call({"command": "view", "path": "/tmp"})
