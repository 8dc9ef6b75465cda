// Webhooks and the event stream through the client, against the real binary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { ConflictError, Memoryd, NotFoundError } from "../dist/index.js";
import { backends, startMemoryd } from "./harness.mjs";

/** A local endpoint that answers 200 and keeps what it got. */
async function receiver() {
  const got = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(200).end();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const until = async (count) => {
    const started = Date.now();
    while (got.length < count) {
      assert.ok(Date.now() - started < 20_000, `received ${got.length} of ${count}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return got;
  };
  return { url: `http://127.0.0.1:${server.address().port}/hook`, got, until, close: () => server.close() };
}

/** The Standard Webhooks check, from the specification. */
function verifies(secret, { headers, body }) {
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const signed = `${headers["webhook-id"]}.${headers["webhook-timestamp"]}.${body}`;
  const expected = `v1,${createHmac("sha256", key).update(signed).digest("base64")}`;
  return headers["webhook-signature"].split(" ").includes(expected);
}

for (const backend of backends) {
  test(`webhooks and the event stream (${backend})`, async () => {
    const server = await startMemoryd(backend);
    const hooks = await receiver();
    try {
      const { tenantId, apiKey } = await server.tenant();
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey });
      const hook = await client.createWebhook({ url: hooks.url, events: ["job.failed"], description: "ts" });
      assert.match(hook.secret, /^whsec_/);
      assert.deepEqual((await client.listWebhooks()).map((w) => w.webhook_id), [hook.webhook_id]);
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push(await client.testWebhook(hook.webhook_id));
      const got = await hooks.until(3);
      assert.deepEqual(got.map((r) => r.headers["webhook-id"]), ids);
      assert.ok(got.every((r) => verifies(hook.secret, r)));

      // Test events are for their endpoint alone: the stream has the closes.
      for (const name of ["e0", "e1", "e2"]) {
        await client.openSession({ sessionId: name });
        await client.closeSession(name);
      }
      const fromStart = `evt_${"0".repeat(16)}_${tenantId.replaceAll("-", "").slice(0, 12)}`;
      const all = [];
      for await (const event of client.events({ lastEventId: fromStart })) {
        all.push(event);
        if (all.length === 3) break;
      }
      assert.deepEqual(all.map((e) => [e.type, e.data.session_id]), [
        ["session.closed", "e0"],
        ["session.closed", "e1"],
        ["session.closed", "e2"],
      ]);
      const controller = new AbortController();
      const resumed = [];
      for await (const event of client.events({ lastEventId: all[0].id, signal: controller.signal })) {
        resumed.push(event);
        if (resumed.length === 2) break;
      }
      assert.deepEqual(resumed.map((e) => e.id), all.slice(1).map((e) => e.id));

      // The receiver has a request before memoryd records its answer.
      let deliveries = await client.webhookDeliveries(hook.webhook_id, { limit: 2 });
      for (const deadline = Date.now() + 10_000; deliveries.some((d) => d.state !== "succeeded") && Date.now() < deadline; ) {
        await new Promise((r) => setTimeout(r, 50));
        deliveries = await client.webhookDeliveries(hook.webhook_id, { limit: 2 });
      }
      assert.equal(deliveries.length, 2);
      assert.ok(deliveries.every((d) => d.state === "succeeded" && d.last_status === 200));
      const rotated = await client.rotateWebhook(hook.webhook_id);
      await client.testWebhook(hook.webhook_id);
      const [, , , fourth] = await hooks.until(4);
      assert.ok(verifies(hook.secret, fourth) && verifies(rotated.secret, fourth));
      const changed = await client.updateWebhook(hook.webhook_id, { events: ["*"], description: null });
      assert.deepEqual([changed.events, changed.description, changed.state], [["*"], null, "enabled"]);
      assert.equal((await client.updateWebhook(hook.webhook_id, { state: "disabled" })).state, "disabled");
      await assert.rejects(client.testWebhook(hook.webhook_id), ConflictError);
      await client.deleteWebhook(hook.webhook_id);
      await assert.rejects(client.getWebhook(hook.webhook_id), NotFoundError);
    } finally {
      hooks.close();
      await server.stop();
    }
  });
}
