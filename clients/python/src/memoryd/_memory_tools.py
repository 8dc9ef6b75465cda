"""The running agent's memory tools, as the agent integrations
share them: the four tools' schemas, their calls to memoryd, the text a model
reads of each answer, and Codex's citation block."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import models as m
from .errors import MemorydError

TOOL_NAMES = ("memory_list", "memory_read", "memory_search", "memory_edit")

_CITATION = re.compile(r"\s*<oai-mem-citation>(.*?)(?:</oai-mem-citation>|\Z)", re.DOTALL)
_ID_LIST = re.compile(r"<(rollout_ids|thread_ids)>(.*?)(?:</\1>|\Z)", re.DOTALL)
_ROLLOUT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def strip_citations(text: str) -> tuple[str, list[str]]:
    """``text`` without Codex's ``<oai-mem-citation>`` blocks, and the rollout
    ids they name (deduplicated, in order). memoryd counts the block in a
    recorded segment as a use of those memories; strip it only from what a
    user sees."""
    ids: list[str] = []
    for block in _CITATION.finditer(text):
        for _, listed in _ID_LIST.findall(block.group(1)):
            for candidate in re.split(r"[\s,]+", listed):
                if _ROLLOUT_ID.match(candidate) and candidate not in ids:
                    ids.append(candidate)
    return _CITATION.sub("", text).rstrip(), ids


def _nullable(kind: str, description: str) -> dict[str, Any]:
    return {"type": [kind, "null"], "description": description}


def _strict(properties: dict[str, Any]) -> dict[str, Any]:
    """A strict JSON schema: every property listed as required (optional
    ones take ``null``), nothing else allowed."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


_COMMAND_FIELDS = ("path", "file_text", "old_str", "new_str", "insert_text", "old_path", "new_path")


def paths_note(layout: str) -> str:
    """How a tool's description names the memory folder, as the instructions spell it."""
    folder = "`memories/`" if layout == "default" else f"of layout {layout} (named in your instructions)"
    return f"Paths are relative to the memory folder {folder}: `MEMORY.md`, `skills/ci/SKILL.md`."


