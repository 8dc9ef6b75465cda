/**
 * A running agent's memory tools for `@openai/agents`: `memory_list`,
 * `memory_read`, `memory_search` and `memory_edit`, named and shaped as memoryd's
 * MCP tools, and Codex's citation block.
 */

import { tool } from "@openai/agents";
import type { FunctionTool } from "@openai/agents";
import type { Memoryd, Schemas } from "./client.js";
import { MemorydError } from "./errors.js";

const CITATION = /\s*<oai-mem-citation>([\s\S]*?)(?:<\/oai-mem-citation>|$)/g;
const ID_LIST = /<(rollout_ids|thread_ids)>([\s\S]*?)(?:<\/\1>|$)/g;
const ROLLOUT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * `text` without Codex's `<oai-mem-citation>` blocks, and the rollout ids they
 * name (deduplicated, in order). memoryd counts the block in a recorded segment
 * as a use of those memories: strip it only from what a user sees.
 */
export function stripCitations(text: string): { text: string; rolloutIds: string[] } {
  const rolloutIds: string[] = [];
  for (const block of text.matchAll(CITATION)) {
    for (const list of (block[1] ?? "").matchAll(ID_LIST)) {
      for (const id of (list[2] ?? "").split(/[\s,]+/)) {
        if (ROLLOUT_ID.test(id) && !rolloutIds.includes(id)) rolloutIds.push(id);
      }
    }
  }
  return { text: text.replace(CITATION, "").trimEnd(), rolloutIds };
}

export interface MemoryToolsOptions {
  workspace?: string;
  layout?: string;
  /** A read with a session counts as a use of that memory; an edit records it. */
  sessionId?: string;
  /** Offer `memory_edit` (default true). */
  edit?: boolean;
}

type Nullable = { type: ["string", "null"] | ["integer", "null"] | ["boolean", "null"]; description: string };
const nullable = (kind: "string" | "integer" | "boolean", description: string): Nullable => ({
  type: [kind, "null"] as Nullable["type"],
  description,
});

/** A strict schema: every property required (optional ones take null), nothing else. */
function strict(properties: Record<string, unknown>) {
  return { type: "object" as const, properties, required: Object.keys(properties), additionalProperties: false as const };
}

const COMMAND_FIELDS = ["path", "file_text", "old_str", "new_str", "insert_text", "old_path", "new_path"];

function pathsNote(layout: string): string {
  const folder = layout === "default" ? "`memories/`" : `of layout ${layout} (named in your instructions)`;
  return `Paths are relative to the memory folder ${folder}: \`MEMORY.md\`, \`skills/ci/SKILL.md\`.`;
}

type Args = Record<string, unknown>;
type Where = { workspace: string; layout: string };
type Mode = "substring" | "regex" | "ranked" | "semantic" | "hybrid";

function given(args: Args): Args {
  return Object.fromEntries(Object.entries(args).filter(([, v]) => v !== null && v !== undefined));
}

/** A refusal as the model should read it: memoryd's detail, never a stack trace. */
function failure(error: unknown): string {
  if (error instanceof MemorydError) return `Error (${error.code}): ${error.detail}`;
  throw error;
}

function listing(answer: Schemas["MemoryListing"]): string {
  const lines = (answer.entries ?? []).map((e) => (e.kind === "dir" ? `${e.path}/` : `${e.path} (${e.bytes} bytes)`));
  const more = answer.next_cursor ? `\n… more: pass cursor ${answer.next_cursor}` : "";
  return (lines.join("\n") || "The memory folder holds nothing here.") + more;
}

function slice(answer: Schemas["MemoryRead"]): string {
  if (!answer.total_lines) return `${answer.path} is empty.`;
  const first = answer.offset ?? 1;
  const lines = (answer.text ?? "").replace(/\n$/, "").split("\n").map((line, i) => `${String(first + i).padStart(6)}\t${line}`);
  const after = first + (answer.lines ?? 0);
  if (after <= answer.total_lines) lines.push(`… ${answer.total_lines + 1 - after} more lines; read on with offset ${after}`);
  return `${lines.join("\n")}\n(sha256 ${answer.sha256})`;
}

function matches(answer: Schemas["MemorySearch"] | Schemas["MemoryPassages"]): string {
  if ("mode" in answer) {
    const shown = answer.matches.map((p) => {
      const lines = p.line === p.end_line ? `${p.line}` : `${p.line}-${p.end_line}`;
      return `${p.path}:${lines} (score ${p.score})${p.heading ? ` ${p.heading}` : ""}\n${p.text}`;
    });
    const more = answer.next_cursor ? `\n… more sections: pass cursor ${answer.next_cursor}` : "";
    return (shown.join("\n\n") || "No section of the memory folder answers the query.") + more;
  }
  const lines = (answer.matches ?? []).map((m) => `${m.path}:${m.line}: ${m.text}`);
  return lines.join("\n") || "No line of the memory folder matches.";
}

