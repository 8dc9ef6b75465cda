export { BufferedAppendError, SegmentBuffer } from "./buffer.js";
export type { SegmentBufferOptions } from "./buffer.js";
export { Memoryd, segment } from "./client.js";
export type { CallOptions, KeyScope, MemorydOptions, RetryPolicy, Schemas, StreamedEvent } from "./client.js";
export {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  ConnectionFailedError,
  RequestTimeoutError,
  InsufficientStorageError,
  MemorydError,
  NotFoundError,
  QuotaExceededError,
  ForbiddenError,
  RateLimitedError,
  ServerError,
  UnavailableError,
} from "./errors.js";
export type { components, paths } from "./schema.js";
export { WebhookVerificationError, verifyWebhook } from "./webhooks.js";
export type { EventData, WebhookEvent } from "./webhooks.js";
