// The package as it would be published: `npm pack`, installed into a fresh
// directory, imported by name and type-checked by a consumer.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const tsc = join(packageDir, "node_modules", "typescript", "bin", "tsc");

test("npm pack makes a package that installs and type-checks in a fresh directory", () => {
  const dir = mkdtempSync(join(tmpdir(), "memoryd-pack-"));
  try {
    const packed = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], { cwd: packageDir, encoding: "utf8" }),
    );
    const files = packed[0].files.map((f) => f.path);
    for (const expected of ["dist/index.js", "dist/index.d.ts", "dist/agents.js", "dist/agents.d.ts", "README.md", "package.json"]) {
      assert.ok(files.includes(expected), `${expected} missing from ${files.join(", ")}`);
    }
    assert.ok(!files.some((f) => f.startsWith("src/") || f.startsWith("test/")), files.join(", "));

    const consumer = join(dir, "consumer");
    execFileSync("mkdir", ["-p", consumer]);
    writeFileSync(join(consumer, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", join(dir, packed[0].filename)], { cwd: consumer });
    const loaded = execFileSync(
      process.execPath,
      ["--input-type=module", "-e", "const m = await import('@memoryd/client'); console.log(typeof m.Memoryd, typeof m.MemorydError);"],
      { cwd: consumer, encoding: "utf8" },
    );
    assert.equal(loaded.trim(), "function function");

    writeFileSync(
      join(consumer, "use.ts"),
      [
        'import { Memoryd, NotFoundError } from "@memoryd/client";',
        'import type { Schemas } from "@memoryd/client";',
        'const client = new Memoryd({ baseUrl: "http://127.0.0.1:8080", apiKey: "mk_x" });',
        'export const closing: Promise<Schemas["CloseResult"]> = client.closeSession("s1", { wait: 5 });',
        "export const isMissing = (e: unknown): boolean => e instanceof NotFoundError && e.status === 404;",
        "",
      ].join("\n"),
    );
    // A Node consumer's configuration: no DOM library, Node's own types (from this package's dev tree).
    const compilerOptions = {
      strict: true,
      noEmit: true,
      module: "NodeNext",
      moduleResolution: "NodeNext",
      target: "ES2022",
      lib: ["ES2022"],
      typeRoots: [join(packageDir, "node_modules", "@types")],
      types: ["node"],
    };
    writeFileSync(join(consumer, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["use.ts"] }));
    execFileSync(process.execPath, [tsc, "-p", consumer], { cwd: consumer, encoding: "utf8" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
