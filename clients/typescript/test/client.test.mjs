import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import {
  AuthenticationError,
  ConflictError,
  ConnectionFailedError,
  ForbiddenError,
  Memoryd,
  NotFoundError,
} from "../dist/index.js";
import { backends, startMemoryd } from "./harness.mjs";

const fast = { maxRetries: 3, baseDelayMs: 10, maxDelayMs: 50, maxRetryAfterMs: 5000 };
const segmentOf = (rolloutId, text) => ({
  rollout_id: rolloutId,
  input: text,
  generated_items: [{ role: "assistant", content: `noted: ${text}` }],
  terminal_metadata: { terminal_state: "completed", has_final_output: true },
  final_output: `noted: ${text}`,
});

for (const backend of backends) {
  test(`the main job through the client (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const admin = new Memoryd({ baseUrl: server.baseUrl, adminToken: server.adminToken, retry: fast });
      const issued = await admin.createTenant("ts-main");
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey: issued.api_key, retry: fast });
      assert.deepEqual((await client.listLayouts()).map((l) => l.name), ["default"]);
      const first = await client.appendSegment("ts-s1", segmentOf("ts-chat", "I prefer green tea."));
      const second = await client.appendSegment("ts-s1", segmentOf("ts-chat", "With oat milk."));
      assert.deepEqual([first.segment_index, second.segment_index], [0, 1]);
      assert.equal(first.rollout_path, "sessions/ts-chat.jsonl");
      const closed = await client.closeSession("ts-s1", { wait: 30 });
      assert.equal(closed.state, "closed");
      const instructions = await client.getInstructions();
      assert.ok(instructions && instructions.instructions.includes("green tea"), JSON.stringify(instructions));
      const files = (await client.listFiles()).map((f) => f.path);
      assert.ok(files.includes("MEMORY.md"), files.join(", "));
      assert.ok((await client.getFile("MEMORY.md")).includes("green tea"));
      const session = await client.getSession("ts-s1");
      assert.equal(session.jobs.length >= 2, true);
      const usage = await client.usage();
      assert.equal(usage.days.at(-1).segments, 2);
      const lines = readFileSync(server.rolloutFile(issued.tenant_id, "sessions/ts-chat.jsonl"), "utf8").trim().split("\n");
      assert.equal(lines.length, 2);
    } finally {
      await server.stop();
    }
  });

  test(`the running agent's memory routes (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      await client.appendSegment("ts-agent", segmentOf("ts-chat-7", "I prefer green tea."));
      assert.equal((await client.closeSession("ts-agent", { wait: 30 })).state, "closed");
      const listed = await client.listMemory();
      assert.ok(listed.entries.some((e) => e.path === "MEMORY.md"), JSON.stringify(listed));
      const memory = await client.readMemory("memories/MEMORY.md");
      assert.ok(memory.text.includes("green tea"));
      assert.equal(memory.sha256.length, 64);
      const found = await client.searchMemory("GREEN TEA", { context: 1 });
      assert.equal(found.matches[0].path, "MEMORY.md");
      const ranked = await client.searchMemory("tea green", { mode: "ranked", limit: 1 });
      assert.equal(ranked.mode, "ranked");
      assert.ok(ranked.matches[0].text.includes("green tea"), JSON.stringify(ranked));
      await assert.rejects(client.searchMemory("tea", { mode: "semantic" }), (e) => e.code === "not_configured");
      const done = await client.editMemory({
        operations: [{ command: "insert", path: "MEMORY.md", insert_line: 0, insert_text: "- likes oat milk" }],
        expect: { "MEMORY.md": memory.sha256 },
        session_id: "ts-agent-run",
      });
      assert.deepEqual(done.changes, [{ path: "MEMORY.md", change: "modified" }]);
      assert.equal((await client.readMemory("MEMORY.md", { limit: 1 })).text, "- likes oat milk\n");
      await assert.rejects(
        client.editMemory({ patch: "*** Begin Patch\n*** Delete File: MEMORY.md\n*** End Patch", expect: { "MEMORY.md": memory.sha256 } }),
        (e) => e instanceof ConflictError && e.code === "memory_changed",
      );
    } finally {
      await server.stop();
    }
  });

  test(`the MCP endpoint answers an MCP client (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      const { url, headers } = client.mcpEndpoint({ sessionId: "ts-run" });
      assert.equal(url, `${server.baseUrl}/v1/mcp?session_id=ts-run`);
      const message = (id, method, params) =>
        fetch(url, {
          method: "POST",
          headers: { ...headers, "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18" },
          body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
        });
      const init = await message(1, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "ts", version: "1" } });
      assert.equal(init.status, 200);
      assert.equal((await init.json()).result.serverInfo.name, "memoryd");
      const tools = await (await message(2, "tools/list", {})).json();
      assert.deepEqual(tools.result.tools.map((t) => t.name), ["memory_list", "memory_read", "memory_search", "memory_edit"]);
      const unauthorized = await fetch(url, { method: "POST", body: "{}" });
      assert.equal(unauthorized.status, 401);
    } finally {
      await server.stop();
    }
  });

  test(`the iterators walk every page (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { tenantId, apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, adminToken: server.adminToken, retry: fast });
      for (let n = 0; n < 5; n++) await client.openSession({ sessionId: `page-${n}` });
      const sessions = [];
      for await (const session of client.iterSessions({ pageSize: 2 })) sessions.push(session.session_id);
      assert.deepEqual([...sessions].sort(), [0, 1, 2, 3, 4].map((n) => `page-${n}`));
      assert.deepEqual(sessions, (await client.listSessions({ limit: 100 })).sessions.map((s) => s.session_id), "the same order");
      const tenants = [];
      for await (const tenant of client.iterTenants({ pageSize: 1 })) tenants.push(tenant.tenant_id);
      assert.ok(tenants.includes(tenantId) && new Set(tenants).size === tenants.length);
    } finally {
      await server.stop();
    }
  });

  test(`scoped keys: one key per end user (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const admin = new Memoryd({ baseUrl: server.baseUrl, adminToken: server.adminToken, retry: fast });
      const issued = await admin.createTenant("ts-scoped");
      const reader = await admin.issueKey(issued.tenant_id, { name: "dashboard", permissions: ["read"] });
      assert.deepEqual([reader.workspaces, reader.permissions], ["*", ["read"]]);
      const owner = new Memoryd({ baseUrl: server.baseUrl, apiKey: issued.api_key, retry: fast });
      const until = new Date(Date.now() + 86_400_000);
      const alice = await owner.createKey({ name: "alice", workspaces: ["ts-alice"], permissions: ["ingest", "read"], expiresAt: until });
      assert.equal(new Date(alice.expires_at).getTime(), until.getTime());
      assert.deepEqual([alice.workspaces, alice.permissions], [["ts-alice"], ["ingest", "read"]]);
      const listed = (await owner.listKeys()).keys;
      assert.deepEqual(listed.map((k) => k.name), ["alice", "dashboard", null], "newest first");
      assert.equal(listed[0].created_by, listed[2].key_id);
      const first = await owner.listKeys({ limit: 1 });
      assert.deepEqual([first.keys.length, typeof first.next_cursor], [1, "string"]);
      const runtime = new Memoryd({ baseUrl: server.baseUrl, apiKey: alice.api_key, retry: fast });
      await runtime.openSession({ sessionId: "ts-a1", workspace: "ts-alice" });
      await assert.rejects(runtime.openSession({ sessionId: "ts-b1", workspace: "ts-bob" }), (e) => {
        assert.ok(e instanceof ForbiddenError);
        assert.deepEqual([e.status, e.code], [403, "forbidden"]);
        return true;
      });
      await assert.rejects(runtime.getInstructions({ workspace: "ts-bob" }), NotFoundError);
      await assert.rejects(runtime.createKey({ workspaces: "*", permissions: ["read"] }), ForbiddenError);
      await owner.deleteKey(alice.key_id);
      await assert.rejects(owner.deleteKey(alice.key_id), NotFoundError);
      await assert.rejects(runtime.listSessions(), AuthenticationError);
      assert.deepEqual((await admin.tenantKeys(issued.tenant_id)).keys.map((k) => k.name), ["dashboard", null]);
    } finally {
      await server.stop();
    }
  });

  test(`errors carry status, code and request id (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const { apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey, retry: fast });
      await assert.rejects(client.getJob("00000000-0000-0000-0000-000000000000"), (e) => {
        assert.ok(e instanceof NotFoundError);
        assert.equal(e.status, 404);
        assert.equal(e.code, "not_found");
        assert.match(e.requestId, /^[0-9a-f-]{36}$/);
        return true;
      });
      await client.appendSegment("ts-k", segmentOf("k", "hello"), { idempotencyKey: "k-1" });
      await assert.rejects(client.appendSegment("ts-k", segmentOf("k", "other"), { idempotencyKey: "k-1" }), (e) => {
        assert.ok(e instanceof ConflictError);
        assert.equal(e.code, "idempotency_conflict");
        return true;
      });
      const stranger = new Memoryd({ baseUrl: server.baseUrl, apiKey: "mem_nobody", retry: fast });
      await assert.rejects(stranger.listLayouts(), AuthenticationError);
      const nowhere = new Memoryd({ baseUrl: "http://127.0.0.1:9", apiKey, retry: { ...fast, maxRetries: 1 } });
      await assert.rejects(nowhere.listLayouts(), ConnectionFailedError);
    } finally {
      await server.stop();
    }
  });
}

