// The client's transport against local stubs that inject the faults a real
// memoryd cannot be made to show on demand.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { ConnectionFailedError, Memoryd, UnavailableError } from "../dist/index.js";

/** A stub server answering with `handler`; its base URL and a close. */
async function stub(handler) {
  const server = createServer(handler);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { base: `http://127.0.0.1:${server.address().port}`, close: () => server.closeAllConnections() || server.close() };
}

test("an undefined maxRetries keeps the default instead of retrying forever", async () => {
  let attempts = 0;
  const server = await stub((_req, res) => {
    attempts++;
    res.writeHead(503, { "content-type": "application/problem+json" }).end(JSON.stringify({ code: "unavailable", status: 503 }));
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", retry: { maxRetries: undefined, baseDelayMs: 1, maxDelayMs: 2 } });
    await assert.rejects(client.getJob("j"), UnavailableError);
    assert.equal(attempts, 4, "the first attempt and the default 3 retries");
  } finally {
    server.close();
  }
});

test("a POST that is not idempotent is sent once over a broken connection", async () => {
  const paths = [];
  const server = await stub((req) => {
    paths.push(req.url);
    req.socket.destroy();
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", retry: { baseDelayMs: 1, maxDelayMs: 2 } });
    for (const call of [
      () => client.retryJob("job-1"),
      () => client.restoreRun("run-1"),
      () => client.importWorkspace("w", new Uint8Array([1, 2, 3])),
    ]) {
      paths.length = 0;
      await assert.rejects(call(), ConnectionFailedError);
      assert.equal(paths.length, 1, paths.join(" "));
    }
    paths.length = 0;
    await assert.rejects(client.getJob("job-2"), ConnectionFailedError);
    assert.ok(paths.length > 1, "a read is retried");
  } finally {
    server.close();
  }
});

test("an export longer than the attempt's timeout completes; a stalled one fails", async () => {
  const server = await stub((req, res) => {
    res.writeHead(200, { "content-type": "application/gzip" });
    const stall = req.url.includes("stalled");
    let sent = 0;
    const timer = setInterval(() => {
      if (stall && sent === 1) return; // the first chunk, then nothing
      res.write(Buffer.alloc(4096, sent));
      if (++sent === 8) {
        clearInterval(timer);
        res.end();
      }
    }, 100);
    res.on("close", () => clearInterval(timer));
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", timeoutMs: 300 });
    const started = Date.now();
    let bytes = 0;
    for await (const chunk of await client.exportWorkspace("slow")) bytes += chunk.length;
    assert.equal(bytes, 8 * 4096);
    assert.ok(Date.now() - started > 600, "it ran past the 300 ms attempt timeout");
    const stalled = await client.exportWorkspace("stalled");
    await assert.rejects(
      (async () => {
        for await (const _ of stalled);
      })(),
      ConnectionFailedError,
    );
  } finally {
    server.close();
  }
});

test("breaking out of events() closes its connection", async () => {
  let closed = false;
  const server = await stub((req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(`id: evt_1\nevent: session.closed\ndata: ${JSON.stringify({ type: "session.closed", timestamp: "t", data: {} })}\n\n`);
    req.socket.on("close", () => {
      closed = true;
    });
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k" });
    for await (const event of client.events()) {
      assert.equal(event.id, "evt_1");
      break;
    }
    const deadline = Date.now() + 5000;
    while (!closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(closed, "the socket was closed");
  } finally {
    server.close();
  }
});

test("events() backs off on 503 and honours Retry-After, then gives up", async () => {
  const at = [];
  const server = await stub((_req, res) => {
    at.push(Date.now());
    res.writeHead(503, { "content-type": "application/problem+json", "retry-after": "1" }).end(JSON.stringify({ code: "unavailable", status: 503 }));
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", retry: { maxRetries: 1, baseDelayMs: 1 } });
    await assert.rejects(
      (async () => {
        for await (const _ of client.events());
      })(),
      UnavailableError,
    );
    assert.equal(at.length, 2, "one reconnect, then the error");
    assert.ok(at[1] - at[0] >= 950, `waited ${at[1] - at[0]} ms for Retry-After: 1`);
  } finally {
    server.close();
  }
});

test("the package says which Node it needs, and this is one", () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(pkg.engines.node, ">=20");
  assert.ok(Number(process.versions.node.split(".")[0]) >= 20);
});

test("a failed instructions lookup is remembered for the TTL", async () => {
  const { MemorydMemory } = await import("../dist/agents.js");
  let asked = 0;
  const server = await stub((_req, res) => {
    asked++;
    res.writeHead(500).end();
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", retry: { baseDelayMs: 1, maxDelayMs: 2 } });
    const warnings = [];
    const memory = new MemorydMemory(client, { instructionsTtlMs: 60_000, logger: { warn: (m) => warnings.push(m) } });
    assert.equal(await memory.memoryInstructions(), null);
    const first = asked;
    assert.ok(first >= 1);
    assert.equal(await memory.memoryInstructions(), null);
    assert.equal(asked, first, "the second turn did not ask a memoryd that is down");
    assert.equal(warnings.length, 1);
  } finally {
    server.close();
  }
});

test("verifyWebhook checks the Standard Webhooks vector and its rules", async () => {
  const { verifyWebhook, WebhookVerificationError } = await import("../dist/index.js");
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const body = '{"test": 2432232314}';
  const headers = {
    "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
    "webhook-timestamp": "1614265330",
    "webhook-signature": "v1,bm90IHRoaXMgb25l v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
  };
  const at = { nowSeconds: 1614265330 };
  assert.deepEqual(await verifyWebhook(secret, headers, body, at), { test: 2432232314 });
  assert.deepEqual(await verifyWebhook(secret, new Headers(headers), new TextEncoder().encode(body), at), { test: 2432232314 });
  await assert.rejects(verifyWebhook(secret, headers, body + " ", at), /no signature matches/);
  await assert.rejects(verifyWebhook(secret, headers, body, { nowSeconds: 1614265330 + 301 }), /tolerance/);
  await assert.rejects(verifyWebhook(secret, { ...headers, "webhook-signature": "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" }, body, at), WebhookVerificationError);
  await assert.rejects(verifyWebhook("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", headers, body, at), /whsec_/);
});

test("a gateway's 502 is retried for a read, a 500 only for a GET", async () => {
  const seen = [];
  const server = await stub((req, res) => {
    seen.push(`${req.method} ${seen.filter((s) => s.startsWith(req.method)).length}`);
    const status = req.method === "GET" && seen.length === 1 ? 502 : 500;
    res.writeHead(status, { "content-type": "application/problem+json" }).end(JSON.stringify({ code: "internal", status }));
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", retry: { maxRetries: 2, baseDelayMs: 1, maxDelayMs: 2 } });
    await assert.rejects(client.getJob("j"));
    assert.equal(seen.length, 3, "a GET: the 502 and the 500s retried");
    seen.length = 0;
    await assert.rejects(client.retryJob("j"));
    assert.equal(seen.length, 1, "a POST's 500 is not retried");
  } finally {
    server.close();
  }
});

test("an answer that is no problem document is unexpected_response, as in Python", async () => {
  const server = await stub((req, res) => res.writeHead(502, { "content-type": "text/html" }).end("<h1>Bad Gateway</h1>"));
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", retry: { maxRetries: 0 } });
    await assert.rejects(client.getJob("j"), (e) => {
      assert.deepEqual([e.status, e.code, e.detail], [502, "unexpected_response", "HTTP 502: <h1>Bad Gateway</h1>"]);
      return true;
    });
  } finally {
    server.close();
  }
});

test("a timeout is its own error, and still a ConnectionFailedError", async () => {
  const { RequestTimeoutError } = await import("../dist/index.js");
  const server = await stub((_req, res) => {
    setTimeout(() => res.writeHead(200).end("{}"), 1000);
  });
  try {
    const client = new Memoryd({ baseUrl: server.base, apiKey: "k", timeoutMs: 200, maxRetries: 0 });
    const late = await client.getJob("j").then(
      () => undefined,
      (error) => error,
    );
    assert.ok(late instanceof RequestTimeoutError && late instanceof ConnectionFailedError, String(late));
    assert.equal(late.code, "timeout");
  } finally {
    server.close();
  }
});
