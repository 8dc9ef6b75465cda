/**
 * The memoryd client: one method per route of memoryd's `openapi.yaml`,
 * named as the Python client's in camelCase. Each method describes its call
 * once; `send` makes it, retrying what is transient: connection failures of
 * calls that are safe to repeat, 429, 503 and 507, with full-jitter backoff
 * never shorter than the `Retry-After` memoryd asked for. Every append
 * carries an `Idempotency-Key`, the same on each of its retries, so a retry
 * never writes a line twice.
 */

import type { components } from "./schema.js";
import type { EventData, WebhookEvent } from "./webhooks.js";
import { ConnectionFailedError, MemorydError, RequestTimeoutError, errorFromResponse } from "./errors.js";

export type Schemas = components["schemas"];
type S = Schemas;

/** How transient failures are retried. */
export interface RetryPolicy {
  /** Retries after the first attempt (default 3). */
  maxRetries: number;
  /** The first backoff's upper bound (default 500 ms); it doubles per retry. */
  baseDelayMs: number;
  /** The largest backoff (default 8 s). */
  maxDelayMs: number;
  /** A `Retry-After` longer than this is not waited for: the error is thrown (default 60 s). */
  maxRetryAfterMs: number;
}

export interface MemorydOptions {
  /** Default `MEMORYD_URL`, else `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** A tenant's API key; default `MEMORYD_API_KEY`. */
  apiKey?: string;
  /** For the admin routes only; default `MEMORYD_ADMIN_TOKEN`. */
  adminToken?: string;
  /** Each attempt's timeout (default 30 s). */
  timeoutMs?: number;
  maxRetries?: number;
  retry?: Partial<RetryPolicy>;
  /** The `fetch` to use (default the global one). */
  fetch?: typeof fetch;
}

/** Per call: an `AbortSignal`, and a timeout for the whole call, its retries included. */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

type Query = Record<string, string | number | boolean | undefined | null>;

/** What a key reaches: `"*"` or workspace names, its permissions, and optionally a name and an expiry. */
export interface KeyScope {
  workspaces: S["KeyWorkspaces"];
  permissions: S["Permission"][];
  name?: string;
  expiresAt?: Date | string;
}

function keyBody(scope: Partial<KeyScope>): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (scope.name !== undefined) body.name = scope.name;
  if (scope.workspaces !== undefined) body.workspaces = scope.workspaces;
  if (scope.permissions !== undefined) body.permissions = scope.permissions;
  if (scope.expiresAt !== undefined) {
    body.expires_at = scope.expiresAt instanceof Date ? scope.expiresAt.toISOString() : scope.expiresAt;
  }
  return body;
}

interface Call {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Query;
  json?: unknown;
  body?: Uint8Array | Blob;
  headers?: Record<string, string>;
  admin?: boolean;
  /** Repeating it after a broken connection is harmless. */
  idempotent?: boolean;
  /** Time the server may take beyond the client's timeout (a close that waits). */
  extraTimeMs?: number;
  /**
   * The caller reads the body as a stream: the attempt's timeout ends when the
   * headers arrive, and the body has an idle timeout of the same length instead.
   */
  streaming?: boolean;
}

const RETRYABLE_STATUSES = new Set([429, 503, 507]);
const STREAM_IDLE_MS = 60_000;
const DEFAULT_POLICY: RetryPolicy = { maxRetries: 3, baseDelayMs: 500, maxDelayMs: 8000, maxRetryAfterMs: 60_000 };

/**
 * An answer worth trying again: memoryd's own transient ones (429, 503, 507);
 * a gateway's (502, 504) when repeating the call is harmless; a 500 of a read.
 */
function transient(call: Call, status: number): boolean {
  if (RETRYABLE_STATUSES.has(status)) return true;
  if (status === 502 || status === 504) return call.idempotent !== false;
  return status === 500 && call.method === "GET";
}

/** One path segment, percent-encoded: a slash in an id never becomes a path. */
export function segment(value: string): string {
  return encodeURIComponent(value);
}

function env(name: string): string | undefined {
  const process = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return process?.env?.[name];
}

