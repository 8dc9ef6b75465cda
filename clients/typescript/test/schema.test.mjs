// The committed types are what openapi-typescript makes of openapi.yaml now.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

test("src/schema.ts is generated from openapi.yaml", () => {
  const out = join(mkdtempSync(join(tmpdir(), "memoryd-schema-")), "schema.ts");
  const cli = join(root, "node_modules", "openapi-typescript", "bin", "cli.js");
  execFileSync(process.execPath, [cli, join(root, "..", "..", "openapi.yaml"), "--empty-objects-unknown", "-o", out], { stdio: "ignore" });
  assert.equal(readFileSync(join(root, "src", "schema.ts"), "utf8"), readFileSync(out, "utf8"), "run `npm run generate`");
});

test("every route of openapi.yaml has a method", () => {
  const spec = readFileSync(join(root, "..", "..", "openapi.yaml"), "utf8");
  const shape = (path) => path.replace(/\$?\{[^}]*\}/g, "{}");
  const routes = [...spec.matchAll(/^  (\/[^:]*):$/gm)].map((m) => shape(m[1]));
  const source = readFileSync(join(root, "src", "client.ts"), "utf8");
  const called = new Set();
  for (const m of source.matchAll(/path: [`"](\/[^`"]*)[`"]/g)) called.add(shape(m[1]));
  for (const m of source.matchAll(/this\.memoryPath\([^,]+, [^,]+, [`"]([^`"]+)[`"]\)/g)) {
    called.add(shape(`/v1/workspaces/{}/layouts/{}/${m[1]}`));
  }
  const missing = routes.filter((route) => !called.has(route));
  assert.deepEqual(missing, []);
});

test("the generated types take real data (free-form objects are unknown, not never) and require what memoryd always answers", () => {
  const dir = mkdtempSync(join(tmpdir(), "memoryd-types-"));
  const file = join(dir, "check.ts");
  const client = JSON.stringify(join(root, "src", "client.js"));
  writeFileSync(
    file,
    `import type { Schemas, StreamedEvent } from ${client};
const segment: Schemas["Segment"] = {
  rollout_id: "chat-1",
  input: [{ role: "user", content: "hi" }],
  generated_items: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "hello" }] }],
};
const session: Schemas["Session"] = {
  session_id: "s",
  workspace: "default",
  state: "open",
  metadata: { user: "u1" },
  memory_status: null,
  created_at: "2026-12-03T00:00:00Z",
  closed_at: null,
  rollouts: [],
  jobs: [],
};
// @ts-expect-error what memoryd always answers is required: a job without its state is no job
const job: Schemas["Job"] = { job_id: "j", kind: "phase_one" };
// @ts-expect-error states are the schema's literals, not any string
const state: Schemas["JobState"] = "paused";
// Events are a union discriminated by type: each type's data has its own fields.
function sessionOf(event: StreamedEvent): string | undefined {
  if (event.type === "session.closed") return event.data.session_id;
  // @ts-expect-error a run's data names no session
  if (event.type === "run.succeeded") return event.data.session_id;
  return undefined;
}
void segment;
void session;
void job;
void state;
void sessionOf;
`,
  );
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext", file], {
    stdio: "pipe",
  });
});
