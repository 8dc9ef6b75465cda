// The committed types are what openapi-typescript makes of openapi.yaml now.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

test("src/schema.ts is generated from openapi.yaml", () => {
  const out = join(mkdtempSync(join(tmpdir(), "memoryd-schema-")), "schema.ts");
  const cli = join(root, "node_modules", "openapi-typescript", "bin", "cli.js");
  execFileSync(process.execPath, [cli, join(root, "..", "..", "openapi.yaml"), "-o", out], { stdio: "ignore" });
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
