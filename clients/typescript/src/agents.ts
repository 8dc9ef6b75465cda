/**
 * memoryd for the OpenAI Agents SDK for TypeScript (`@openai/agents`, a peer
 * dependency of this entry point only).
 *
 * ```ts
 * const memory = new MemorydMemory(new Memoryd());
 * const agent = new Agent({ name: "assistant", instructions: memory.instructions("You are helpful.") });
 * const result = await memory.run(agent, "I prefer green tea.");
 * await memory.close({ wait: 30 });
 * ```
 *
 * `run` also gives the agent its memory tools (`memory_list`, `memory_read`,
 * `memory_search`, `memory_edit`: see `memoryTools`), so it can open the files
 * its instructions name and fix what is stale.
 *
 * Each run is recorded as the segment the SDK's own sandbox memory would
 * write for it (`buildMemoryRolloutPayload`), so memoryd reads a TypeScript
 * run as the SDK's in-process memory would; the instructions carry what
 * memoryd consolidated from earlier sessions.
 */

import {
  InputGuardrailTripwireTriggered,
  MaxTurnsExceededError,
  OutputGuardrailTripwireTriggered,
  ToolInputGuardrailTripwireTriggered,
  ToolOutputGuardrailTripwireTriggered,
  run as runAgent,
} from "@openai/agents";
import type { Agent, AgentInputItem, NonStreamRunOptions, RunResult, RunState, Runner } from "@openai/agents";
import type { CallOptions, Memoryd, Schemas } from "./client.js";
import { MemorydError, NotFoundError } from "./errors.js";
import { memoryTools, stripCitations } from "./agentTools.js";

export { memoryTools, stripCitations } from "./agentTools.js";
export type { MemoryToolsOptions } from "./agentTools.js";

// The SDK's own rule for which items a memory keeps (its `shouldIncludeMemoryItem`):
// memoryd's server applies the same one, so what is sent is what is kept.
const DROPPED_ROLES = new Set(["developer", "system"]);
const KEPT_ROLES = new Set(["assistant", "tool", "user"]);
const KEPT_TYPES = new Set([
  "apply_patch_call",
  "apply_patch_call_output",
  "computer_call",
  "computer_call_output",
  "custom_tool_call",
  "custom_tool_call_output",
  "function_call",
  "function_call_output",
  "function_call_result",
  "hosted_tool_call",
  "local_shell_call",
  "local_shell_call_output",
  "mcp_approval_request",
  "mcp_approval_response",
  "mcp_call",
  "program",
  "program_output",
  "shell_call",
  "shell_call_output",
  "tool_search_call",
  "tool_search_output",
  "web_search_call",
]);

// The SDK's run state is generic over the application's context and agent; memory reads neither.
type AnyRunState = RunState<any, Agent<any, any>>;
type RunInput = string | AgentInputItem[];

/** The rollout segment's `terminal_metadata`, as the SDK writes it. */
export interface TerminalMetadata {
  terminal_state: "completed" | "interrupted" | "cancelled" | "failed" | "max_turns_exceeded" | "guardrail_tripped";
  exception_type: string | null;
  exception_message: string | null;
  has_final_output: boolean;
}

/** One run's rollout segment, with the key order of the SDK's payload. */
export interface RolloutSegment {
  updated_at: string;
  rollout_id: string;
  input: unknown[];
  generated_items: unknown[];
  terminal_metadata: TerminalMetadata;
  interruptions?: unknown[];
  final_output?: unknown;
}

/** Where a run's rollout id comes from, first match wins (the SDK's `resolveMemoryRolloutId`). */
export interface RolloutIdentity {
  conversationId?: string | undefined;
  sdkSessionId?: string | undefined;
  groupId?: string | undefined;
  /** When the run has none of the above (default: a new UUID, as the SDK does). */
  fallbackId?: string | undefined;
}