test("a retried append carries one idempotency key and the file holds its line once", async () => {
  const server = await startMemoryd("sqlite");
  // A proxy that passes each append to memoryd but answers the first two with 503.
  const seen = [];
  let faults = 2;
  const proxy = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const headers = { ...req.headers };
    delete headers.host;
    delete headers["content-length"];
    const answer = await fetch(server.baseUrl + req.url, {
      method: req.method,
      headers,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    const body = Buffer.from(await answer.arrayBuffer());
    if (req.url.includes("/segments")) {
      seen.push(req.headers["idempotency-key"]);
      if (faults > 0) {
        faults -= 1;
        res.writeHead(503, { "content-type": "application/problem+json", "retry-after": "0" });
        res.end(JSON.stringify({ status: 503, code: "unavailable", detail: "injected" }));
        return;
      }
    }
    res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "application/json" });
    res.end(body);
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const { tenantId, apiKey } = await server.tenant();
    const client = new Memoryd({ baseUrl: `http://127.0.0.1:${proxy.address().port}`, apiKey, retry: fast });
    const appended = await client.appendSegment("ts-retry", segmentOf("once", "only once"));
    assert.equal(seen.length, 3);
    assert.equal(new Set(seen).size, 1);
    assert.ok(seen[0]);
    assert.equal(appended.segment_index, 0);
    const lines = readFileSync(server.rolloutFile(tenantId, appended.rollout_path), "utf8").trim().split("\n");
    assert.equal(lines.length, 1);
  } finally {
    proxy.close();
    await server.stop();
  }
});

test("a call's timeout bounds its retries, and an abort stops it", async () => {
  const stub = createServer((_req, res) => {
    res.writeHead(503, { "retry-after": "1", "content-type": "application/problem+json" });
    res.end(JSON.stringify({ status: 503, code: "unavailable", detail: "down" }));
  });
  await new Promise((r) => stub.listen(0, "127.0.0.1", r));
  try {
    const client = new Memoryd({ baseUrl: `http://127.0.0.1:${stub.address().port}`, apiKey: "k", retry: { ...fast, maxRetries: 10 } });
    const started = Date.now();
    await assert.rejects(client.listLayouts({ timeoutMs: 1500 }), (e) => e.status === 503);
    assert.ok(Date.now() - started < 2500, "the whole call, retries included, stops near its timeout");
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("stop")), 200);
    await assert.rejects(client.listLayouts({ signal: controller.signal }), /stop/);
  } finally {
    stub.close();
  }
});
