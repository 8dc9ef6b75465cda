/**
 * Two conversations of one agent, the second remembering the first, with no
 * model account: a stub `Model` stands in for the LLM, and memoryd runs its
 * extractive provider (`MEMORYD_LLM_PROVIDER=extractive`). Before it answers,
 * the agent searches its memory with `memory_search`, one of the memory
 * tools `MemorydMemory.run` gives it.
 *
 *   MEMORYD_URL=http://127.0.0.1:8080 MEMORYD_API_KEY=mk_... node dist-examples/agent-with-memory.js
 */
import { Agent, Usage, setTracingDisabled } from "@openai/agents";
import type { Model, ModelRequest, ModelResponse, StreamEvent } from "@openai/agents";
import { Memoryd } from "@memoryd/client";
import { MemorydMemory } from "@memoryd/client/agents";

/** Searches its memory first, then answers from what the search found. */
class MemorySearchingModel implements Model {
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = JSON.stringify(request.input);
    const searched = input.includes("function_call_result");
    if (!searched && request.tools.some((t) => t.name === "memory_search")) {
      const args = { query: "tea", path: null, regex: null, context: null };
      return {
        usage: new Usage(),
        output: [{ type: "function_call", callId: "search-1", name: "memory_search", arguments: JSON.stringify(args), status: "completed" }],
      };
    }
    const remembered = searched && /genmaicha/i.test(input);
    const text = remembered ? "A pot of genmaicha, as you like it." : "Noted, I will remember that.";
    return {
      usage: new Usage(),
      output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] }],
    };
  }

  // The example never streams.
  getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("streaming is not scripted");
  }
}

setTracingDisabled(true);
const memoryd = new Memoryd();
const model = new MemorySearchingModel();

// The first conversation: a preference is said, recorded, and consolidated at close.
const first = new MemorydMemory(memoryd);
const barista = new Agent({ name: "barista", instructions: first.instructions("You make tea."), model });
await first.run(barista, "My favourite tea is genmaicha.");
const closed = await first.close({ wait: 60 });
console.log(`first session ${first.sessionId}: ${closed?.state}`);

// The second conversation starts with what memoryd remembers, and searches the rest.
const second = new MemorydMemory(memoryd);
const returning = new Agent({ name: "barista", instructions: second.instructions("You make tea."), model });
const answer = await second.run(returning, "The usual, please.");
console.log(`second session answers: ${answer.finalOutput}`);
await second.close();