export interface SegmentOptions extends RolloutIdentity {
  /** What the run threw: its terminal state and message go into the segment. */
  exception?: unknown;
  /** This run's own input, when the state's input holds more (an SDK session's history). */
  inputOverride?: RunInput | undefined;
}

const ROLLOUT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The SDK's rollout id rule: conversation id, SDK session id, group id, then the fallback. */
export function resolveRolloutId(identity: RolloutIdentity): string {
  const chosen = (identity.conversationId ?? identity.sdkSessionId ?? identity.groupId ?? identity.fallbackId ?? crypto.randomUUID()).trim();
  if (!ROLLOUT_ID.test(chosen)) {
    throw new Error("Sandbox memory rollout ID must be a file-safe ID containing only letters, numbers, '.', '_', or '-'.");
  }
  return chosen;
}

function runStateOf(source: RunResult<any, any> | AnyRunState | undefined, exception: unknown): AnyRunState {
  if (source !== undefined) {
    return "_generatedItems" in source ? source : source.state;
  }
  const state = (exception as { state?: AnyRunState } | undefined)?.state;
  if (state === undefined) {
    throw new Error("a run without a result needs the exception it threw, carrying the run's state");
  }
  return state;
}

function keptForMemory(item: unknown): boolean {
  if (!item || typeof item !== "object") return false;
  const { role, type } = item as { role?: unknown; type?: unknown };
  if (typeof role === "string" && DROPPED_ROLES.has(role)) return false;
  if (typeof role === "string" && KEPT_ROLES.has(role)) return true;
  return typeof type === "string" && KEPT_TYPES.has(type);
}

/** JSON as the segment holds it: bytes become a note of their length, undefined disappears. */
function asJson(value: unknown): unknown {
  try {
    const text = JSON.stringify(value, (_key, child: unknown) =>
      child instanceof Uint8Array ? { type: "Uint8Array", byteLength: child.byteLength } : child,
    );
    return text === undefined ? null : JSON.parse(text);
  } catch {
    return String(value);
  }
}

function withoutKey(item: Record<string, unknown>, key: string): Record<string, unknown> {
  const { [key]: _dropped, ...rest } = item;
  return rest;
}

/** A generated item as the model would be sent it again: no output-only `created_by`, no null `status`. */
function modelReadyItem(raw: unknown): unknown {
  if (!raw || typeof raw !== "object") return raw;
  let item = raw as Record<string, unknown>;
  if (Object.prototype.hasOwnProperty.call(item, "created_by")) item = withoutKey(item, "created_by");
  if (item.type === "shell_call_output" && Array.isArray(item.output)) {
    const chunks = item.output as unknown[];
    if (chunks.some((c) => c !== null && typeof c === "object" && Object.prototype.hasOwnProperty.call(c, "created_by"))) {
      item = {
        ...item,
        output: chunks.map((c) =>
          c !== null && typeof c === "object" && Object.prototype.hasOwnProperty.call(c, "created_by")
            ? withoutKey(c as Record<string, unknown>, "created_by")
            : c,
        ),
      };
    }
  }
  if ("status" in item && item.status === null) item = withoutKey(item, "status");
  return item;
}

function inputItems(input: RunInput): unknown[] {
  return typeof input === "string" ? [{ type: "message", role: "user", content: input }] : [...input];
}

function exceptionName(exception: unknown): string {
  if (exception instanceof Error && exception.name) return exception.name;
  const name = (exception as { name?: unknown } | null)?.name;
  return typeof name === "string" ? name : "Error";
}

function exceptionMessage(exception: unknown): string | null {
  if (exception instanceof Error) return exception.message || null;
  const text = String(exception);
  return text ? text : null;
}

