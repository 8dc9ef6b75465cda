/**
 * What a refused or failed call raises: memoryd's problem document, with the
 * HTTP status (undefined when no answer arrived), the stable error `code`,
 * the `detail`, the `x-request-id` to quote, and `Retry-After` in seconds.
 */
export class MemorydError extends Error {
  readonly status: number | undefined;
  readonly code: string;
  readonly detail: string;
  readonly requestId: string | undefined;
  readonly retryAfter: number | undefined;
  readonly body: unknown;

  constructor(init: {
    status: number | undefined;
    code: string;
    detail: string;
    requestId?: string | undefined;
    retryAfter?: number | undefined;
    body?: unknown;
  }) {
    const where = init.requestId ? ` (request ${init.requestId})` : "";
    super(`${init.status ?? "no answer"} ${init.code}: ${init.detail}${where}`);
    this.name = new.target.name;
    this.status = init.status;
    this.code = init.code;
    this.detail = init.detail;
    this.requestId = init.requestId;
    this.retryAfter = init.retryAfter;
    this.body = init.body;
  }

  /** For a batch append refused for one of its segments: that segment's place in the batch. */
  get index(): number | undefined {
    const body = this.body as { index?: unknown } | undefined;
    return typeof body?.index === "number" ? body.index : undefined;
  }
}

/** memoryd could not be reached, or the connection broke before an answer. */
export class ConnectionFailedError extends MemorydError {}

/** No answer came within the attempt's or the call's timeout (code `timeout`); a `ConnectionFailedError` too. */
export class RequestTimeoutError extends ConnectionFailedError {}
/** The request itself is wrong (400, 405, 408, 413, 415, 422, 431): retrying it unchanged fails again. */
export class BadRequestError extends MemorydError {}
/** 401: no key, or one that is unknown or revoked. */
export class AuthenticationError extends MemorydError {}
/** 404. */
export class NotFoundError extends MemorydError {}
/** 409: the state of the resource refuses the request (a closed session, a reused idempotency key, …). */
export class ConflictError extends MemorydError {}
/** 403 `quota_exceeded`: a limit of the tenant; never retried. */
export class QuotaExceededError extends MemorydError {}
/** 403 `forbidden`: the key lacks the route's permission or does not reach that workspace; never retried. */
export class ForbiddenError extends MemorydError {}
/** 429 `rate_limited`: retried after `Retry-After`. */
export class RateLimitedError extends MemorydError {}
/** 503: the database is away; retried. */
export class UnavailableError extends MemorydError {}
/** 507: the volume is full; retried. */
export class InsufficientStorageError extends MemorydError {}
/** 5xx other than 503 and 507. */
export class ServerError extends MemorydError {}

const BY_STATUS: Record<number, typeof MemorydError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: QuotaExceededError,
  404: NotFoundError,
  405: BadRequestError,
  408: BadRequestError,
  409: ConflictError,
  412: ConflictError,
  413: BadRequestError,
  415: BadRequestError,
  422: BadRequestError,
  429: RateLimitedError,
  431: BadRequestError,
  503: UnavailableError,
  507: InsufficientStorageError,
};

/** The error a response with a status of 400 or more stands for. */
export async function errorFromResponse(response: Response): Promise<MemorydError> {
  const text = await response.text().catch(() => "");
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not a problem document (a proxy's page): the text is the detail.
  }
  const problem = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
  const forbidden = response.status === 403 && problem.code === "forbidden";
  const Kind = forbidden
    ? ForbiddenError
    : (BY_STATUS[response.status] ?? (response.status >= 500 ? ServerError : MemorydError));
  return new Kind({
    status: response.status,
    // An answer that is no problem document (a proxy's page) is named as the Python client names it.
    code: typeof problem.code === "string" ? problem.code : "unexpected_response",
    detail: typeof problem.detail === "string" ? problem.detail : `HTTP ${response.status}: ${text.slice(0, 200)}`,
    requestId: response.headers.get("x-request-id") ?? undefined,
    retryAfter,
    body,
  });
}

/** `Retry-After` in seconds: a number of seconds or an HTTP date. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - Date.now()) / 1000);
}
