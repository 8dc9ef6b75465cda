/**
 * Standard Webhooks verification of a memoryd delivery, with WebCrypto (no
 * dependency): the same rules as the Python client's `verify_webhook`.
 */

import { MemorydError } from "./errors.js";
import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** A delivery that did not verify; `detail` says why. */
export class WebhookVerificationError extends MemorydError {
  constructor(detail: string) {
    super({ status: undefined, code: "webhook_verification_failed", detail });
  }
}

/** The data of each event type, as memoryd sends it. */
export interface EventData {
  "session.closed": Schemas["SessionClosedData"];
  "run.succeeded": Schemas["RunFinishedData"];
  "run.failed": Schemas["RunFinishedData"];
  "job.failed": Schemas["JobFailedData"];
  "forget.completed": Schemas["ForgetCompletedData"];
  "memory.edited": Record<string, unknown>;
  "webhook.test": Schemas["WebhookTestData"];
}

/**
 * A delivered event, `{type, timestamp, data}`: a union discriminated by `type`, so that
 * `if (event.type === "session.closed")` gives `event.data` its fields.
 */
export type WebhookEvent = {
  [K in keyof EventData]: { type: K; timestamp: string; data: EventData[K] };
}[keyof EventData];

type Headers = Record<string, string | string[] | undefined> | globalThis.Headers;

function header(headers: Headers, name: string): string {
  const value = headers instanceof globalThis.Headers ? headers.get(name) : (headers[name] ?? headers[name.toLowerCase()]);
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) throw new WebhookVerificationError(`the ${name} header is missing`);
  return text;
}

function toBase64(bytes: ArrayBuffer): string {
  return btoa(String.fromCharCode(...new Uint8Array(bytes)));
}

function fromBase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/** Compares in time independent of where the strings differ. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * The event of a delivery whose signature verifies under `secret` (`whsec_…`)
 * and whose `webhook-timestamp` is within `toleranceSeconds` (default 300) of
 * `nowSeconds`; throws `WebhookVerificationError` otherwise. Pass the body
 * exactly as received.
 */
export async function verifyWebhook(
  secret: string,
  headers: Headers,
  body: string | Uint8Array,
  options: { toleranceSeconds?: number; nowSeconds?: number } = {},
): Promise<WebhookEvent> {
  const raw = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const id = header(headers, "webhook-id");
  const stamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!/^\d+$/.test(stamp)) throw new WebhookVerificationError("webhook-timestamp is not a number");
  const now = options.nowSeconds ?? Date.now() / 1000;
  if (Math.abs(now - Number(stamp)) > (options.toleranceSeconds ?? 300)) {
    throw new WebhookVerificationError("webhook-timestamp is outside the tolerance");
  }
  if (!secret.startsWith("whsec_")) throw new WebhookVerificationError("the secret must start with whsec_");
  const key = await globalThis.crypto.subtle.importKey(
    "raw",
    fromBase64(secret.slice("whsec_".length)) as BufferSource,
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const prefix = new TextEncoder().encode(`${id}.${stamp}.`);
  const signed = new Uint8Array(prefix.length + raw.length);
  signed.set(prefix);
  signed.set(raw, prefix.length);
  const expected = toBase64(await globalThis.crypto.subtle.sign("HMAC", key, signed));
  for (const candidate of signatures.split(" ")) {
    const [version, value] = [candidate.slice(0, candidate.indexOf(",")), candidate.slice(candidate.indexOf(",") + 1)];
    if (version === "v1" && sameText(value, expected)) {
      return JSON.parse(new TextDecoder().decode(raw)) as WebhookEvent;
    }
  }
  throw new WebhookVerificationError("no signature matches the secret");
}