/** The terminal metadata the SDK writes for a run that threw `exception`. */
export function terminalMetadataForException(exception: unknown): TerminalMetadata {
  const name = exceptionName(exception);
  let state: TerminalMetadata["terminal_state"] = "failed";
  if (exception instanceof MaxTurnsExceededError) {
    state = "max_turns_exceeded";
  } else if (
    exception instanceof InputGuardrailTripwireTriggered ||
    exception instanceof OutputGuardrailTripwireTriggered ||
    exception instanceof ToolInputGuardrailTripwireTriggered ||
    exception instanceof ToolOutputGuardrailTripwireTriggered ||
    name.includes("Guardrail")
  ) {
    state = "guardrail_tripped";
  } else if (name === "AbortError" || name === "CancelledError") {
    state = "cancelled";
  }
  return { terminal_state: state, exception_type: name, exception_message: exceptionMessage(exception), has_final_output: false };
}

function terminalMetadata(state: AnyRunState, exception: unknown, hasFinalOutput: boolean): TerminalMetadata {
  const settled = { exception_type: null, exception_message: null };
  if (hasFinalOutput) return { terminal_state: "completed", ...settled, has_final_output: true };
  if (state._currentStep?.type === "next_step_interruption") {
    return { terminal_state: "interrupted", ...settled, has_final_output: false };
  }
  if (exception !== undefined) return terminalMetadataForException(exception);
  return { terminal_state: "failed", ...settled, has_final_output: false };
}

/** The SDK's timestamp form: ISO 8601 in UTC with `+00:00`. */
function updatedAt(): string {
  return new Date().toISOString().replace(/Z$/, "+00:00");
}

/**
 * The rollout segment of one run: the payload the SDK's own
 * `buildMemoryRolloutPayload` makes for it, same keys and values.
 *
 * `result` is a `RunResult` (or a finished streamed one) or its `RunState`.
 * For a run that threw, pass the error as `exception` and leave `result`
 * undefined: the SDK's errors carry the run's state, and the segment holds
 * the items made before the failure with the SDK's terminal metadata
 * (`max_turns_exceeded`, `guardrail_tripped`, `cancelled` or `failed`).
 * The rollout id follows the SDK's rule: the run's conversation id, else
 * `sdkSessionId`, else `groupId`, else `fallbackId` (default a new UUID).
 */
export function segmentFromResult(
  result: RunResult<any, any> | AnyRunState | undefined,
  options: SegmentOptions = {},
): RolloutSegment {
  const state = runStateOf(result, options.exception);
  const rolloutId = resolveRolloutId({ ...options, conversationId: state._conversationId ?? options.conversationId });
  const finalOutput = state._currentStep?.type === "next_step_final_output" ? state._currentStep.output : null;
  const interruptions = state.getInterruptions().map((item) => asJson(item.rawItem));
  const generated = state._generatedItems.filter((item) => item.type !== "tool_approval_item").map((item) => modelReadyItem(item.rawItem));
  const segment: RolloutSegment = {
    updated_at: updatedAt(),
    rollout_id: rolloutId,
    input: asJson(inputItems(options.inputOverride ?? state._originalInput).filter(keptForMemory)) as unknown[],
    generated_items: asJson(generated.filter(keptForMemory)) as unknown[],
    terminal_metadata: terminalMetadata(state, options.exception, finalOutput !== null),
  };
  if (interruptions.length > 0) segment.interruptions = interruptions;
  if (finalOutput !== null) segment.final_output = asJson(finalOutput);
  return segment;
}

/** Where the memory's warnings go (default the console). */
export interface MemoryLogger {
  warn(message: string): void;
  error(message: string): void;
}

export interface MemorydMemoryOptions {
  /** The memoryd session of this conversation (default a new `agent-<hex>`). */
  sessionId?: string;
  layout?: string;
  workspace?: string;
  /**
   * The rollout of every run recorded here (default: the SDK's rule over the
   * run's conversation id, SDK session and group id, falling back to the
   * session id, so one conversation is one rollout).
   */
  rolloutId?: string;
  /** How long fetched instructions are reused (default 5 s). */
  instructionsTtlMs?: number;
  /** How long an agent waits for memoryd's instructions before running without them (default 2 s). */
  instructionsTimeoutMs?: number;
  logger?: MemoryLogger;
  /** `run` gives the agent its memory tools, with this session (default true). */
  tools?: boolean;
}

