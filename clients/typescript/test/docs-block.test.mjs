// docs/api.md's openai-agents (TypeScript) block, run as written: the agent's
// model is the SDK's default (the OpenAI Responses API, reached through
// OPENAI_BASE_URL as a user's proxy would be), scripted here; the memory it
// finds comes from memoryd over MCP.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Memoryd } from "../dist/index.js";
import { startMemoryd } from "./harness.mjs";

const docs = fileURLToPath(new URL("../../../docs/api.md", import.meta.url));

/** The `ts` block that follows the "openai-agents (TypeScript" line. */
function documentedBlock() {
  const text = readFileSync(docs, "utf8");
  const at = text.indexOf("openai-agents (TypeScript");
  assert.ok(at >= 0, "docs/api.md names the TypeScript block");
  const block = /```ts\n([\s\S]*?)```/.exec(text.slice(at));
  assert.ok(block, "a ts block follows");
  return block[1];
}

const usage = { input_tokens: 1, output_tokens: 1, total_tokens: 2, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } };

function response(output) {
  return { id: `resp_${Date.now()}`, object: "response", created_at: 0, status: "completed", model: "scripted", output, usage };
}

/**
 * A Responses endpoint that first asks for `memory_search`, then answers
 * with what the tool gave it; each request is kept for the test to read.
 */
async function scriptedModel() {
  const requests = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      const request = JSON.parse(body);
      requests.push({ path: req.url, request });
      const input = Array.isArray(request.input) ? request.input : [];
      const result = input.find((item) => item.type === "function_call_output");
      const output = result
        ? [{ type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: `From memory: ${JSON.stringify(result.output)}`, annotations: [] }] }]
        : [{ type: "function_call", id: "fc_1", call_id: "call_1", name: "memory_search", arguments: JSON.stringify({ query: "runner image" }), status: "completed" }];
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(response(output)));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, requests, baseUrl: `http://127.0.0.1:${server.address().port}/v1` };
}

test("docs/api.md's openai-agents TypeScript block answers from memory over MCP", async () => {
  const server = await startMemoryd("sqlite");
  const model = await scriptedModel();
  // Inside the package, so that the block's "@memoryd/client" resolves to this package itself.
  const script = fileURLToPath(new URL(`../docs-block-${process.pid}.mjs`, import.meta.url));
  try {
    const { apiKey } = await server.tenant();
    const client = new Memoryd({ baseUrl: server.baseUrl, apiKey });
    const memory = "# Task Group: CI\n\n## Task: pin the runner\n\n- We pin the runner image ubuntu-24.04-arm64.\n";
    await client.openSession({ sessionId: "setup", workspace: "alice" });
    const edit = await client.editMemory({ operations: [{ command: "create", path: "MEMORY.md", file_text: memory }] }, { workspace: "alice", wait: 30 });
    assert.deepEqual(edit.changes, [{ path: "MEMORY.md", change: "added" }], JSON.stringify(edit));
    writeFileSync(script, documentedBlock());
    const env = {
      ...process.env,
      MEMORYD_URL: server.baseUrl,
      MEMORYD_API_KEY: apiKey,
      OPENAI_API_KEY: "sk-scripted",
      OPENAI_BASE_URL: model.baseUrl,
      OPENAI_AGENTS_DISABLE_TRACING: "1",
    };
    const { stdout } = await promisify(execFile)(process.execPath, [script], { env, timeout: 120_000 });
    assert.match(stdout, /From memory: .*MEMORY\.md:\d+: - We pin the runner image ubuntu-24\.04-arm64\./);
    assert.equal(model.requests.length, 2, "one tool call, then the answer");
    const tools = model.requests[0].request.tools.map((t) => t.name);
    assert.ok(tools.includes("memory_search") && tools.includes("memory_read"), tools.join(","));
  } finally {
    rmSync(script, { force: true });
    model.server.close();
    await server.stop();
  }
});