function anySignal(signals: AbortSignal[]): AbortSignal {
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any(signals);
  const controller = new AbortController();
  for (const signal of signals) {
    if (signal.aborted) {
      controller.abort(signal.reason);
      break;
    }
    signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
  }
  return controller.signal;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

/** The default policy with what `given` sets to a finite number of 0 or more (undefined keeps the default). */
function mergedPolicy(given: Partial<RetryPolicy>): RetryPolicy {
  const policy = { ...DEFAULT_POLICY };
  for (const key of Object.keys(DEFAULT_POLICY) as (keyof RetryPolicy)[]) {
    const value = given[key];
    if (typeof value === "number" && Number.isFinite(value) && value >= 0) policy[key] = value;
  }
  return policy;
}

/**
 * `body` with an idle timeout: a stream that gives nothing for `idleMs`
 * errors (and its connection is cancelled) instead of hanging.
 */
function withIdleTimeout(body: ReadableStream<Uint8Array>, idleMs: number): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const idle = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new ConnectionFailedError({ status: undefined, code: "connection_failed", detail: `nothing arrived for ${idleMs} ms` })), idleMs);
      });
      try {
        const { value, done } = await Promise.race([reader.read(), idle]);
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (error) {
        await reader.cancel(error).catch(() => undefined);
        controller.error(error);
      } finally {
        clearTimeout(timer);
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

const json = <T>(response: Response): Promise<T> => response.json() as Promise<T>;
const nothing = async (): Promise<void> => undefined;
const text = (response: Response): Promise<string> => response.text();

export class Memoryd {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly adminToken: string | undefined;
  private readonly timeoutMs: number;
  private readonly policy: RetryPolicy;
  private readonly fetchImpl: typeof fetch;

  constructor(options: MemorydOptions = {}) {
    this.baseUrl = (options.baseUrl ?? env("MEMORYD_URL") ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? env("MEMORYD_API_KEY");
    this.adminToken = options.adminToken ?? env("MEMORYD_ADMIN_TOKEN");
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.policy = mergedPolicy({ ...options.retry, maxRetries: options.maxRetries ?? options.retry?.maxRetries });
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The wait before retry `attempt` (from 0), or undefined to give up. */
  private delay(attempt: number, retryAfterSeconds: number | undefined): number | undefined {
    if (attempt >= this.policy.maxRetries) return undefined;
    const retryAfter = retryAfterSeconds === undefined ? 0 : retryAfterSeconds * 1000;
    if (retryAfter > this.policy.maxRetryAfterMs) return undefined;
    const backoff = Math.random() * Math.min(this.policy.maxDelayMs, this.policy.baseDelayMs * 2 ** attempt);
    return Math.max(backoff, retryAfter);
  }

  private url(call: Call): string {
    const url = new URL(this.baseUrl + call.path);
    for (const [key, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    return url.toString();
  }

  private headers(call: Call): Record<string, string> {
    const headers: Record<string, string> = { "user-agent": "memoryd-typescript/0.1", ...call.headers };
    const token = call.admin ? this.adminToken : this.apiKey;
    if (token) headers.authorization = `Bearer ${token}`;
    return headers;
  }

  /** Makes `call`, retrying what is transient, and reads its answer with `parse`. */
  protected async send<T>(call: Call, parse: (response: Response) => Promise<T>, options: CallOptions = {}): Promise<T> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    const headers = this.headers(call);
    let body: BodyInit | undefined = call.body as BodyInit | undefined;
    if (call.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(call.json);
    }
    for (let attempt = 0; ; attempt++) {
      const remaining = deadline === undefined ? Infinity : deadline - Date.now();
      const attemptTimeout = Math.max(1, Math.min(this.timeoutMs + (call.extraTimeMs ?? 0), remaining));
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(new DOMException("The attempt timed out", "TimeoutError")), attemptTimeout);
      const signals = [timeout.signal];
      if (options.signal) signals.push(options.signal);
      let response: Response;
      try {
        response = await this.fetchImpl(this.url(call), {
          method: call.method,
          headers,
          body,
          signal: anySignal(signals),
        });
        if (call.streaming) clearTimeout(timer);
      } catch (caught) {
        clearTimeout(timer);
        if (options.signal?.aborted) throw options.signal.reason ?? caught;
        const detail = caught instanceof Error ? `${caught.name}: ${caught.message}` : String(caught);
        const error = timeout.signal.aborted
          ? new RequestTimeoutError({ status: undefined, code: "timeout", detail: `no answer within ${attemptTimeout} ms` })
          : new ConnectionFailedError({ status: undefined, code: "connection_failed", detail });
        // A call that may have taken effect is repeated only if that is harmless.
        if (call.idempotent === false) throw error;
        await this.wait(attempt, error, deadline, options.signal);
        continue;
      }
      let error: MemorydError;
      try {
        if (response.status < 400) return await parse(response);
        error = await errorFromResponse(response);
      } finally {
        clearTimeout(timer);
      }
      if (!transient(call, response.status)) throw error;
      await this.wait(attempt, error, deadline, options.signal);
    }
  }

  /** Waits before the next attempt, or throws `error` when no attempt is left. */
  private async wait(attempt: number, error: MemorydError, deadline: number | undefined, signal?: AbortSignal): Promise<void> {
    const wait = this.delay(attempt, error.retryAfter);
    if (wait === undefined || (deadline !== undefined && Date.now() + wait >= deadline)) throw error;
    await sleep(wait, signal);
  }

  // -- operations ------------------------------------------------------------
  health(options?: CallOptions): Promise<void> {
    return this.send({ method: "GET", path: "/healthz" }, nothing, options);
  }

  ready(options?: CallOptions): Promise<void> {
    return this.send({ method: "GET", path: "/readyz" }, nothing, options);
  }

  openapi(options?: CallOptions): Promise<string> {
    return this.send({ method: "GET", path: "/openapi.yaml" }, text, options);
  }

  metrics(options?: CallOptions): Promise<string> {
    return this.send({ method: "GET", path: "/metrics" }, text, options);
  }

  // -- tenants and keys (admin) -------------------------------------------------
  createTenant(name: string, options?: CallOptions): Promise<S["IssuedKey"]> {
    const call: Call = { method: "POST", path: "/v1/admin/tenants", json: { name }, admin: true, idempotent: false };
    return this.send(call, json<S["IssuedKey"]>, options);
  }

  /** Another key for the tenant (shown once): every workspace and permission unless `scope` narrows it. */
  issueKey(tenantId: string, scope: Partial<KeyScope> = {}, options?: CallOptions): Promise<S["IssuedKey"]> {
    const path = `/v1/admin/tenants/${segment(tenantId)}/keys`;
    const call: Call = { method: "POST", path, json: keyBody(scope), admin: true, idempotent: false };
    return this.send(call, json<S["IssuedKey"]>, options);
  }

  /** One page of the tenant's live keys with their scopes, newest first (admin); pass `next_cursor` as `cursor`. */
  tenantKeys(
    tenantId: string,
    page: { limit?: number; cursor?: string } = {},
    options?: CallOptions,
  ): Promise<S["KeyList"]> {
    const call: Call = { method: "GET", path: `/v1/admin/tenants/${segment(tenantId)}/keys`, query: page, admin: true };
    return this.send(call, json<S["KeyList"]>, options);
  }

  /**
   * A key reaching `workspaces` (`"*"` or names) with `permissions`, within what this client's
   * key holds (else `ForbiddenError`); its secret is shown once. Not retried.
   */
  createKey(scope: KeyScope, options?: CallOptions): Promise<S["IssuedKey"]> {
    const call: Call = { method: "POST", path: "/v1/keys", json: keyBody(scope), idempotent: false };
    return this.send(call, json<S["IssuedKey"]>, options);
  }

  /**
   * One page of the live keys this client's key could have made, newest first (never their
   * secrets); pass `next_cursor` as `cursor` for the next.
   */
  listKeys(page: { limit?: number; cursor?: string } = {}, options?: CallOptions): Promise<S["KeyList"]> {
    return this.send({ method: "GET", path: "/v1/keys", query: page }, json<S["KeyList"]>, options);
  }

  /** Revokes a key this client's key could have made: refused on every replica within a second. */
  deleteKey(keyId: string, options?: CallOptions): Promise<void> {
    return this.send({ method: "DELETE", path: `/v1/keys/${segment(keyId)}` }, nothing, options);
  }

  /** One page of the tenants, oldest first; pass `next_cursor` as `cursor` for the next. */
  listTenants(page: { limit?: number; cursor?: string } = {}, options?: CallOptions): Promise<S["TenantList"]> {
    const call: Call = { method: "GET", path: "/v1/admin/tenants", query: page, admin: true };
    return this.send(call, json<S["TenantList"]>, options);
  }

  revokeKey(keyId: string, options?: CallOptions): Promise<void> {
    return this.send({ method: "DELETE", path: `/v1/admin/keys/${segment(keyId)}`, admin: true }, nothing, options);
  }

  tenantLimits(tenantId: string, options?: CallOptions): Promise<S["Limits"]> {
    const call: Call = { method: "GET", path: `/v1/admin/tenants/${segment(tenantId)}/limits`, admin: true };
    return this.send(call, json<S["Limits"]>, options);
  }

  /** Sets a tenant's limits, whole: a field left out takes the server's default, 0 is unlimited. */
  setLimits(tenantId: string, limits: S["LimitsBody"], options?: CallOptions): Promise<S["Limits"]> {
    const call: Call = { method: "PUT", path: `/v1/admin/tenants/${segment(tenantId)}/limits`, json: limits, admin: true };
    return this.send(call, json<S["Limits"]>, options);
  }

  limits(options?: CallOptions): Promise<S["Limits"]> {
    return this.send({ method: "GET", path: "/v1/limits" }, json<S["Limits"]>, options);
  }

  tenantUsage(tenantId: string, range: { from?: string; to?: string } = {}, options?: CallOptions): Promise<S["Usage"]> {
    const call: Call = { method: "GET", path: `/v1/admin/tenants/${segment(tenantId)}/usage`, query: range, admin: true };
    return this.send(call, json<S["Usage"]>, options);
  }

  /** What this tenant used per UTC day (`from`/`to` as YYYY-MM-DD; default the last 30 days). */
  usage(range: { from?: string; to?: string } = {}, options?: CallOptions): Promise<S["Usage"]> {
    return this.send({ method: "GET", path: "/v1/usage", query: range }, json<S["Usage"]>, options);
  }

  /** Forgets a tenant: its keys stop working at once; returns the `forget` job. */
  deleteTenant(tenantId: string, options?: CallOptions): Promise<S["Job"]> {
    const call: Call = { method: "DELETE", path: `/v1/admin/tenants/${segment(tenantId)}`, admin: true };
    return this.send(call, json<S["Job"]>, options);
  }

  // -- layouts -----------------------------------------------------------------
  async listLayouts(options?: CallOptions): Promise<S["LayoutList"]["layouts"]> {
    const list = await this.send({ method: "GET", path: "/v1/layouts" }, json<S["LayoutList"]>, options);
    return list.layouts;
  }

  /** The layout's effective config (defaults included), its name and its etag. */
  getLayout(layout = "default", options?: CallOptions): Promise<S["Layout"]> {
    return this.send({ method: "GET", path: `/v1/layouts/${segment(layout)}` }, json<S["Layout"]>, options);
  }

  putLayout(
    layout: string,
    config: S["LayoutConfig"],
    put: { ifMatch?: string } = {},
    options?: CallOptions,
  ): Promise<S["Layout"]> {
    const headers: Record<string, string> = put.ifMatch ? { "if-match": put.ifMatch } : {};
    const call: Call = { method: "PUT", path: `/v1/layouts/${segment(layout)}`, json: config, headers };
    return this.send(call, json<S["Layout"]>, options);
  }

  // -- sessions ----------------------------------------------------------------
  openSession(
    session: { sessionId?: string; workspace?: string; metadata?: Record<string, unknown> } = {},
    options?: CallOptions,
  ): Promise<S["Session"]> {
    const body: Record<string, unknown> = {};
    if (session.sessionId !== undefined) body.session_id = session.sessionId;
    if (session.workspace !== undefined) body.workspace = session.workspace;
    if (session.metadata !== undefined) body.metadata = session.metadata;
    const call: Call = { method: "POST", path: "/v1/sessions", json: body, idempotent: session.sessionId !== undefined };
    return this.send(call, json<S["Session"]>, options);
  }

  listSessions(
    filter: { state?: S["SessionState"]; workspace?: string; limit?: number; cursor?: string } = {},
    options?: CallOptions,
  ): Promise<S["SessionPage"]> {
    return this.send({ method: "GET", path: "/v1/sessions", query: filter }, json<S["SessionPage"]>, options);
  }

  async listWorkspaces(options?: CallOptions): Promise<S["WorkspaceSummary"][]> {
    const list = await this.send({ method: "GET", path: "/v1/workspaces" }, json<S["WorkspaceList"]>, options);
    return list.workspaces ?? [];
  }

  getSession(sessionId: string, options?: CallOptions): Promise<S["Session"]> {
    return this.send({ method: "GET", path: `/v1/sessions/${segment(sessionId)}` }, json<S["Session"]>, options);
  }

  /**
   * Appends one run's segment. Always sends an `Idempotency-Key`
   * (`idempotencyKey`, or one made for this call), the same on every retry.
   * The session is created in `workspace` if it is new.
   */
  appendSegment(
    sessionId: string,
    segmentBody: S["Segment"] | Record<string, unknown>,
    append: { layout?: string; workspace?: string; idempotencyKey?: string } = {},
    options?: CallOptions,
  ): Promise<S["AppendedSegment"]> {
    const layout = append.layout ?? "default";
    const call: Call = {
      method: "POST",
      path: `/v1/sessions/${segment(sessionId)}/layouts/${segment(layout)}/segments`,
      query: { workspace: append.workspace },
      json: segmentBody,
      headers: { "idempotency-key": append.idempotencyKey ?? crypto.randomUUID() },
      idempotent: true,
    };
    return this.send(call, json<S["AppendedSegment"]>, options);
  }

  /**
   * Appends many runs to one session in order, all of them or none. A segment goes to its own
   * `layout`, else to `append.layout` (default `default`). One `Idempotency-Key` covers the whole
   * batch, the same on every retry. A batch refused for one of its segments rejects with that
   * segment's place in `error.index`.
   */
  appendSegments(
    sessionId: string,
    segments: ReadonlyArray<S["Segment"] | Record<string, unknown>>,
    append: { layout?: string; workspace?: string; idempotencyKey?: string } = {},
    options?: CallOptions,
  ): Promise<S["AppendedBatch"]> {
    const layout = append.layout ?? "default";
    const call: Call = {
      method: "POST",
      path: `/v1/sessions/${segment(sessionId)}/segments:batch`,
      query: { workspace: append.workspace },
      json: { segments: segments.map((s) => ({ layout, ...s })) },
      headers: { "idempotency-key": append.idempotencyKey ?? crypto.randomUUID() },
      idempotent: true,
    };
    return this.send(call, json<S["AppendedBatch"]>, options);
  }

  /** Closes a session; with `wait` (seconds), answers once its memory is made or the wait is over. */
  closeSession(sessionId: string, close: { wait?: number } = {}, options?: CallOptions): Promise<S["CloseResult"]> {
    const call: Call = {
      method: "POST",
      path: `/v1/sessions/${segment(sessionId)}/close`,
      query: { wait: close.wait },
      extraTimeMs: (close.wait ?? 0) * 1000,
    };
    return this.send(call, json<S["CloseResult"]>, options);
  }

  // -- jobs --------------------------------------------------------------------
  listJobs(
    filter: { state?: S["JobState"]; kind?: S["JobKind"]; sessionId?: string; limit?: number; cursor?: string } = {},
    options?: CallOptions,
  ): Promise<S["JobList"]> {
    const { sessionId, ...rest } = filter;
    return this.send({ method: "GET", path: "/v1/jobs", query: { ...rest, session_id: sessionId } }, json<S["JobList"]>, options);
  }

  getJob(jobId: string, options?: CallOptions): Promise<S["Job"]> {
    return this.send({ method: "GET", path: `/v1/jobs/${segment(jobId)}` }, json<S["Job"]>, options);
  }

  retryJob(jobId: string, options?: CallOptions): Promise<S["Job"]> {
    // Not repeated after a broken connection: the first may have queued it (a second answers 409).
    const call: Call = { method: "POST", path: `/v1/jobs/${segment(jobId)}/retry`, idempotent: false };
    return this.send(call, json<S["Job"]>, options);
  }

  // -- every row of a listing -------------------------------------------------------
  /** Every session of `listSessions` (newest first), page after page over `next_cursor`. */
  iterSessions(
    filter: { state?: S["SessionState"]; workspace?: string; pageSize?: number } = {},
    options?: CallOptions,
  ): AsyncGenerator<S["SessionSummary"]> {
    const { pageSize, ...rest } = filter;
    return this.every((cursor) => this.listSessions({ ...rest, limit: pageSize, cursor }, options), (p) => p.sessions ?? []);
  }

  /** Every job of `listJobs` (newest first), page after page. */
  iterJobs(
    filter: { state?: S["JobState"]; kind?: S["JobKind"]; sessionId?: string; pageSize?: number } = {},
    options?: CallOptions,
  ): AsyncGenerator<S["Job"]> {
    const { pageSize, ...rest } = filter;
    return this.every((cursor) => this.listJobs({ ...rest, limit: pageSize, cursor }, options), (p) => p.jobs ?? []);
  }

  /** Every run of `listRuns` (newest first), page after page. */
  iterRuns(
    where: { workspace?: string; layout?: string; pageSize?: number } = {},
    options?: CallOptions,
  ): AsyncGenerator<S["PhaseTwoRun"]> {
    const { pageSize, ...rest } = where;
    return this.every((cursor) => this.listRuns({ ...rest, limit: pageSize, cursor }, options), (p) => p.runs ?? []);
  }

  /** Every tenant of `listTenants` (oldest first), page after page (admin). */
  iterTenants(page: { pageSize?: number } = {}, options?: CallOptions): AsyncGenerator<S["TenantSummary"]> {
    return this.every((cursor) => this.listTenants({ limit: page.pageSize, cursor }, options), (p) => p.tenants ?? []);
  }

  private async *every<P extends { next_cursor?: string | null }, R>(
    page: (cursor: string | undefined) => Promise<P>,
    rows: (page: P) => R[],
  ): AsyncGenerator<R> {
    let cursor: string | undefined;
    do {
      const answer = await page(cursor);
      yield* rows(answer);
      cursor = answer.next_cursor ?? undefined;
    } while (cursor);
  }

  // -- memory ------------------------------------------------------------------
  private memoryPath(workspace: string, layout: string, rest: string): string {
    return `/v1/workspaces/${segment(workspace)}/layouts/${segment(layout)}/${rest}`;
  }

  getSelection(workspace = "default", layout = "default", options?: CallOptions): Promise<S["PhaseTwoSelection"]> {
    const path = this.memoryPath(workspace, layout, "phase_two_selection");
    return this.send({ method: "GET", path }, json<S["PhaseTwoSelection"]>, options);
  }

  listRuns(
    where: { workspace?: string; layout?: string; limit?: number; cursor?: string } = {},
    options?: CallOptions,
  ): Promise<S["RunList"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", "runs");
    return this.send({ method: "GET", path, query: { limit: where.limit, cursor: where.cursor } }, json<S["RunList"]>, options);
  }

  /** One consolidation run with the changes it made to each file. */
  getRun(runId: string, where: { workspace?: string; layout?: string } = {}, options?: CallOptions): Promise<S["RunDetail"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", `runs/${segment(runId)}`);
    return this.send({ method: "GET", path }, json<S["RunDetail"]>, options);
  }

  restoreRun(runId: string, where: { workspace?: string; layout?: string } = {}, options?: CallOptions): Promise<S["Job"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", `runs/${segment(runId)}/restore`);
    // Not repeated after a broken connection: a second would queue a second restore.
    return this.send({ method: "POST", path, idempotent: false }, json<S["Job"]>, options);
  }

  forgetRollout(
    rolloutId: string,
    where: { workspace?: string; layout?: string; mode?: "scrub" | "rebuild" } = {},
    options?: CallOptions,
  ): Promise<S["Job"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", `rollouts/${segment(rolloutId)}`);
    return this.send({ method: "DELETE", path, query: { mode: where.mode } }, json<S["Job"]>, options);
  }

  forgetWorkspace(workspace: string, options?: CallOptions): Promise<S["Job"]> {
    return this.send({ method: "DELETE", path: `/v1/workspaces/${segment(workspace)}` }, json<S["Job"]>, options);
  }

  async listFiles(workspace = "default", layout = "default", options?: CallOptions): Promise<S["MemoryFile"][]> {
    const list = await this.send({ method: "GET", path: this.memoryPath(workspace, layout, "files") }, json<S["FileList"]>, options);
    return list.files ?? [];
  }

  /** A file of the layout's memory folder, as text; with `runId`, as it was right after that run. */
  getFile(
    path: string,
    where: { workspace?: string; layout?: string; runId?: string } = {},
    options?: CallOptions,
  ): Promise<string> {
    const encoded = path.split("/").map(segment).join("/");
    const full = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", `files/${encoded}`);
    return this.send({ method: "GET", path: full, query: { run_id: where.runId } }, text, options);
  }

  /** The memory instructions for the next run, or null when there are none yet (204). */
  getInstructions(
    where: { workspace?: string; layout?: string; liveUpdate?: boolean } = {},
    options?: CallOptions,
  ): Promise<S["Instructions"] | null> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", "instructions");
    const parse = async (response: Response) => (response.status === 204 ? null : ((await response.json()) as S["Instructions"]));
    return this.send({ method: "GET", path, query: { live_update: where.liveUpdate } }, parse, options);
  }

  // -- the running agent's memory ----------------------------------------
  /** The files and folders under `path` (default: the whole memory folder), sorted, at most 2,000 a page. */
  listMemory(
    where: { workspace?: string; layout?: string; path?: string; cursor?: string } = {},
    options?: CallOptions,
  ): Promise<S["MemoryListing"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", "memory/list");
    return this.send({ method: "GET", path, query: { path: where.path, cursor: where.cursor } }, json<S["MemoryListing"]>, options);
  }

  /** Lines of a memory file from `offset` (1-based); with `sessionId`, a read of a rollout summary or raw memory counts as a use of it. */
  readMemory(
    path: string,
    where: { workspace?: string; layout?: string; offset?: number; limit?: number; sessionId?: string } = {},
    options?: CallOptions,
  ): Promise<S["MemoryRead"]> {
    const full = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", "memory/read");
    const query = { path, offset: where.offset, limit: where.limit, session_id: where.sessionId };
    return this.send({ method: "GET", path: full, query }, json<S["MemoryRead"]>, options);
  }

  /**
   * Matching lines of the memory files, MEMORY.md first; with `mode` `ranked` (words), `semantic`
   * (embeddings) or `hybrid` (both), the passages that answer the query best, best first.
   */
  searchMemory(
    query: string,
    where: {
      workspace?: string;
      layout?: string;
      mode?: "substring" | "regex" | "ranked" | "semantic" | "hybrid";
      path?: string;
      regex?: boolean;
      caseSensitive?: boolean;
      context?: number;
      limit?: number;
      cursor?: string;
    } = {},
    options?: CallOptions,
  ): Promise<S["MemorySearch"] | S["MemoryPassages"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", "memory/search");
    const params = {
      query,
      mode: where.mode,
      path: where.path,
      regex: where.regex,
      case_sensitive: where.caseSensitive,
      context: where.context,
      limit: where.limit,
      cursor: where.cursor,
    };
    return this.send({ method: "GET", path, query: params }, json<S["MemorySearch"] | S["MemoryPassages"]>, options);
  }

  /**
   * A V4A `patch` or memory-tool `operations`, all or none: the published edit, or its job when it
   * did not publish within `wait` seconds (default 10). Never retried: an edit applied twice is two edits.
   */
  editMemory(
    edit: S["MemoryEdit"],
    where: { workspace?: string; layout?: string; wait?: number } = {},
    options?: CallOptions,
  ): Promise<S["PublishedEdit"] | S["Job"]> {
    const path = this.memoryPath(where.workspace ?? "default", where.layout ?? "default", "memory/edits");
    const parse = async (response: Response) =>
      (await response.json()) as S["PublishedEdit"] | S["Job"];
    const call: Call = { method: "POST", path, query: { wait: where.wait }, json: edit, idempotent: false, extraTimeMs: (where.wait ?? 10) * 1000 };
    return this.send(call, parse, options);
  }

  /**
   * memoryd's MCP endpoint (`/v1/mcp`) for an MCP client such as `@openai/agents`'
   * `MCPServerStreamableHttp`: its URL, with the defaults a tool call takes, and the headers that carry the key.
   */
  mcpEndpoint(where: { workspace?: string; layout?: string; sessionId?: string } = {}): { url: string; headers: Record<string, string> } {
    const endpoint: Call = {
      method: "POST",
      path: "/v1/mcp",
      query: { workspace: where.workspace, layout: where.layout, session_id: where.sessionId },
    };
    return { url: this.url(endpoint), headers: { authorization: this.headers(endpoint).authorization ?? "" } };
  }

  // -- moving memory in and out ---------------------------------------------------
  /** The workspace as a gzip tar, streamed: the response body, never whole in memory. */
  exportWorkspace(workspace: string, options?: CallOptions): Promise<ReadableStream<Uint8Array>> {
    const parse = async (response: Response) => {
      if (!response.body) throw new MemorydError({ status: response.status, code: "empty_body", detail: "the export has no body" });
      return withIdleTimeout(response.body, this.timeoutMs);
    };
    const call: Call = { method: "GET", path: `/v1/workspaces/${segment(workspace)}/export`, streaming: true };
    return this.send(call, parse, options);
  }

  /** Imports a gzip tar (an export, or a workspace the SDK wrote) into an empty workspace; the `import` job. */
  importWorkspace(workspace: string, archive: Uint8Array | Blob, options?: CallOptions): Promise<S["Job"]> {
    const call: Call = {
      method: "POST",
      path: `/v1/workspaces/${segment(workspace)}/import`,
      body: archive,
      headers: { "content-type": "application/gzip" },
      // A second upload after a broken connection would meet the first's workspace (409).
      idempotent: false,
    };
    return this.send(call, json<S["Job"]>, options);
  }

  // -- webhooks and events ---------------------------------------------------------
  /** Creates a webhook endpoint for `events` (default all); the answer's `secret` is shown this once. Not retried. */
  createWebhook(webhook: S["WebhookBody"], options?: CallOptions): Promise<S["WebhookWithSecret"]> {
    const call: Call = { method: "POST", path: "/v1/webhooks", json: webhook, idempotent: false };
    return this.send(call, json<S["WebhookWithSecret"]>, options);
  }

  async listWebhooks(options?: CallOptions): Promise<S["Webhook"][]> {
    const list = await this.send({ method: "GET", path: "/v1/webhooks" }, json<{ webhooks?: S["Webhook"][] }>, options);
    return list.webhooks ?? [];
  }

  getWebhook(webhookId: string, options?: CallOptions): Promise<S["Webhook"]> {
    return this.send({ method: "GET", path: `/v1/webhooks/${segment(webhookId)}` }, json<S["Webhook"]>, options);
  }

  /** Deletes the endpoint; its pending deliveries are dropped. */
  deleteWebhook(webhookId: string, options?: CallOptions): Promise<void> {
    return this.send({ method: "DELETE", path: `/v1/webhooks/${segment(webhookId)}` }, nothing, options);
  }

  /**
   * Changes the endpoint (`url`, `events`, `description`: null clears it) or
   * its `state` ("enabled" turns a disabled endpoint on again); its secret stays.
   */
  updateWebhook(webhookId: string, change: S["WebhookPatch"], options?: CallOptions): Promise<S["Webhook"]> {
    const call: Call = { method: "PATCH", path: `/v1/webhooks/${segment(webhookId)}`, json: change };
    return this.send(call, json<S["Webhook"]>, options);
  }

  /** A new secret (shown this once); the old one keeps signing for 24 hours. Not retried. */
  rotateWebhook(webhookId: string, options?: CallOptions): Promise<S["WebhookWithSecret"]> {
    const call: Call = { method: "POST", path: `/v1/webhooks/${segment(webhookId)}/rotate`, idempotent: false };
    return this.send(call, json<S["WebhookWithSecret"]>, options);
  }

  /** Sends a `webhook.test` event to this endpoint alone; its event id. Not retried. */
  async testWebhook(webhookId: string, options?: CallOptions): Promise<string> {
    const call: Call = { method: "POST", path: `/v1/webhooks/${segment(webhookId)}/test`, idempotent: false };
    return (await this.send(call, json<{ event_id: string }>, options)).event_id;
  }

  /** The endpoint's deliveries, newest first. */
  async webhookDeliveries(webhookId: string, page: { limit?: number } = {}, options?: CallOptions): Promise<S["Delivery"][]> {
    const call: Call = { method: "GET", path: `/v1/webhooks/${segment(webhookId)}/deliveries`, query: { limit: page.limit } };
    const list = await this.send(call, json<{ deliveries?: S["Delivery"][] }>, options);
    return list.deliveries ?? [];
  }

  /**
   * The tenant's events as they happen (`GET /v1/events`), oldest first.
   * A broken connection is made again after the last event seen
   * (`Last-Event-ID`), so none is missed while the outbox keeps them;
   * `lastEventId` resumes an earlier stream. Ends when `signal` aborts.
   */
  async *events(
    filter: { types?: (keyof EventData)[]; lastEventId?: string; signal?: AbortSignal } = {},
  ): AsyncGenerator<StreamedEvent, void, undefined> {
    let last = filter.lastEventId;
    for (let attempt = 0; ; attempt++) {
      const call: Call = {
        method: "GET",
        path: "/v1/events",
        query: { types: filter.types?.length ? filter.types.join(",") : undefined },
        headers: { accept: "text/event-stream", ...(last ? { "last-event-id": last } : {}) },
      };
      let failure: MemorydError;
      try {
        const response = await this.fetchImpl(this.url(call), { headers: this.headers(call), signal: filter.signal ?? null });
        if (!response.ok) {
          failure = await errorFromResponse(response);
          if (!RETRYABLE_STATUSES.has(response.status)) throw failure;
        } else {
          if (!response.body) return;
          // memoryd sends a keep-alive every 15 s: a minute of silence is a dead connection.
          for await (const event of parseEventStream(withIdleTimeout(response.body, STREAM_IDLE_MS))) {
            last = event.id;
            attempt = 0;
            yield event;
          }
          failure = new ConnectionFailedError({ status: undefined, code: "connection_failed", detail: "the stream ended" });
        }
      } catch (caught) {
        if (filter.signal?.aborted) return;
        if (caught instanceof MemorydError && caught.status !== undefined && !RETRYABLE_STATUSES.has(caught.status)) throw caught;
        const detail = caught instanceof Error ? `${caught.name}: ${caught.message}` : String(caught);
        failure = caught instanceof MemorydError ? caught : new ConnectionFailedError({ status: undefined, code: "connection_failed", detail });
      }
      // Reconnects back off as any retry does, honouring Retry-After.
      try {
        await this.wait(attempt, failure, undefined, filter.signal);
      } catch (error) {
        if (filter.signal?.aborted) return;
        throw error;
      }
    }
  }
}

/** An event of `events()`: the event as webhooks receive it, with its id. */
/** An event of the live stream: a {@link WebhookEvent} (discriminated by `type`) with its `id`. */
export type StreamedEvent = WebhookEvent & { id: string };

/** Server-sent events out of a body (what memoryd sends: `id`, `event`, `data`, comments). */
async function* parseEventStream(body: ReadableStream<Uint8Array>): AsyncGenerator<StreamedEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let id = "";
  let data: string[] = [];
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line === "") {
          if (data.length > 0) {
            const event = JSON.parse(data.join("\n")) as WebhookEvent;
            data = [];
            yield { ...event, id };
          }
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const raw = colon < 0 ? "" : line.slice(colon + 1);
          const text = raw.startsWith(" ") ? raw.slice(1) : raw;
          if (field === "id") id = text;
          else if (field === "data") data.push(text);
        }
      }
    }
  } finally {
    // The caller broke out, or the stream failed: the connection is closed, not left open.
    await reader.cancel().catch(() => undefined);
  }
}
