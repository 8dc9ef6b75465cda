// @memoryd/client/agents against the real memoryd binary and the real
// @openai/agents, with a scripted model: what is stored must be the payload
// the SDK's own sandbox memory makes for the same run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { Agent, MaxTurnsExceededError, setTracingDisabled, tool } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder } from "@openai/agents/testing";
import { z } from "zod";
import { Memoryd } from "../dist/index.js";
import { MemorydMemory, resolveRolloutId, segmentFromResult } from "../dist/agents.js";
import { backends, startMemoryd } from "./harness.mjs";

setTracingDisabled(true);

// The SDK does not export its payload builder; the test reads it from the installed package's own file.
const coreDir = dirname(createRequire(import.meta.url).resolve("@openai/agents-core"));
const { buildMemoryRolloutPayload } = await import(pathToFileURL(join(coreDir, "sandbox", "memory", "rollouts.mjs")).href);

const fast = { maxRetries: 3, baseDelayMs: 10, maxDelayMs: 50, maxRetryAfterMs: 5000 };
const STORED_ORDER = ["updated_at", "rollout_id", "input", "generated_items", "interruptions", "terminal_metadata", "final_output"];

/** The SDK's payload with the key order memoryd stores, `updated_at` left out. */
function asStored(payload) {
  const ordered = {};
  for (const key of STORED_ORDER) if (key in payload && key !== "updated_at") ordered[key] = payload[key];
  return ordered;
}

function storedLines(server, tenantId, rolloutId) {
  const text = readFileSync(server.rolloutFile(tenantId, `sessions/${rolloutId}.jsonl`), "utf8");
  return text.trimEnd().split("\n");
}

function withoutUpdatedAt(line) {
  const { updated_at: updatedAt, ...rest } = JSON.parse(line);
  assert.match(updatedAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}\+00:00$/);
  return rest;
}

const teaTool = tool({
  name: "brewing_guide",
  description: "How to brew a kind of tea.",
  parameters: z.object({ kind: z.string() }),
  execute: async ({ kind }) => `${kind}: 80°C for 2 minutes`,
});

