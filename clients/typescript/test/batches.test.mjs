import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { BadRequestError, BufferedAppendError, ConflictError, Memoryd, SegmentBuffer } from "../dist/index.js";
import { backends, startMemoryd } from "./harness.mjs";

const fast = { maxRetries: 3, baseDelayMs: 10, maxDelayMs: 50, maxRetryAfterMs: 5000 };
const segmentOf = (rolloutId, text) => ({ rollout_id: rolloutId, input: text, final_output: "ok" });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

for (const backend of backends) {
  test(`a batch lands in order, a bad one names its segment, a buffer keeps order and surfaces a failure (${backend})`, async () => {
    const server = await startMemoryd(backend);
    try {
      const admin = new Memoryd({ baseUrl: server.baseUrl, adminToken: server.adminToken, retry: fast });
      const issued = await admin.createTenant("ts-batch");
      const client = new Memoryd({ baseUrl: server.baseUrl, apiKey: issued.api_key, retry: fast });
      const texts = (path) =>
        readFileSync(server.rolloutFile(issued.tenant_id, path), "utf8")
          .trim()
          .split("\n")
          .map((line) => JSON.parse(line).input[0].content);

      const answer = await client.appendSegments("ts-b", [segmentOf("b1", "one"), segmentOf("b2", "two"), segmentOf("b1", "three")]);
      assert.deepEqual(
        answer.receipts.map((r) => [r.rollout_id, r.segment_index]),
        [["b1", 0], ["b2", 0], ["b1", 1]],
      );
      assert.deepEqual(texts("sessions/b1.jsonl"), ["one", "three"]);
      const bad = { ...segmentOf("b1", "bad"), terminal_metadata: { terminal_state: "??" } };
      await assert.rejects(client.appendSegments("ts-b", [segmentOf("b1", "fine"), bad]), (e) => {
        assert.ok(e instanceof BadRequestError);
        assert.deepEqual([e.code, e.index], ["invalid_segment", 1]);
        return true;
      });
      assert.deepEqual(texts("sessions/b1.jsonl"), ["one", "three"], "nothing of it was written");

      const buffer = new SegmentBuffer(client, "ts-buf", { maxSegments: 3, maxDelayMs: 2 });
      for (let i = 0; i < 10; i++) {
        await buffer.append(segmentOf("buf", `s${i}`));
        if (i % 4 === 0) await sleep(10);
      }
      await buffer.close();
      assert.equal(buffer.appended, 10);
      await assert.rejects(buffer.append(segmentOf("buf", "after close")), /closed/);
      assert.deepEqual(texts("sessions/buf.jsonl"), Array.from({ length: 10 }, (_, i) => `s${i}`));

      await client.closeSession("ts-buf");
      const late = new SegmentBuffer(client, "ts-buf", { maxDelayMs: 1 });
      await late.append(segmentOf("buf", "late"));
      await sleep(200);
      await assert.rejects(late.append(segmentOf("buf", "later")), (e) => {
        assert.ok(e instanceof BufferedAppendError && e.cause instanceof ConflictError);
        assert.equal(e.code, "session_closed");
        assert.deepEqual(e.batch.map((s) => s.input), ["late"]);
        assert.ok(e.idempotencyKey);
        return true;
      });
      await late.close();
    } finally {
      await server.stop();
    }
  });
}
