"""An agent that learns a preference in one session and, in the next, looks
it up with its memory tools (``memory_search``, which ``MemorydMemory.run``
gives it) before it answers.

Run memoryd, make a tenant, then:

    export MEMORYD_URL=http://127.0.0.1:8080 MEMORYD_API_KEY=<the tenant's key>
    python examples/agent_with_memory.py

With ``OPENAI_API_KEY`` set the agent uses a real OpenAI model (and memoryd
should too, for real memories). Without it, everything stays offline: a
stub model stands in for the agent's, and memoryd's extractive provider
(its default without an API key) makes the memory.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid

import json

from agents import Agent, ModelResponse, Usage, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from memoryd import AsyncMemoryd
from memoryd.agents import MemorydMemory


class OfflineModel(Model):
    """A stand-in for an LLM: acknowledges what it is told; asked a question,
    it searches its memory with the ``memory_search`` tool and answers from
    the lines it found."""

    async def get_response(self, system_instructions, input, model_settings, tools, *args, **kwargs) -> ModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        found = [str(i.get("output")) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        asked = any("?" in str(i.get("content", "")) for i in items if isinstance(i, dict) and i.get("role") == "user")
        if asked and not found and any(t.name == "memory_search" for t in tools):
            arguments = {"query": "prefer", "path": None, "regex": None, "context": None}
            call = ResponseFunctionToolCall(
                id=f"fc_{uuid.uuid4().hex[:8]}",
                call_id=f"call_{uuid.uuid4().hex[:8]}",
                type="function_call",
                name="memory_search",
                arguments=json.dumps(arguments),
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        if found:
            hits = [line.split(": ", 1)[1].strip("#-* ") for line in found[0].splitlines() if ": " in line]
            # A line that quotes the user says most; a heading least.
            hits.sort(key=lambda hit: ('"' not in hit, hit.startswith("Task Group")))
            text = f"From memory: {hits[0]}" if hits else "I remember nothing about that."
        else:
            text = "Noted, I will remember that."
        message = ResponseOutputMessage(
            id=f"msg_{uuid.uuid4().hex[:8]}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the offline model does not stream")


async def main() -> None:
    offline = not os.environ.get("OPENAI_API_KEY")
    if offline:
        set_tracing_disabled(True)
    model = OfflineModel() if offline else "gpt-5.4-mini"
    async with AsyncMemoryd() as client:
        # Session 1: the user states a preference; closing makes memoryd
        # extract and consolidate it (wait up to a minute for that).
        async with MemorydMemory(client, close_wait=60) as memory:
            agent = Agent(name="barista", instructions=memory.instructions("You are a barista."), model=model)
            result = await memory.run(agent, "I prefer my coffee black, no sugar.")
            print("session 1:", result.final_output)
        # Session 2: a new conversation; the instructions carry the memory, and
        # the agent searches its memory folder with the tools run() gives it.
        memory = MemorydMemory(client)
        agent = Agent(name="barista", instructions=memory.instructions("You are a barista."), model=model)
        result = await memory.run(agent, "How do I take my coffee?")
        print("session 2:", result.final_output)
        await memory.close()


if __name__ == "__main__":
    asyncio.run(main())