for (const backend of backends) {
  test(`a run with a tool call is stored as the SDK's own payload (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { tenantId, apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      const memory = new MemorydMemory(client, { sessionId: "ts-agent-1" });
      const model = new ScriptedModel([
        [functionCall("brewing_guide", { kind: "green" }, { callId: "call_tea" })],
        [assistantMessage("Brew green tea at 80°C for 2 minutes.")],
      ]);
      const agent = new Agent({ name: "barista", instructions: memory.instructions("You are a barista."), model, tools: [teaTool] });
      const result = await memory.run(agent, "I prefer green tea. How do I brew it?");
      assert.equal(result.finalOutput, "Brew green tea at 80°C for 2 minutes.");

      const [line, ...more] = storedLines(server, tenantId, "ts-agent-1");
      assert.equal(more.length, 0);
      const stored = withoutUpdatedAt(line);
      assert.deepEqual(Object.keys(JSON.parse(line)), ["updated_at", ...Object.keys(stored)]);
      const sdk = buildMemoryRolloutPayload(result.state, { rolloutId: "ts-agent-1" });
      assert.deepEqual(Object.keys(stored), Object.keys(asStored(sdk)));
      assert.deepEqual(stored, asStored(sdk));
      assert.deepEqual(segmentFromResult(result, { fallbackId: "ts-agent-1", exception: undefined }).generated_items, sdk.generated_items);
      const types = stored.generated_items.map((item) => item.type);
      assert.deepEqual(types, ["function_call", "function_call_result", "message"]);
      assert.match(JSON.stringify(stored.generated_items[1]), /80°C for 2 minutes/);
      assert.equal(stored.terminal_metadata.terminal_state, "completed");
    } finally {
      await server.stop();
    }
  });

  test(`a run that exceeds its turns is recorded with the SDK's terminal metadata, then rethrown (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { tenantId, apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      const memory = new MemorydMemory(client, { sessionId: "ts-agent-2", rolloutId: "looping" });
      const model = new ScriptedModel([
        [functionCall("brewing_guide", { kind: "oolong" }, { callId: "call_1" })],
        [functionCall("brewing_guide", { kind: "oolong" }, { callId: "call_2" })],
      ]);
      const agent = new Agent({ name: "looper", instructions: "Loop.", model, tools: [teaTool] });
      let thrown;
      await assert.rejects(memory.run(agent, "Brew oolong.", { maxTurns: 1 }), (error) => {
        thrown = error;
        return error instanceof MaxTurnsExceededError;
      });
      const [line] = storedLines(server, tenantId, "looping");
      const stored = withoutUpdatedAt(line);
      const sdk = buildMemoryRolloutPayload(thrown.state, { rolloutId: "looping", exception: thrown });
      assert.deepEqual(stored, asStored(sdk));
      assert.equal(stored.terminal_metadata.terminal_state, "max_turns_exceeded");
      assert.equal(stored.terminal_metadata.exception_type, "MaxTurnsExceededError");
      assert.equal(stored.terminal_metadata.has_final_output, false);
      assert.ok(!("final_output" in stored));
      assert.ok(stored.generated_items.some((item) => item.type === "function_call_result"));
    } finally {
      await server.stop();
    }
  });

  test(`after a close a second agent's model request carries the first session's memory (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      const first = new MemorydMemory(client);
      const firstModel = new ScriptedModel([[assistantMessage("Noted: green tea with oat milk.")]]);
      const firstAgent = new Agent({ name: "assistant", instructions: first.instructions("You help."), model: firstModel });
      await first.run(firstAgent, "I always drink green tea with oat milk.");
      assert.equal(firstModel.firstCall.request.systemInstructions, "You help.");
      const closed = await first.close({ wait: 30 });
      assert.equal(closed.state, "closed");

      const second = new MemorydMemory(client);
      const secondModel = new ScriptedModel([
        modelResponder(({ request }) => [
          assistantMessage(request.systemInstructions.includes("oat milk") ? "Green tea with oat milk, as always?" : "What would you like?"),
        ]),
      ]);
      const secondAgent = new Agent({ name: "assistant", instructions: second.instructions("You help."), model: secondModel });
      const answer = await second.run(secondAgent, "The usual, please.");
      const instructions = secondModel.firstCall.request.systemInstructions;
      assert.ok(instructions.startsWith("You help.\n\n"), instructions);
      assert.match(instructions, /green tea with oat milk/);
      assert.equal(answer.finalOutput, "Green tea with oat milk, as always?");
      assert.equal(await new MemorydMemory(client).close(), null, "a conversation never recorded has nothing to close");
    } finally {
      await server.stop();
    }
  });
}

test("instructions fall back to the base when memoryd is away, logged and not thrown", async () => {
  const warnings = [];
  const client = new Memoryd({ baseUrl: "http://127.0.0.1:9", apiKey: "mk_none", retry: { maxRetries: 0 } });
  const memory = new MemorydMemory(client, {
    instructionsTimeoutMs: 500,
    logger: { warn: (m) => warnings.push(m), error: (m) => warnings.push(m) },
  });
  const instructions = memory.instructions("Base.");
  assert.equal(await instructions({}, {}), "Base.");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /without memory/);
});

test("rollout ids follow the SDK's rule and its validation", () => {
  assert.equal(resolveRolloutId({ conversationId: "conv", sdkSessionId: "s", groupId: "g", fallbackId: "f" }), "conv");
  assert.equal(resolveRolloutId({ sdkSessionId: " s1 ", groupId: "g" }), "s1");
  assert.equal(resolveRolloutId({ groupId: "g", fallbackId: "f" }), "g");
  assert.equal(resolveRolloutId({ fallbackId: "f" }), "f");
  assert.match(resolveRolloutId({}), /^[0-9a-f-]{36}$/);
  assert.throws(() => resolveRolloutId({ conversationId: "../etc" }), /file-safe ID/);
  assert.throws(() => resolveRolloutId({ fallbackId: "x".repeat(129) }), /file-safe ID/);
});

const CITED =
  "Green tea, in the morning.\n<oai-mem-citation>\n<citation_entries>\nMEMORY.md:3-4|note=[tea]\n</citation_entries>\n<rollout_ids>\ntea-chat\nother\n</rollout_ids>\n</oai-mem-citation>";

test("stripCitations takes the block out and names its rollouts", async () => {
  const { stripCitations } = await import("../dist/agents.js");
  assert.deepEqual(stripCitations(CITED), { text: "Green tea, in the morning.", rolloutIds: ["tea-chat", "other"] });
  assert.deepEqual(stripCitations("no block"), { text: "no block", rolloutIds: [] });
});

const nulls = (fields) => Object.fromEntries(fields.map((f) => [f, null]));

for (const backend of backends) {
  test(`an agent searches, reads and edits its memory with its tools (${backend})`, async () => {
    const { memoryTools } = await import("../dist/agents.js");
    const server = await startMemoryd(backend);
    try {
      const { tenantId, apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      await client.appendSegment("tea-chat", { rollout_id: "tea-chat", input: "I prefer green tea in the morning.", final_output: "noted" });
      assert.equal((await client.closeSession("tea-chat", { wait: 30 })).state, "closed");
      const summary = (await client.listMemory({ path: "rollout_summaries" })).entries.find((e) => e.path.includes("tea-chat")).path;
      const seen = [];
      const model = new ScriptedModel([
        [functionCall("memory_search", { query: "green tea", ...nulls(["path", "regex", "context"]) }, { callId: "c1" })],
        modelResponder((call) => {
          seen.push(JSON.stringify(call.request.input));
          return [functionCall("memory_read", { path: summary, offset: null, limit: null }, { callId: "c2" })];
        }),
        modelResponder((call) => {
          seen.push(JSON.stringify(call.request.input));
          return [assistantMessage(CITED)];
        }),
      ]);
      const memory = new MemorydMemory(client, { sessionId: "ts-tools-1" });
      const agent = new Agent({ name: "assistant", instructions: "Use your memory.", model });
      const result = await memory.run(agent, "What do I drink in the morning?", { stripCitations: true });
      assert.equal(result.finalOutput, "Green tea, in the morning.");
      assert.equal(agent.tools.length, 0, "the caller's agent is left as it was");
      assert.match(seen[0], /MEMORY\.md:\d+:/);
      assert.match(seen[1], /     1\\t/);
      assert.match(readFileSync(server.rolloutFile(tenantId, "sessions/ts-tools-1.jsonl"), "utf8"), /oai-mem-citation/);
      await memory.close({ wait: 30 });
      const used = Object.fromEntries((await client.getSelection()).selected.map((s) => [s.rollout_id, s.usage_count]));
      assert.equal(used["tea-chat"], 1, JSON.stringify(used));

      // An edit through the tool changes the server's file; a refusal is text the model reads.
      const sha = (await client.readMemory("MEMORY.md")).sha256;
      const operation = { command: "insert", path: "MEMORY.md", insert_line: 0, insert_text: "- oat milk too", ...nulls(["file_text", "old_str", "new_str", "old_path", "new_path"]) };
      const outputs = [];
      const editor = new ScriptedModel([
        [functionCall("memory_read", { path: "../sessions/x.jsonl", offset: null, limit: null }, { callId: "e1" })],
        modelResponder((call) => {
          outputs.push(JSON.stringify(call.request.input));
          return [functionCall("memory_edit", { patch: null, operations: [operation], expect: [{ path: "MEMORY.md", sha256: sha }], reason: "said so" }, { callId: "e2" })];
        }),
        modelResponder((call) => {
          outputs.push(JSON.stringify(call.request.input));
          return [assistantMessage("Noted.")];
        }),
      ]);
      const writer = new Agent({ name: "writer", instructions: "Keep memory current.", model: editor, tools: memoryTools(client, { sessionId: "ts-tools-2" }) });
      const { run } = await import("@openai/agents");
      assert.equal((await run(writer, "Oat milk too.")).finalOutput, "Noted.");
      assert.match(outputs[0], /Error \(invalid_request\)/);
      assert.match(outputs[1], /The edit is published: modified MEMORY\.md/);
      assert.equal((await client.readMemory("MEMORY.md", { limit: 1 })).text, "- oat milk too\n");
      assert.deepEqual(memoryTools(client, { edit: false }).map((t) => t.name), ["memory_list", "memory_read", "memory_search"]);
    } finally {
      await server.stop();
    }
  });
}