export interface RecordOptions {
  rolloutId?: string;
  exception?: unknown;
  inputOverride?: RunInput;
  /** As the SDK's identity rule reads them: an SDK session's id and the run's group id. */
  sdkSessionId?: string;
  groupId?: string;
}

type InstructionsFn = (runContext: unknown, agent: unknown) => Promise<string>;

/**
 * One conversation's memory in memoryd: a session, its rollout, a layout.
 *
 * `instructions(base)` gives an agent what memoryd consolidated before;
 * `run` runs an agent and records the run (a run that throws too);
 * `close` hands the conversation to memoryd's phase one and two.
 */
export class MemorydMemory {
  readonly client: Memoryd;
  readonly sessionId: string;
  readonly layout: string;
  readonly workspace: string;
  private readonly rolloutId: string | undefined;
  private readonly explicitSession: boolean;
  private readonly ttlMs: number;
  private readonly timeoutMs: number;
  private readonly logger: MemoryLogger;
  private readonly tools: boolean;
  private cached: { at: number; text: string | null } | undefined;
  private recorded = 0;

  constructor(client: Memoryd, options: MemorydMemoryOptions = {}) {
    this.client = client;
    this.explicitSession = options.sessionId !== undefined;
    this.sessionId = options.sessionId ?? `agent-${crypto.randomUUID().replaceAll("-", "")}`;
    this.layout = options.layout ?? "default";
    this.workspace = options.workspace ?? "default";
    this.rolloutId = options.rolloutId;
    this.ttlMs = options.instructionsTtlMs ?? 5000;
    this.timeoutMs = options.instructionsTimeoutMs ?? 2000;
    this.logger = options.logger ?? console;
    this.tools = options.tools ?? true;
  }

  /** A copy of `agent` that also holds this conversation's memory tools (the caller's agent is left as it is). */
  private withTools<TAgent extends Agent<any, any>>(agent: TAgent): TAgent {
    if (!this.tools) return agent;
    const mine = memoryTools(this.client, { workspace: this.workspace, layout: this.layout, sessionId: this.sessionId });
    const names = new Set(mine.map((t) => t.name));
    return agent.clone({ tools: [...agent.tools.filter((t) => !names.has(t.name)), ...mine] }) as TAgent;
  }

  /**
   * memoryd's memory instructions for this layout, or null when there are
   * none yet or memoryd cannot answer within `instructionsTimeoutMs`
   * (logged, never thrown). Reused for `instructionsTtlMs`.
   */
  async memoryInstructions(): Promise<string | null> {
    if (this.cached !== undefined && Date.now() - this.cached.at < this.ttlMs) return this.cached.text;
    let text: string | null;
    try {
      const answer = await this.client.getInstructions(
        { workspace: this.workspace, layout: this.layout },
        { timeoutMs: this.timeoutMs },
      );
      text = answer?.instructions ?? null;
    } catch (error) {
      this.logger.warn(`memoryd instructions unavailable, the agent runs without memory: ${describe(error)}`);
      // While memoryd is down every turn would wait the whole timeout: the failure is remembered as an answer would be.
      this.cached = { at: Date.now(), text: null };
      return null;
    }
    this.cached = { at: Date.now(), text };
    return text;
  }

  /** A value for `new Agent({ instructions })`: `base`, then the memory instructions when there are any. */
  instructions(base?: string): InstructionsFn {
    return async () => {
      const memory = await this.memoryInstructions();
      if (!memory) return base ?? "";
      return base ? `${base}\n\n${memory}` : memory;
    };
  }

