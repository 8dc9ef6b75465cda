/**
 * Buffered appends: one session's segments gathered and sent as batches
 * (`POST /v1/sessions/{id}/segments:batch`), for runtimes that finish many runs a second and can
 * wait a few milliseconds for their acknowledgement.
 *
 * A buffer sends what it holds once it holds `maxSegments` or when the oldest segment has waited
 * `maxDelayMs`, and on `flush()` and `close()`; each batch under an `Idempotency-Key` of its own,
 * retried by the client's policy. A batch that fails is never dropped silently, nor overtaken:
 * nothing more is sent, and the next call (`append`, `flush` or `close`) rejects with a
 * `BufferedAppendError`, which hands back the failed batch with its key and every segment held after
 * it, in order. The buffer is then empty and may go on; the segment of an `append` that rejects is
 * not held.
 */

import type { Memoryd, Schemas } from "./client.js";
import { MemorydError } from "./errors.js";

type Segment = Schemas["Segment"] | Record<string, unknown>;
type Receipt = Schemas["AppendedSegment"];

/**
 * A batch of buffered segments was refused or could not be sent; `cause` is the error that failed
 * it. Sending `batch` again with `idempotencyKey` appends it once, whether or not memoryd had it;
 * `held` are the segments given after it, never sent.
 */
export class BufferedAppendError extends MemorydError {
  readonly batch: Record<string, unknown>[];
  readonly idempotencyKey: string;
  held: Record<string, unknown>[] = [];

  constructor(cause: unknown, batch: Record<string, unknown>[], idempotencyKey: string) {
    const known = cause instanceof MemorydError;
    super({
      status: known ? cause.status : undefined,
      code: known ? cause.code : "client_error",
      detail: known ? cause.detail : String(cause),
      requestId: known ? cause.requestId : undefined,
      retryAfter: known ? cause.retryAfter : undefined,
      body: known ? cause.body : undefined,
    });
    this.cause = cause;
    this.batch = batch;
    this.idempotencyKey = idempotencyKey;
  }

  /** The failed batch and what was held after it, in order. */
  get segments(): Record<string, unknown>[] {
    return [...this.batch, ...this.held];
  }
}

export interface SegmentBufferOptions {
  /** The layout of segments that name none (default `default`). */
  layout?: string;
  /** The workspace of a session the first batch opens. */
  workspace?: string;
  /** Send once this many are held (default 64). */
  maxSegments?: number;
  /** Send once the oldest has waited this long (default 5 ms). */
  maxDelayMs?: number;
}

/** Appends one session's segments in batches, in the order they were given. */
export class SegmentBuffer {
  /** Segments memoryd acknowledged. */
  appended = 0;
  private held: Record<string, unknown>[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The batch under way: the next one is taken after it, so batches land in order. */
  private sending: Promise<unknown> = Promise.resolve();
  private failed: BufferedAppendError | undefined;
  private closed = false;
  private readonly layout: string;
  private readonly maxSegments: number;
  private readonly maxDelayMs: number;

  constructor(
    private readonly client: Memoryd,
    private readonly sessionId: string,
    private readonly options: SegmentBufferOptions = {},
  ) {
    this.layout = options.layout ?? "default";
    this.maxSegments = options.maxSegments ?? 64;
    this.maxDelayMs = options.maxDelayMs ?? 5;
    if (!Number.isInteger(this.maxSegments) || this.maxSegments < 1) throw new RangeError("maxSegments must be at least 1");
    if (!(this.maxDelayMs >= 0)) throw new RangeError("maxDelayMs must not be negative");
  }

  /** Holds a segment; sends the batch once it is full. */
  async append(segment: Segment, layout?: string): Promise<void> {
    this.usable();
    this.held.push({ layout: layout ?? this.layout, ...segment });
    if (this.held.length >= this.maxSegments) {
      await this.sendHeld(true);
    } else if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        void this.sendHeld(false);
      }, this.maxDelayMs);
    }
  }

  /** Sends what is held now; the receipts of this batch. */
  async flush(): Promise<Receipt[]> {
    this.usable();
    return this.sendHeld(true);
  }

  /** Sends what is left and waits for batches under way; rejects if one failed. Nothing is taken after. */
  async close(): Promise<void> {
    try {
      await this.flush();
      await this.sending;
      this.raiseFailure();
    } finally {
      this.closed = true;
      if (this.timer !== undefined) clearTimeout(this.timer);
    }
  }

  private usable(): void {
    if (this.closed) throw new Error("this SegmentBuffer is closed");
    this.raiseFailure();
  }

  private sendHeld(rejectNow: boolean): Promise<Receipt[]> {
    const sent = this.sending.then(async () => {
      if (this.timer !== undefined) {
        clearTimeout(this.timer);
        this.timer = undefined;
      }
      if (this.failed !== undefined) {
        // An earlier batch failed: nothing more is sent before it is handed back.
        if (rejectNow) this.raiseFailure();
        return [];
      }
      const batch = this.held;
      this.held = [];
      if (batch.length === 0) return [];
      const idempotencyKey = crypto.randomUUID();
      try {
        const answer = await this.client.appendSegments(this.sessionId, batch, {
          workspace: this.options.workspace,
          idempotencyKey,
        });
        this.appended += batch.length;
        return answer.receipts;
      } catch (error) {
        this.failed = new BufferedAppendError(error, batch, idempotencyKey);
        if (rejectNow) this.raiseFailure();
        return [];
      }
    });
    this.sending = sent.catch(() => undefined);
    return sent;
  }

  /** Rejects with a failed batch, handing back what is held. */
  private raiseFailure(): void {
    const failed = this.failed;
    if (failed === undefined) return;
    this.failed = undefined;
    failed.held = this.held;
    this.held = [];
    throw failed;
  }
}