def tool_schemas(where: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each tool's description (``where`` says how paths are given) and strict parameters."""
    command = _strict(
        {
            "command": {"type": "string", "enum": ["create", "str_replace", "insert", "delete", "rename"]},
            **{name: _nullable("string", name) for name in _COMMAND_FIELDS},
            "insert_line": _nullable("integer", "insert after this line (0: at the top)"),
        }
    )
    return {
        "memory_list": (
            f"List the files and folders of your memory folder, or of a folder in it. {where}",
            _strict(
                {
                    "path": _nullable("string", "a folder or file (null: the whole memory folder)"),
                    "cursor": _nullable("string", "the cursor the last page ended with"),
                }
            ),
        ),
        "memory_read": (
            f"Read a memory file with line numbers; long files come in slices (offset is 1-based). {where}",
            _strict(
                {
                    "path": {"type": "string", "description": "the file"},
                    "offset": _nullable("integer", "the first line (null: 1)"),
                    "limit": _nullable("integer", "how many lines (null: as many as fit)"),
                }
            ),
        ),
        "memory_search": (
            "Find lines of your memory files that contain a word or phrase (case-insensitive), MEMORY.md first; "
            "answers path:line: text. When the words you know find nothing, search by meaning: mode semantic "
            "(or hybrid, or ranked for words in any order) answers the sections that answer the query best. "
            f"{where}",
            _strict(
                {
                    "query": {"type": "string"},
                    "mode": {
                        "type": ["string", "null"],
                        "enum": ["substring", "regex", "ranked", "semantic", "hybrid", None],
                        "description": "how to search (null: substring)",
                    },
                    "path": _nullable("string", "search only under this folder or file"),
                    "regex": _nullable("boolean", "treat the query as a regular expression"),
                    "context": _nullable("integer", "lines shown before and after each match (0-20)"),
                }
            ),
        ),
        "memory_edit": (
            "Fix stale or wrong memory, all changes or none: a V4A patch (*** Begin Patch … *** End Patch) or "
            "operations (create, str_replace, insert, delete, rename; unused fields null). expect lists the "
            "sha256 memory_read gave for a file you change, so that a file changed since is not overwritten. "
            f"{where}",
            _strict(
                {
                    "patch": _nullable("string", "a V4A patch (null when operations are given)"),
                    "operations": {"type": ["array", "null"], "items": command},
                    "expect": {
                        "type": ["array", "null"],
                        "items": _strict(
                            {"path": {"type": "string"}, "sha256": _nullable("string", "null: must not exist")}
                        ),
                    },
                    "reason": _nullable("string", "why, for the memory's history"),
                }
            ),
        ),
    }


def call_arguments(name: str, args: Mapping[str, Any], session_id: str | None) -> dict[str, Any]:
    """A tool's arguments as the client's method takes them."""
    given = {k: v for k, v in args.items() if v is not None}
    if name == "memory_read":
        return {**given, "session_id": session_id}
    if name == "memory_edit":
        operations = [{k: v for k, v in op.items() if v is not None} for op in given.get("operations") or []]
        expect = {e["path"]: e.get("sha256") for e in given.get("expect") or []}
        return {
            "patch": given.get("patch"),
            "operations": operations or None,
            "expect": expect or None,
            "reason": given.get("reason"),
            "session_id": session_id,
        }
    return given


def method_of(name: str) -> str:
    """The client's method for a tool."""
    return {
        "memory_list": "list_memory",
        "memory_read": "read_memory",
        "memory_search": "search_memory",
        "memory_edit": "edit_memory",
    }[name]


def render(name: str, answer: Any) -> str:
    """A tool's answer as text a model reads well."""
    if isinstance(answer, m.MemoryListing):
        lines = [f"{e.path}/" if e.kind == "dir" else f"{e.path} ({e.bytes} bytes)" for e in answer.entries]
        more = f"\n… more: pass cursor {answer.next_cursor}" if answer.next_cursor else ""
        return ("\n".join(lines) or "The memory folder holds nothing here.") + more
    if isinstance(answer, m.MemoryRead):
        if answer.total_lines == 0:
            return f"{answer.path} is empty."
        numbered = [f"{answer.offset + i:>6}\t{line}" for i, line in enumerate(answer.text.splitlines())]
        after = answer.offset + answer.lines
        if after <= answer.total_lines:
            numbered.append(f"… {answer.total_lines + 1 - after} more lines; read on with offset {after}")
        return "\n".join(numbered) + f"\n(sha256 {answer.sha256})"
    if isinstance(answer, m.MemorySearch):
        lines = [f"{hit.path}:{hit.line}: {hit.text}" for hit in answer.matches]
        return "\n".join(lines) or "No line of the memory folder matches."
    if isinstance(answer, m.MemoryPassages):
        shown = [
            f"{p.path}:{p.line if p.line == p.end_line else f'{p.line}-{p.end_line}'} (score {p.score})"
            f"{' ' + p.heading if p.heading else ''}\n{p.text}"
            for p in answer.matches
        ]
        more = f"\n… more sections: pass cursor {answer.next_cursor}" if answer.next_cursor else ""
        return ("\n\n".join(shown) or "No section of the memory folder answers the query.") + more
    if isinstance(answer, m.PublishedEdit):
        changed = ", ".join(f"{c.change} {c.path}" for c in answer.changes)
        return f"The edit is published: {changed or 'nothing changed'}."
    if isinstance(answer, m.Job):
        return f"The edit is queued as job {answer.job_id}; it publishes once memory's lane is free."
    return str(answer)


def failure(exc: MemorydError) -> str:
    """What the model reads of a refused call: memoryd's detail, never a traceback."""
    return f"Error ({exc.code}): {exc.detail}"
