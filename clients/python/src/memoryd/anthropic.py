"""memoryd as the backend of Anthropic's memory tool
(``pip install "memoryd-client[anthropic]"``)::

    from anthropic import Anthropic
    from memoryd import Memoryd
    from memoryd.anthropic import MemorydMemoryTool

    memory = MemorydMemoryTool(Memoryd(), workspace="alice")
    runner = Anthropic().beta.messages.tool_runner(
        model="claude-sonnet-4-5", max_tokens=1024, tools=[memory],
        messages=[{"role": "user", "content": "What do you remember about my CI?"}],
    )

Claude's ``/memories/…`` paths are the layout's memory folder in memoryd:
``view`` lists a folder or shows a file with line numbers, as Anthropic's
local backend does; ``create``, ``str_replace``, ``insert``, ``delete`` and
``rename`` are memoryd edits (all or nothing, redacted, in the layout's
history). ``clear_all_memory`` is refused: forgetting is memoryd's own,
with its guarantees. Every refusal is the tool's error text.
"""

from __future__ import annotations

from typing import Any

from .client import AsyncMemoryd, Memoryd
from .errors import MemorydError
from .models import MemoryListing, MemoryRead

try:
    from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
    from anthropic.types.beta import (
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError('memoryd.anthropic needs the anthropic package: pip install "memoryd-client[anthropic]"') from exc

__all__ = ["AsyncMemorydMemoryTool", "MemorydMemoryTool"]

ROOT = "/memories"
LINE_NUMBER_WIDTH = 6


def _relative(path: str) -> str:
    """A ``/memories/…`` path as memoryd takes it (``""``: the whole folder)."""
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise ToolError(f"Path must start with {ROOT}, got: {path}")
    return path[len(ROOT) :].strip("/")


def _size(n: int) -> str:
    """As Anthropic's local backend prints a size."""
    if n == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((n.bit_length() - 1) // 10, len(units) - 1)
    size = n / 1024**i
    return f"{int(size)}{units[i]}" if size == int(size) else f"{size:.1f}{units[i]}"


def _folder_view(path: str, relative: str, listing: MemoryListing) -> str:
    """A folder up to two levels deep, hidden items left out."""
    prefix = f"{relative}/" if relative else ""
    rows: list[tuple[str, str]] = []
    sizes: dict[str, int] = {}
    for entry in listing.entries:
        inner = entry.path[len(prefix) :]
        if entry.kind == "file":
            for depth in range(1, inner.count("/") + 1):
                folder = "/".join(inner.split("/")[:depth])
                sizes[folder] = sizes.get(folder, 0) + (entry.bytes or 0)
        if inner.count("/") < 2 and not any(part.startswith(".") for part in inner.split("/")):
            rows.append((inner, entry.kind))
    lines = [f"{_size(sum(e.bytes or 0 for e in listing.entries if e.kind == 'file'))}\t{path}"]
    for inner, kind in rows:
        size = _size(sizes.get(inner, 0)) if kind == "dir" else _size(_bytes_of(listing, prefix + inner))
        lines.append(f"{size}\t{path.rstrip('/')}/{inner}{'/' if kind == 'dir' else ''}")
    header = f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:"
    return header + "\n" + "\n".join(lines)


def _bytes_of(listing: MemoryListing, path: str) -> int:
    return next((e.bytes or 0 for e in listing.entries if e.path == path), 0)


def _file_view(path: str, read: MemoryRead) -> str:
    numbered = [
        f"{str(read.offset + i).rjust(LINE_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(read.text.split("\n"))
    ]
    if read.text.endswith("\n"):
        numbered.pop()
    return f"Here's the content of {path} with line numbers:\n" + "\n".join(numbered)


def _is_file(relative: str, listing: MemoryListing) -> bool:
    return bool(relative) and [(e.path, e.kind) for e in listing.entries] == [(relative, "file")]


def _view_slice(command: BetaMemoryTool20250818ViewCommand) -> tuple[int, int | None]:
    """``view_range`` as memoryd's ``offset`` and ``limit``."""
    if not command.view_range or len(command.view_range) != 2:
        return 1, None
    start, end = max(1, command.view_range[0]), command.view_range[1]
    return start, None if end == -1 else max(1, end - start + 1)


def _refused(exc: MemorydError, command: Any) -> ToolError:
    """memoryd's refusal in the words Claude expects from a memory backend."""
    path = getattr(command, "path", None) or getattr(command, "old_path", "")
    detail = exc.detail
    if exc.code == "not_found" or "no such file" in detail:
        return ToolError(f"The path {path} does not exist. Please provide a valid path.")
    if command.command == "create" and exc.code == "memory_changed":
        return ToolError(f"File {path} already exists")
    if command.command == "str_replace" and "does not occur" in detail:
        return ToolError(
            f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim in {path}."
        )
    if command.command == "str_replace" and "occurs" in detail:
        return ToolError(
            f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}`. "
            "Please ensure it is unique"
        )
    if command.command == "rename" and "already exists" in detail:
        return ToolError(f"The destination {command.new_path} already exists")
    return ToolError(detail)


def _operation(command: Any) -> tuple[dict[str, Any], dict[str, str | None] | None, str]:
    """A memory-tool command as one memoryd edit operation, its precondition
    and the answer on success."""
    name = command.command
    if name == "create":
        op = {"command": "create", "path": _relative(command.path), "file_text": command.file_text}
        return op, {op["path"]: None}, f"File created successfully at: {command.path}"
    if name == "str_replace":
        op = {"command": "str_replace", "path": _relative(command.path), "old_str": command.old_str}
        op["new_str"] = command.new_str or ""
        return op, None, "The memory file has been edited."
    if name == "insert":
        op = {"command": "insert", "path": _relative(command.path), "insert_line": command.insert_line}
        op["insert_text"] = command.insert_text
        return op, None, f"The file {command.path} has been edited."
    if name == "delete":
        if not _relative(command.path):
            raise ToolError(f"Cannot delete the {ROOT} directory itself")
        return {"command": "delete", "path": _relative(command.path)}, None, f"Successfully deleted {command.path}"
    if name == "rename":
        if not _relative(command.old_path):
            raise ToolError(f"Cannot rename the {ROOT} directory itself")
        op = {"command": "rename", "old_path": _relative(command.old_path), "new_path": _relative(command.new_path)}
        return op, None, f"Successfully renamed {command.old_path} to {command.new_path}"
    raise ToolError(f"Unknown command: {name}")


_CLEAR_REFUSED = (
    "clear_all_memory is not available: this memory is kept by memoryd, whose forgetting is its own "
    "(ask its operator to forget the workspace); delete single files instead."
)


class MemorydMemoryTool(BetaAbstractMemoryTool):
    """Anthropic's memory tool over a layout's memory in memoryd (sync)."""

    def __init__(
        self, client: Memoryd, *, workspace: str = "default", layout: str = "default", session_id: str | None = None
    ) -> None:
        super().__init__()
        self.client = client
        self.workspace = workspace
        self.layout = layout
        self.session_id = session_id

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        relative = _relative(command.path)
        place = {"workspace": self.workspace, "layout": self.layout}
        try:
            listing = self.client.list_memory(relative or None, **place)
            if not _is_file(relative, listing):
                return _folder_view(command.path, relative, listing)
            offset, limit = _view_slice(command)
            read = self.client.read_memory(relative, offset=offset, limit=limit, session_id=self.session_id, **place)
        except MemorydError as exc:
            raise _refused(exc, command) from exc
        return _file_view(command.path, read)

    def _edit(self, command: Any) -> str:
        operation, expect, done = _operation(command)
        try:
            self.client.edit_memory(
                operations=[operation],
                expect=expect,
                session_id=self.session_id,
                workspace=self.workspace,
                layout=self.layout,
            )
        except MemorydError as exc:
            raise _refused(exc, command) from exc
        return done

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._edit(command)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._edit(command)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._edit(command)

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._edit(command)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._edit(command)

    def clear_all_memory(self) -> str:
        raise ToolError(_CLEAR_REFUSED)


class AsyncMemorydMemoryTool(BetaAsyncAbstractMemoryTool):
    """Anthropic's memory tool over a layout's memory in memoryd (async)."""

    def __init__(
        self,
        client: AsyncMemoryd,
        *,
        workspace: str = "default",
        layout: str = "default",
        session_id: str | None = None,
    ) -> None:
        super().__init__()
        self.client = client
        self.workspace = workspace
        self.layout = layout
        self.session_id = session_id

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        relative = _relative(command.path)
        place = {"workspace": self.workspace, "layout": self.layout}
        try:
            listing = await self.client.list_memory(relative or None, **place)
            if not _is_file(relative, listing):
                return _folder_view(command.path, relative, listing)
            offset, limit = _view_slice(command)
            read = await self.client.read_memory(
                relative, offset=offset, limit=limit, session_id=self.session_id, **place
            )
        except MemorydError as exc:
            raise _refused(exc, command) from exc
        return _file_view(command.path, read)

    async def _edit(self, command: Any) -> str:
        operation, expect, done = _operation(command)
        try:
            await self.client.edit_memory(
                operations=[operation],
                expect=expect,
                session_id=self.session_id,
                workspace=self.workspace,
                layout=self.layout,
            )
        except MemorydError as exc:
            raise _refused(exc, command) from exc
        return done

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await self._edit(command)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await self._edit(command)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await self._edit(command)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await self._edit(command)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await self._edit(command)

    async def clear_all_memory(self) -> str:
        raise ToolError(_CLEAR_REFUSED)
