"""memoryd for the OpenAI Agents SDK (``pip install "memoryd-client[agents]"``).

Three lines give an agent long-term memory::

    memory = MemorydMemory(AsyncMemoryd())
    agent = Agent(name="assistant", instructions=memory.instructions("You are helpful."))
    result = await memory.run(agent, "I prefer green tea.")

``run`` also hands the agent its memory tools (``memory_list``,
``memory_read``, ``memory_search``, ``memory_edit``: see :func:`memory_tools`),
so it can open the files its instructions name and fix what is stale.

In synchronous code, ``SyncMemorydMemory(Memoryd())`` does the same with
``Runner.run_sync``. ``run`` records every run (also one that raised) as a
rollout segment,
exactly the payload the SDK's own sandbox memory would write, and the
instructions carry what memoryd consolidated from earlier sessions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from typing_extensions import Self

from . import _memory_tools as tools_
from ._memory_tools import strip_citations
from .client import AsyncMemoryd, Memoryd
from .errors import MemorydError, NotFoundError
from .models import AppendedSegment, CloseResult, Instructions

try:
    from agents import FunctionTool, Runner
    from agents.exceptions import RunErrorDetails
    from agents.sandbox.memory.rollouts import (
        build_rollout_payload,
        build_rollout_payload_from_result,
        terminal_metadata_for_exception,
    )
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError('memoryd.agents needs openai-agents 0.24.x: pip install "memoryd-client[agents]"') from exc

logger = logging.getLogger("memoryd.agents")

RunInput = str | list[Any]


def segment_from_result(
    result: Any,
    *,
    exception: BaseException | None = None,
    input_override: RunInput | None = None,
) -> dict[str, Any]:
    """The rollout segment of one run, as the SDK's in-process memory builds it.

    ``result`` is a ``RunResult`` or a finished ``RunResultStreaming``. For a
    run that raised, pass the exception, and as ``result`` either ``None``
    or the exception's ``run_data``; the segment then holds the items made
    before the failure and the SDK's terminal metadata for the exception
    (``max_turns_exceeded``, ``guardrail_tripped``, ``cancelled`` or
    ``failed``). ``input_override`` is this run's own user input when
    ``result.input`` holds more (an SDK session's history, say).
    """
    if result is None or isinstance(result, RunErrorDetails):
        if exception is None:
            raise ValueError("a run without a result needs the exception it raised")
        run_data = result if result is not None else getattr(exception, "run_data", None)
        run_input = input_override if input_override is not None else getattr(run_data, "input", None)
        if run_input is None:
            raise ValueError("the run's input is unknown: pass input_override")
        return build_rollout_payload(
            input=run_input,
            new_items=list(getattr(run_data, "new_items", []) or []),
            final_output=None,
            interruptions=[],
            terminal_metadata=terminal_metadata_for_exception(exception),
        )
    return build_rollout_payload_from_result(result, exception=exception, input_override=input_override)


__all__ = [
    "MemorydMemory",
    "SyncMemorydMemory",
    "memory_tools",
    "segment_from_result",
    "strip_citations",
]


def memory_tools(
    client: Memoryd | AsyncMemoryd,
    *,
    workspace: str = "default",
    layout: str = "default",
    session_id: str | None = None,
    edit: bool = True,
) -> list[FunctionTool]:
    """openai-agents function tools over a layout's memory, named as memoryd's
    MCP tools: ``memory_list``, ``memory_read``, ``memory_search`` and (with
    ``edit``) ``memory_edit``, with strict schemas. A read with ``session_id``
    counts as a use of that memory; an edit records it. A refusal comes back to
    the model as text (memoryd's detail), never as an exception that ends the
    run. Works with :class:`~memoryd.Memoryd` (its calls run on a thread) and
    :class:`~memoryd.AsyncMemoryd`."""
    schemas = tools_.tool_schemas(tools_.paths_note(layout))
    names = tools_.TOOL_NAMES if edit else tools_.TOOL_NAMES[:3]

    def invoker(name: str) -> Callable[[Any, str], Awaitable[str]]:
        async def invoke(_context: Any, raw: str) -> str:
            try:
                args = tools_.call_arguments(name, json.loads(raw or "{}"), session_id)
            except (ValueError, AttributeError, KeyError) as exc:
                return f"Error: the arguments are not the tool's: {exc}"
            method = getattr(client, tools_.method_of(name))
            try:
                if isinstance(client, AsyncMemoryd):
                    answer = await method(workspace=workspace, layout=layout, **args)
                else:
                    answer = await asyncio.to_thread(method, workspace=workspace, layout=layout, **args)
            except MemorydError as exc:
                return tools_.failure(exc)
            return tools_.render(name, answer)

        return invoke

    made = []
    for name in names:
        description, parameters = schemas[name]
        made.append(
            FunctionTool(
                name=name,
                description=description,
                params_json_schema=parameters,
                on_invoke_tool=invoker(name),
                strict_json_schema=True,
            )
        )
    return made


InstructionsFn = Callable[[Any, Any], Awaitable[str]]
SyncInstructionsFn = Callable[[Any, Any], str]


ClientT = TypeVar("ClientT", AsyncMemoryd, Memoryd)


class _Conversation(Generic[ClientT]):
    """What the async and the sync memory share: one conversation's session,
    rollout and layout, the instructions' cache, and the segment of a run."""

    def __init__(
        self,
        client: ClientT,
        *,
        session_id: str | None = None,
        layout: str = "default",
        workspace: str = "default",
        rollout_id: str | None = None,
        instructions_ttl: float = 5.0,
        instructions_timeout: float = 2.0,
        close_wait: int | None = None,
        tools: bool = True,
    ) -> None:
        self.client: ClientT = client
        self.tools = tools
        self._explicit_session = session_id is not None
        self.session_id = session_id or f"agent-{uuid.uuid4().hex}"
        self.layout = layout
        self.workspace = workspace
        self.rollout_id = rollout_id or self.session_id
        self.instructions_ttl = instructions_ttl
        self.instructions_timeout = instructions_timeout
        self.close_wait = close_wait
        self._recorded = 0
        self._cached: tuple[float, str | None] | None = None

    def _fresh_instructions(self) -> tuple[bool, str | None]:
        """``(True, text)`` while the cached instructions are fresh."""
        if self._cached is not None and time.monotonic() - self._cached[0] < self.instructions_ttl:
            return True, self._cached[1]
        return False, None

    def _instructions_answered(self, answer: Instructions | None) -> str | None:
        text = answer.instructions if answer is not None else None
        self._cached = (time.monotonic(), text)
        return text

    def _instructions_unavailable(self, exc: Exception) -> None:
        logger.warning("memoryd instructions unavailable, the agent runs without memory: %s", exc)
        # While memoryd is down every turn would wait the whole timeout: the
        # failure is remembered as long as an answer would be.
        self._cached = (time.monotonic(), None)

    @staticmethod
    def _with_memory(base: str | None, memory: str | None) -> str:
        if not memory:
            return base or ""
        return f"{base}\n\n{memory}" if base else memory

    def _segment(
        self,
        result: Any,
        rollout_id: str | None,
        exception: BaseException | None,
        input_override: RunInput | None,
    ) -> dict[str, Any]:
        payload = segment_from_result(result, exception=exception, input_override=input_override)
        payload["rollout_id"] = rollout_id or self.rollout_id
        return payload

    def _with_tools(self, agent: Any) -> Any:
        """A copy of ``agent`` that also holds this conversation's memory tools
        (the caller's agent is left as it is); ``agent`` itself without ``tools``."""
        if not self.tools:
            return agent
        mine: list[Any] = memory_tools(
            self.client, workspace=self.workspace, layout=self.layout, session_id=self.session_id
        )
        taken = {t.name for t in mine}
        kept: list[Any] = [t for t in agent.tools if getattr(t, "name", None) not in taken]
        return agent.clone(tools=[*kept, *mine])

    @staticmethod
    def _stripped(result: Any) -> Any:
        """``result`` with its final output's citation block taken out (the
        recorded segment keeps it: memoryd counts it)."""
        if isinstance(result.final_output, str):
            text, _ = strip_citations(result.final_output)
            return dataclasses.replace(result, final_output=text)
        return result

    def _recording_failed(self, exc: Exception) -> None:
        logger.error("memoryd could not record the run of session %s: %s", self.session_id, exc)

    def _written(self) -> bool:
        """Whether the session exists to be closed: a run was recorded, or it was named."""
        return bool(self._recorded) or self._explicit_session


class MemorydMemory(_Conversation[AsyncMemoryd]):
    """One conversation's memory in memoryd: a session, one rollout, one layout.

    ``session_id`` defaults to a new ``agent-<hex>``; every run recorded here
    goes to one rollout (``rollout_id``, default the session id), so phase
    one reads the conversation as a whole, as the SDK does for a session.
    :class:`SyncMemorydMemory` is the same for :class:`~memoryd.Memoryd` and
    ``Runner.run_sync``.
    """

    # -- the read side -----------------------------------------------------
    async def memory_instructions(self) -> str | None:
        """memoryd's memory instructions for this layout, or ``None`` when there
        are none yet or memoryd cannot be asked within ``instructions_timeout``
        (logged, never raised). Cached for ``instructions_ttl`` seconds."""
        fresh, text = self._fresh_instructions()
        if fresh:
            return text
        try:
            answer = await self.client.get_instructions(self.workspace, self.layout, timeout=self.instructions_timeout)
        except MemorydError as exc:
            self._instructions_unavailable(exc)
            return None
        return self._instructions_answered(answer)

    def instructions(self, base: str | None = None) -> InstructionsFn:
        """A value for ``Agent(instructions=...)``: ``base`` followed by the
        memory instructions, or ``base`` alone when there is no memory."""

        async def with_memory(_context: Any, _agent: Any) -> str:
            return self._with_memory(base, await self.memory_instructions())

        return with_memory

    # -- the write side ----------------------------------------------------
    async def record(
        self,
        result: Any,
        *,
        rollout_id: str | None = None,
        exception: BaseException | None = None,
        input_override: RunInput | None = None,
    ) -> AppendedSegment:
        """Post one run as a segment of this conversation (see
        :func:`segment_from_result`); raises :class:`~memoryd.MemorydError`."""
        payload = self._segment(result, rollout_id, exception, input_override)
        appended = await self.client.append_segment(
            self.session_id, payload, layout=self.layout, workspace=self.workspace
        )
        self._recorded += 1
        return appended

    async def run(
        self,
        agent: Any,
        input: RunInput,
        *,
        rollout_id: str | None = None,
        strip_citations: bool = False,
        **runner_kwargs: Any,
    ) -> Any:
        """``Runner.run(agent, input, **runner_kwargs)``, recorded; the agent
        runs with its memory tools (unless ``tools=False``).

        A run that raises is recorded with its terminal state, then the
        exception is re-raised. A recording that fails is logged, and the
        run's own result or exception goes to the caller unchanged. With
        ``strip_citations`` the result's final output loses Codex's citation
        block (the recorded segment keeps it).
        """
        try:
            result = await Runner.run(self._with_tools(agent), input, **runner_kwargs)
        except Exception as exc:
            await self._record_quietly(None, exception=exc, input_override=input, rollout_id=rollout_id)
            raise
        await self._record_quietly(result, input_override=input, rollout_id=rollout_id)
        return self._stripped(result) if strip_citations else result

    async def _record_quietly(self, result: Any, **kwargs: Any) -> None:
        try:
            await self.record(result, **kwargs)
        except Exception as exc:
            self._recording_failed(exc)

    async def close(self, wait: int | None = None) -> CloseResult | None:
        """Close the session: memoryd extracts and consolidates its runs. With
        ``wait`` (seconds) hold until that is done. ``None`` when the session
        was never created (nothing was recorded)."""
        try:
            return await self.client.close_session(self.session_id, wait=wait)
        except NotFoundError:
            if self._written():
                raise
            return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._written():
            await self.close(wait=self.close_wait)


class SyncMemorydMemory(_Conversation[Memoryd]):
    """:class:`MemorydMemory` for synchronous code: the client is a
    :class:`~memoryd.Memoryd`, runs go through ``Runner.run_sync``, and
    ``with`` closes the session."""

    def memory_instructions(self) -> str | None:
        """As :meth:`MemorydMemory.memory_instructions`, blocking."""
        fresh, text = self._fresh_instructions()
        if fresh:
            return text
        try:
            answer = self.client.get_instructions(self.workspace, self.layout, timeout=self.instructions_timeout)
        except MemorydError as exc:
            self._instructions_unavailable(exc)
            return None
        return self._instructions_answered(answer)

    def instructions(self, base: str | None = None) -> SyncInstructionsFn:
        """A value for ``Agent(instructions=...)``; the SDK calls it at the
        start of each run, and it waits at most ``instructions_timeout``."""

        def with_memory(_context: Any, _agent: Any) -> str:
            return self._with_memory(base, self.memory_instructions())

        return with_memory

    def record(
        self,
        result: Any,
        *,
        rollout_id: str | None = None,
        exception: BaseException | None = None,
        input_override: RunInput | None = None,
    ) -> AppendedSegment:
        """As :meth:`MemorydMemory.record`, blocking."""
        payload = self._segment(result, rollout_id, exception, input_override)
        appended = self.client.append_segment(self.session_id, payload, layout=self.layout, workspace=self.workspace)
        self._recorded += 1
        return appended

    def run(
        self,
        agent: Any,
        input: RunInput,
        *,
        rollout_id: str | None = None,
        strip_citations: bool = False,
        **runner_kwargs: Any,
    ) -> Any:
        """``Runner.run_sync(agent, input, **runner_kwargs)``, recorded and
        with the memory tools as :meth:`MemorydMemory.run`."""
        try:
            result = Runner.run_sync(self._with_tools(agent), input, **runner_kwargs)
        except Exception as exc:
            self._record_quietly(None, exception=exc, input_override=input, rollout_id=rollout_id)
            raise
        self._record_quietly(result, input_override=input, rollout_id=rollout_id)
        return self._stripped(result) if strip_citations else result

    def _record_quietly(self, result: Any, **kwargs: Any) -> None:
        try:
            self.record(result, **kwargs)
        except Exception as exc:
            self._recording_failed(exc)

    def close(self, wait: int | None = None) -> CloseResult | None:
        """As :meth:`MemorydMemory.close`, blocking."""
        try:
            return self.client.close_session(self.session_id, wait=wait)
        except NotFoundError:
            if self._written():
                raise
            return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._written():
            self.close(wait=self.close_wait)
