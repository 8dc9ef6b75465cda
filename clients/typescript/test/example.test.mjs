// The offline example runs as a user would run it: against a memoryd with the
// extractive provider, and its second session answers from memory.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startMemoryd } from "./harness.mjs";

const example = fileURLToPath(new URL("../dist-examples/agent-with-memory.js", import.meta.url));

test("the agent-with-memory example remembers across sessions", async () => {
  const server = await startMemoryd("sqlite");
  try {
    const { apiKey } = await server.tenant();
    const { stdout } = await promisify(execFile)(process.execPath, [example], {
      env: { ...process.env, MEMORYD_URL: server.baseUrl, MEMORYD_API_KEY: apiKey },
      timeout: 120_000,
    });
    assert.match(stdout, /first session agent-[0-9a-f]{32}: closed/);
    assert.match(stdout, /second session answers: A pot of genmaicha, as you like it\./);
  } finally {
    await server.stop();
  }
});
