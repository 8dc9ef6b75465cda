// Starts the real memoryd binary (MEMORYD_BIN) for a test, on SQLite or on a
// schema of its own in MEMORYD_TEST_DATABASE_URL's Postgres.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on("error", reject);
  });
}

/** The backends to run on: SQLite always, Postgres when a server is given. */
export const backends = process.env.MEMORYD_TEST_DATABASE_URL ? ["sqlite", "postgres"] : ["sqlite"];

export async function startMemoryd(backend, extraEnv = {}) {
  const bin = process.env.MEMORYD_BIN;
  if (!bin) throw new Error("MEMORYD_BIN must name the memoryd binary");
  const dir = mkdtempSync(join(tmpdir(), "memoryd-ts-"));
  const port = await freePort();
  const adminToken = randomUUID().replaceAll("-", "");
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("MEMORYD_") && k !== "DATABASE_URL"));
  Object.assign(env, {
    MEMORYD_LISTEN: `127.0.0.1:${port}`,
    MEMORYD_DATA_DIR: join(dir, "data"),
    MEMORYD_ADMIN_TOKEN: adminToken,
    MEMORYD_LLM_PROVIDER: "extractive",
    MEMORYD_MIN_FREE_BYTES: "0",
    MEMORYD_LOG: "warn",
    // The tests' webhook receivers listen on plain http on loopback.
    MEMORYD_WEBHOOK_ALLOW_HTTP: "true",
    MEMORYD_WEBHOOK_ALLOW_PRIVATE: "true",
    ...extraEnv,
  });
  let dropSchema = () => {};
  if (backend === "postgres") {
    const admin = process.env.MEMORYD_TEST_DATABASE_URL;
    const schema = `ts_${randomUUID().replaceAll("-", "")}`;
    execFileSync("psql", [admin, "-qc", `CREATE SCHEMA ${schema}`]);
    env.DATABASE_URL = `${admin}${admin.includes("?") ? "&" : "?"}options=-c%20search_path%3D${schema}`;
    dropSchema = () => {
      try {
        execFileSync("psql", [admin, "-qc", `DROP SCHEMA ${schema} CASCADE`], { stdio: "ignore" });
      } catch {
        // Left for the database's own cleanup.
      }
    };
  }
  const child = spawn(bin, ["serve"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr.on("data", (chunk) => (log += chunk));
  const baseUrl = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    try {
      if ((await fetch(`${baseUrl}/readyz`)).status === 200) break;
    } catch {
      // Not listening yet.
    }
    if (child.exitCode !== null || Date.now() - started > 30_000) {
      child.kill("SIGKILL");
      throw new Error(`memoryd did not start:\n${log.slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    baseUrl,
    adminToken,
    dataDir: join(dir, "data"),
    async tenant() {
      const res = await fetch(`${baseUrl}/v1/admin/tenants`, {
        method: "POST",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "ts" }),
      });
      const body = await res.json();
      return { tenantId: body.tenant_id, apiKey: body.api_key };
    },
    rolloutFile(tenantId, rolloutPath, workspace = "default") {
      return join(dir, "data", "workspaces", tenantId, workspace, rolloutPath);
    },
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      dropSchema();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
