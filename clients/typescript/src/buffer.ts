/**
 * Buffered appends: one session's segments gathered and sent as batches
 * (`POST /v1/sessions/{id}/segments:batch`), for runtimes that finish many runs a second and can
 * wait a few milliseconds for their acknowledgement.
 *
 * A buffer sends what it holds once it holds `maxSegments` or when the oldest segment has waited
 * `maxDelayMs`, and on `flush()` and `close()`. A batch that fails is never dropped silently: the
 * next call (`append`, `flush` or `close`) rejects with a `BufferedAppendError`, which carries the
 * segments it held, in order, to send again; the segment of an `append` that rejects is not held.
 */

import type { Memoryd, Schemas } from "./client.js";
import { MemorydError } from "./errors.js";

type Segment = Schemas["Segment"] | Record<string, unknown>;
type Receipt = Schemas["AppendedSegment"];

/** A batch of buffered segments was refused or could not be sent; `cause` is the error that failed it. */
export class BufferedAppendError extends MemorydError {
  readonly segments: Record<string, unknown>[];

  constructor(cause: MemorydError, segments: Record<string, unknown>[]) {
    super({
      status: cause.status,
      code: cause.code,
      detail: cause.detail,
      requestId: cause.requestId,
      retryAfter: cause.retryAfter,
      body: cause.body,
    });
    this.cause = cause;
    this.segments = segments;
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
  /** Every receipt so far, in order. */
  readonly receipts: Receipt[] = [];
  private held: Record<string, unknown>[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The batch under way: the next one starts after it, so batches land in order. */
  private sending: Promise<unknown> = Promise.resolve();
  private failed: BufferedAppendError | undefined;
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
    this.raiseFailure();
    this.held.push({ layout: layout ?? this.layout, ...segment });
    if (this.held.length >= this.maxSegments) {
      await this.flush();
    } else if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.send(false).catch(() => undefined);
      }, this.maxDelayMs);
    }
  }

  /** Sends what is held now; the receipts of this batch. */
  async flush(): Promise<Receipt[]> {
    this.raiseFailure();
    return this.send(true);
  }

  /** Sends what is left and waits for batches under way; rejects if any failed. */
  async close(): Promise<void> {
    await this.flush();
    await this.sending;
    this.raiseFailure();
  }

  private send(rejectNow: boolean): Promise<Receipt[]> {
    const sent = this.sending.then(async () => {
      if (this.timer !== undefined) {
        clearTimeout(this.timer);
        this.timer = undefined;
      }
      const batch = this.held;
      this.held = [];
      if (batch.length === 0) return [];
      try {
        const answer = await this.client.appendSegments(this.sessionId, batch, { workspace: this.options.workspace });
        this.receipts.push(...answer.receipts);
        return answer.receipts;
      } catch (error) {
        if (!(error instanceof MemorydError)) throw error;
        const failure = new BufferedAppendError(error, batch);
        if (rejectNow) throw failure;
        this.failed ??= failure;
        return [];
      }
    });
    this.sending = sent.catch(() => undefined);
    return sent;
  }

  private raiseFailure(): void {
    const failed = this.failed;
    this.failed = undefined;
    if (failed !== undefined) throw failed;
  }
}