function edited(answer: Schemas["PublishedEdit"] | Schemas["Job"]): string {
  if ("changes" in answer && answer.changes) {
    const changed = answer.changes.map((c) => `${c.change} ${c.path}`).join(", ");
    return `The edit is published: ${changed || "nothing changed"}.`;
  }
  return `The edit is queued as job ${(answer as Schemas["Job"]).job_id}; it publishes once memory's lane is free.`;
}

/** The four calls, each from a tool's arguments to the text the model reads. */
function calls(client: Memoryd, where: Where, sessionId: string | undefined): Record<string, (args: Args) => Promise<string>> {
  return {
    memory_list: async (args) => {
      const a = given(args) as { path?: string; cursor?: string };
      return listing(await client.listMemory({ ...where, ...a }));
    },
    memory_read: async (args) => {
      const a = given(args) as { path: string; offset?: number; limit?: number };
      return slice(await client.readMemory(a.path, { ...where, offset: a.offset, limit: a.limit, sessionId }));
    },
    memory_search: async (args) => {
      const a = given(args) as { query: string; mode?: Mode; path?: string; regex?: boolean; context?: number };
      return matches(await client.searchMemory(a.query, { ...where, mode: a.mode, path: a.path, regex: a.regex, context: a.context }));
    },
    memory_edit: async (args) => {
      const a = given(args) as { patch?: string; operations?: Args[]; expect?: { path: string; sha256: string | null }[]; reason?: string };
      const edit: Schemas["MemoryEdit"] = {};
      if (a.patch !== undefined) edit.patch = a.patch;
      if (a.operations?.length) edit.operations = a.operations.map(given) as Schemas["MemoryCommand"][];
      if (a.expect?.length) edit.expect = Object.fromEntries(a.expect.map((e) => [e.path, e.sha256 ?? null]));
      if (a.reason !== undefined) edit.reason = a.reason;
      if (sessionId !== undefined) edit.session_id = sessionId;
      return edited(await client.editMemory(edit, where));
    },
  };
}

/**
 * `@openai/agents` function tools over a layout's memory, named as memoryd's MCP
 * tools, with strict schemas. A refusal comes back to the model as text
 * (memoryd's detail), never as an error that ends the run.
 */
export function memoryTools(client: Memoryd, options: MemoryToolsOptions = {}): FunctionTool<any, any, any>[] {
  const where = { workspace: options.workspace ?? "default", layout: options.layout ?? "default" };
  const note = pathsNote(where.layout);
  const command = strict({
    command: { type: "string", enum: ["create", "str_replace", "insert", "delete", "rename"] },
    ...Object.fromEntries(COMMAND_FIELDS.map((name) => [name, nullable("string", name)])),
    insert_line: nullable("integer", "insert after this line (0: at the top)"),
  });
  const specs: [string, string, Record<string, unknown>][] = [
    [
      "memory_list",
      `List the files and folders of your memory folder, or of a folder in it. ${note}`,
      { path: nullable("string", "a folder or file (null: the whole memory folder)"), cursor: nullable("string", "the cursor the last page ended with") },
    ],
    [
      "memory_read",
      `Read a memory file with line numbers; long files come in slices (offset is 1-based). ${note}`,
      { path: { type: "string", description: "the file" }, offset: nullable("integer", "the first line (null: 1)"), limit: nullable("integer", "how many lines (null: as many as fit)") },
    ],
    [
      "memory_search",
      `Find lines of your memory files that contain a word or phrase (case-insensitive), MEMORY.md first; answers path:line: text. When the words you know find nothing, search by meaning: mode semantic (or hybrid, or ranked for words in any order) answers the sections that answer the query best. ${note}`,
      {
        query: { type: "string" },
        mode: {
          type: ["string", "null"],
          enum: ["substring", "regex", "ranked", "semantic", "hybrid", null],
          description: "how to search (null: substring)",
        },
        path: nullable("string", "search only under this folder or file"),
        regex: nullable("boolean", "treat the query as a regular expression"),
        context: nullable("integer", "lines shown before and after each match (0-20)"),
      },
    ],
    [
      "memory_edit",
      "Fix stale or wrong memory, all changes or none: a V4A patch (*** Begin Patch … *** End Patch) or operations (create, str_replace, insert, delete, rename; unused fields null). expect lists the sha256 memory_read gave for a file you change, so that a file changed since is not overwritten. " +
        note,
      {
        patch: nullable("string", "a V4A patch (null when operations are given)"),
        operations: { type: ["array", "null"], items: command },
        expect: { type: ["array", "null"], items: strict({ path: { type: "string" }, sha256: nullable("string", "null: must not exist") }) },
        reason: nullable("string", "why, for the memory's history"),
      },
    ],
  ];
  const run = calls(client, where, options.sessionId);
  return specs
    .filter(([name]) => options.edit !== false || name !== "memory_edit")
    .map(([name, description, properties]) =>
      tool({
        name,
        description,
        strict: true,
        parameters: strict(properties) as any,
        execute: async (args: unknown) => {
          try {
            return await run[name]!(args as Args);
          } catch (error) {
            return failure(error);
          }
        },
      }),
    );
}