  /** Posts one run as a segment of this conversation (see `segmentFromResult`); throws `MemorydError`. */
  async record(
    result: RunResult<any, any> | AnyRunState | undefined,
    options: RecordOptions = {},
    call?: CallOptions,
  ): Promise<Schemas["AppendedSegment"]> {
    const segment = segmentFromResult(result, {
      exception: options.exception,
      inputOverride: options.inputOverride,
      sdkSessionId: options.sdkSessionId,
      groupId: options.groupId,
      fallbackId: this.sessionId,
    });
    const rolloutId = options.rolloutId ?? this.rolloutId;
    if (rolloutId !== undefined) segment.rollout_id = rolloutId;
    const appended = await this.client.appendSegment(
      this.sessionId,
      segment as unknown as Schemas["Segment"],
      { layout: this.layout, workspace: this.workspace },
      call,
    );
    this.recorded += 1;
    return appended;
  }

  /**
   * `run(agent, input, options)` of `@openai/agents`, recorded. A run that
   * throws is recorded with its terminal state, then the error is rethrown.
   * A recording that fails is logged; the caller gets the run's own result
   * or error unchanged. `runner` runs it (default the SDK's default
   * runner); its `groupId` counts in the rollout id rule. For a streamed
   * run, `record(result)` once it has completed.
   */
  async run<TAgent extends Agent<any, any>>(
    agent: TAgent,
    input: RunInput,
    options: NonStreamRunOptions<any> & { rolloutId?: string; runner?: Runner; stripCitations?: boolean } = {},
  ): Promise<RunResult<any, TAgent>> {
    const { rolloutId, runner, stripCitations: strip, ...runOptions } = options;
    const withMemory = this.withTools(agent);
    const groupId = runner?.config.groupId;
    const sdkSessionId = runOptions.session ? await runOptions.session.getSessionId() : undefined;
    // With an SDK session the state's input holds the history too; the SDK then records the run's own input.
    const recordOptions: RecordOptions = {
      ...(rolloutId !== undefined ? { rolloutId } : {}),
      ...(runOptions.session ? { inputOverride: input } : {}),
      ...(sdkSessionId !== undefined ? { sdkSessionId } : {}),
      ...(groupId !== undefined ? { groupId } : {}),
    };
    let result: RunResult<any, TAgent>;
    try {
      result = runner ? await runner.run(withMemory, input, runOptions) : await runAgent(withMemory, input, runOptions);
    } catch (error) {
      if ((error as { state?: unknown } | null)?.state !== undefined) {
        await this.recordQuietly(undefined, { ...recordOptions, exception: error });
      }
      throw error;
    }
    await this.recordQuietly(result, recordOptions);
    return strip ? withoutCitations(result) : result;
  }

  private async recordQuietly(result: RunResult<any, any> | undefined, options: RecordOptions): Promise<void> {
    try {
      await this.record(result, options);
    } catch (error) {
      this.logger.error(`memoryd could not record a run of session ${this.sessionId}: ${describe(error)}`);
    }
  }

  /**
   * Closes the session: memoryd extracts and consolidates its runs; with
   * `wait` (seconds) answers once that is done. Null when the session was
   * never created (nothing was recorded and no session id was given).
   */
  async close(close: { wait?: number } = {}, call?: CallOptions): Promise<Schemas["CloseResult"] | null> {
    try {
      return await this.client.closeSession(this.sessionId, close, call);
    } catch (error) {
      if (error instanceof NotFoundError && this.recorded === 0 && !this.explicitSession) return null;
      throw error;
    }
  }
}

/**
 * `result` whose `finalOutput` has lost Codex's citation block (the recorded
 * segment keeps it: memoryd counts it). The result's other fields are its own.
 */
function withoutCitations<T extends RunResult<any, any>>(result: T): T {
  const output: unknown = result.finalOutput;
  if (typeof output !== "string") return result;
  const { text } = stripCitations(output);
  return new Proxy(result, {
    get: (target, key) => {
      if (key === "finalOutput") return text;
      const value: unknown = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

function describe(error: unknown): string {
  if (error instanceof MemorydError) return `${error.status} ${error.code}: ${error.detail}`;
  return error instanceof Error ? error.message : String(error);
}
