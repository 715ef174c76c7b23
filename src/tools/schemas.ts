/**
 * Parameters of the session tools: one zod schema each validates the model's arguments at the
 * boundary and is also the JSON schema the model sees (numbers as `number`, never `integer`,
 * and no top-level anyOf/oneOf — some providers reject both).
 */
import { z } from "zod";
import type { AgentTool, ToolContext } from "./types.js";
import { SESSION_KINDS } from "../sessions/keys.js";
import { deepFreeze } from "../util/freeze.js";
import { safeParse } from "../util/safe-parse.js";

/** A required string whose message names the field whether it is missing or blank. */
function requiredString(field: string, description: string) {
  return z
    .string({ error: (issue) => (issue.input === undefined ? `${field} required` : `${field} must be a string`) })
    .trim()
    .min(1, `${field} required`)
    .describe(description);
}

const sessionRef = (field = "sessionKey") => requiredString(field, "A session key from sessions_list (\"main\" is your own agent's main session) or a sessionId.");

export const SessionsListParams = z.object({
  kinds: z
    .array(z.string().trim().toLowerCase().pipe(z.enum(SESSION_KINDS as [string, ...string[]], { error: `kinds: use any of ${SESSION_KINDS.join(", ")}` })))
    .optional()
    .describe(`Only these kinds: ${SESSION_KINDS.join(", ")}.`),
  limit: z.number({ error: "limit must be a number" }).min(1, "limit must be at least 1").optional().describe("Maximum rows (default and maximum 200)."),
  activeMinutes: z.number({ error: "activeMinutes must be a number" }).positive("activeMinutes must be positive").optional().describe("Only sessions updated within the last N minutes."),
  messageLimit: z.number({ error: "messageLimit must be a number" }).min(0, "messageLimit must be 0 or more").optional().describe("Include the last N messages of each session (0 = none, at most 20); tool results are left out."),
});

export const SessionsHistoryParams = z.object({
  sessionKey: sessionRef(),
  limit: z.number({ error: "limit must be a number" }).min(1, "limit must be at least 1").optional().describe("Maximum messages, newest last (default 200, at most 1000)."),
  includeTools: z.boolean({ error: "includeTools must be a boolean" }).optional().describe("Include tool result messages (default false)."),
});

export const SessionsSendParams = z.object({
  sessionKey: z.string({ error: "sessionKey must be a string" }).trim().min(1, "sessionKey required").optional().describe("Target session key or sessionId (or give label)."),
  label: z.string({ error: "label must be a string" }).trim().min(1).max(64, "label: at most 64 characters").optional().describe("Target session by its label instead of sessionKey."),
  message: requiredString("message", "The message to run in the target session."),
  timeoutSeconds: z
    .number({ error: "timeoutSeconds must be a number" })
    .min(0, "timeoutSeconds must be 0 or more")
    .max(3600, "timeoutSeconds: at most 3600")
    .optional()
    .describe("How long to wait for the reply (default 30; 0 = do not wait)."),
});

export const SessionsSpawnParams = z.object({
  task: requiredString("task", "What the sub-agent should do; it reports back to this chat when done."),
  label: z.string({ error: "label must be a string" }).trim().min(1).max(64, "label: at most 64 characters").optional().describe("Short name for logs and lists."),
  agentId: z.string({ error: "agentId must be a string" }).trim().min(1).optional().describe("Run under another agent (see agents_list)."),
  model: z.string({ error: "model must be a string" }).trim().min(1).optional().describe("Model override as provider/model."),
  runTimeoutSeconds: z.number({ error: "runTimeoutSeconds must be a number" }).min(0, "runTimeoutSeconds must be 0 or more").optional().describe("Abort the sub-agent after N seconds (0 = no limit of its own)."),
  cleanup: z.enum(["delete", "keep"], { error: 'cleanup: use "delete" or "keep"' }).optional().describe('"keep" (default) archives the session later; "delete" removes it after the announce.'),
});

export const AgentsListParams = z.object({});

export type SessionsListInput = z.infer<typeof SessionsListParams>;
export type SessionsHistoryInput = z.infer<typeof SessionsHistoryParams>;
export type SessionsSendInput = z.infer<typeof SessionsSendParams>;
export type SessionsSpawnInput = z.infer<typeof SessionsSpawnParams>;

/** Converted once per schema: tools are built for every run, and conversion costs ~0.3 ms. */
const jsonSchemas = new WeakMap<z.ZodType, Record<string, unknown>>();

/** The JSON schema a model sees for a parameter schema. */
export function toolParameters(schema: z.ZodType): Record<string, unknown> {
  let json = jsonSchemas.get(schema);
  if (!json) {
    const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io: "input" }) as Record<string, unknown>;
    // Frozen: shared by every run's tool list, and request bodies cache its JSON by identity.
    json = deepFreeze(rest);
    jsonSchemas.set(schema, json);
  }
  return json;
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

/** Validates tool arguments; the error lists each problem, naming its field. */
export function parseArgs<T>(schema: z.ZodType<T>, args: unknown): Parsed<T> {
  const result = safeParse(schema, args ?? {});
  if (result.success) return { ok: true, value: result.data };
  const messages = result.error.issues.map((issue) => {
    const field = issue.path.join(".");
    return field && !issue.message.startsWith(field.split(".")[0]) ? `${field}: ${issue.message}` : issue.message;
  });
  return { ok: false, error: [...new Set(messages)].join("; ") };
}

/** A tool whose arguments are validated against `params` before `run` sees them. */
export function defineTool<S extends z.ZodType, R>(def: {
  name: string;
  description: string;
  params: S;
  /** The tool's own error result for arguments that do not validate. */
  invalid: (error: string) => R;
  run: (args: z.infer<S>, ctx: ToolContext) => Promise<R>;
}): AgentTool {
  return {
    name: def.name,
    description: def.description,
    parameters: toolParameters(def.params),
    async execute(args, ctx) {
      const parsed = parseArgs(def.params as z.ZodType<z.infer<S>>, args);
      return parsed.ok ? def.run(parsed.value, ctx) : def.invalid(parsed.error);
    },
  };
}
