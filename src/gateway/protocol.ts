/**
 * Gateway wire protocol (interfaces §3): JSON text frames `req` / `res` / `event`, parsed with zod
 * at the trust boundary. Method params are strict: an unknown field is an error naming it.
 */
import { z } from "zod";
import type { ParsedCommand } from "../inbound/command-parse.js";

export const PROTOCOL_VERSIONS = [3, 4] as const;

export const RequestFrame = z.object({
  type: z.literal("req"),
  id: z.string().min(1).max(256),
  method: z.string().min(1).max(128),
  params: z.unknown().optional(),
});
export type RequestFrame = z.infer<typeof RequestFrame>;

export type ErrorCode = "INVALID_REQUEST" | "UNAUTHORIZED" | "FORBIDDEN" | "NOT_FOUND" | "UNAVAILABLE" | "AGENT_TIMEOUT";

export interface ErrorShape {
  code: ErrorCode;
  message: string;
  details?: Record<string, unknown>;
}

export type ResponseFrame = { type: "res"; id: string; ok: true; payload: unknown } | { type: "res"; id: string; ok: false; error: ErrorShape; payload?: unknown };

export interface EventFrame {
  type: "event";
  event: string;
  payload: unknown;
  seq?: number;
}

/** A handler's failure with a protocol error code. */
export class GatewayError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = "GatewayError";
  }
}

export const Scope = z.enum(["operator.read", "operator.write", "operator.admin"]);
export type Scope = z.infer<typeof Scope>;

/** A node's id, and what stands in for it (client.id, client.instanceId); the id is logged too. */
const NodeId = z.string().min(1).max(128);

export const ConnectParams = z.object({
  minProtocol: z.number().int(),
  maxProtocol: z.number().int(),
  client: z.object({ id: NodeId, version: z.string(), platform: z.string(), mode: z.string(), instanceId: NodeId.optional(), displayName: z.string().optional() }).loose(),
  role: z.enum(["operator", "node"]).default("operator"),
  scopes: z.array(z.string()).default([]),
  caps: z.array(z.string()).optional(),
  auth: z.object({ token: z.string().optional(), password: z.string().optional() }).loose().optional(),
  nodeId: NodeId.optional(),
}).loose();
export type ConnectParams = z.infer<typeof ConnectParams>;

const Kind = z.enum(["main", "group", "cron", "hook", "node", "other"]);
const Limit = (max: number) => z.number().int().min(1).max(max);
const IdempotencyKey = z.string().min(1).max(256);
/** A session key or sessionId: a blank one would canonicalise to the empty key. */
const SessionRef = z.string().min(1).refine((s) => s.trim().length > 0, "must not be blank");
/** Stored trimmed, as the session tools store it. */
const Label = z.string().trim().min(1, "must not be blank").max(64);
const Channel = z.enum(["webchat", "telegram", "discord", "whatsapp"]);

export const Params = {
  "sessions.list": z.strictObject({
    limit: Limit(100_000).optional(),
    activeMinutes: z.number().positive().optional(),
    kinds: z.array(Kind).optional(),
    spawnedBy: z.string().optional(),
    label: z.string().optional(),
    search: z.string().optional(),
    agentId: z.string().optional(),
    includeGlobal: z.boolean().optional(),
    includeUnknown: z.boolean().optional(),
    /** Sub-agent sessions archived after archiveAfterMinutes (R40) are hidden unless asked for. */
    includeArchived: z.boolean().optional(),
    messageLimit: z.number().int().min(0).max(50).optional(),
  }),
  "sessions.resolve": z.strictObject({ key: SessionRef.optional(), sessionId: SessionRef.optional(), label: z.string().min(1).optional(), agentId: z.string().optional(), spawnedBy: z.string().optional() }),
  "sessions.patch": z.strictObject({
    key: SessionRef,
    sendPolicy: z.enum(["allow", "deny"]).nullable().optional(),
    label: Label.nullable().optional(),
    model: z.string().min(1).nullable().optional(),
    thinkingLevel: z.string().min(1).max(32).nullable().optional(),
    verboseLevel: z.string().min(1).max(32).nullable().optional(),
    spawnedBy: SessionRef.nullable().optional(),
  }),
  "sessions.reset": z.strictObject({ key: SessionRef }),
  "sessions.delete": z.strictObject({ key: SessionRef, deleteTranscript: z.boolean().optional() }),
  "chat.history": z.strictObject({ sessionKey: SessionRef, limit: Limit(1000).optional() }),
  "chat.send": z.strictObject({ sessionKey: SessionRef, message: z.string().min(1, "message required"), idempotencyKey: IdempotencyKey, thinking: z.string().optional(), deliver: z.boolean().optional(), timeoutMs: z.number().int().min(0).optional() }),
  agent: z.strictObject({
    message: z.string().min(1, "message required"),
    idempotencyKey: IdempotencyKey,
    sessionKey: SessionRef.optional(),
    sessionId: SessionRef.optional(),
    agentId: z.string().min(1).optional(),
    deliver: z.boolean().optional(),
    channel: z.union([Channel, z.literal("last")]).optional(),
    to: z.string().min(1).optional(),
    accountId: z.string().min(1).optional(),
    threadId: z.union([z.string(), z.number()]).optional(),
    extraSystemPrompt: z.string().optional(),
    inputProvenance: z.strictObject({ kind: z.enum(["external_user", "inter_session", "internal_system"]), sourceSessionKey: z.string().optional(), sourceChannel: z.string().optional(), sourceTool: z.string().optional() }).optional(),
    lane: z.enum(["main", "nested", "subagent"]).optional(),
    timeout: z.number().min(0).optional(),
    label: Label.optional(),
    spawnedBy: SessionRef.optional(),
    thinking: z.string().optional(),
  }),
  "agent.wait": z.strictObject({ runId: z.string().min(1), timeoutMs: z.number().int().min(0).max(24 * 3600_000).optional() }),
  // Only whitespace chunks to no platform message at all, yet the call would answer "sent".
  send: z.strictObject({ to: z.string().min(1), message: z.string().refine((m) => m.trim() !== "", "message required"), channel: Channel, accountId: z.string().min(1).optional(), threadId: z.union([z.string(), z.number()]).optional(), sessionKey: SessionRef.optional(), idempotencyKey: IdempotencyKey }),
  health: z.strictObject({}),
  status: z.strictObject({}),
  "node.event": z.strictObject({ message: z.string().min(1), idempotencyKey: IdempotencyKey, sessionKey: SessionRef.optional() }),
} as const;

export type MethodName = keyof typeof Params;
export type MethodParams<M extends MethodName> = z.infer<(typeof Params)[M]>;

/** Scope each method needs; admin implies the others, write implies read. */
export const METHOD_SCOPES: Record<MethodName, Scope | "node"> = {
  "sessions.list": "operator.read",
  "sessions.resolve": "operator.read",
  "chat.history": "operator.read",
  health: "operator.read",
  status: "operator.read",
  "chat.send": "operator.write",
  agent: "operator.write",
  "agent.wait": "operator.write",
  send: "operator.write",
  "sessions.patch": "operator.admin",
  "sessions.reset": "operator.admin",
  "sessions.delete": "operator.admin",
  "node.event": "node",
};

/**
 * Scope a chat command sent through `chat.send` needs on top of chat.send's own: one with the
 * effect of an admin method needs admin, or operator.write would reach that method through it —
 * `/send` is `sessions.patch {sendPolicy}`, `/new` and `/reset` are `sessions.reset`. `/stop` is
 * write: it ends runs as starting them is write (the reference's `chat.abort` is write too).
 */
export const COMMAND_SCOPES: Record<ParsedCommand["name"], Scope> = {
  send: "operator.admin",
  new: "operator.admin",
  reset: "operator.admin",
  stop: "operator.write",
  status: "operator.read",
  sid: "operator.read",
  help: "operator.read",
};

/** The FORBIDDEN error of a call (or a command within one) made without the scope it needs. */
export function missingScope(what: string, missing: string): GatewayError {
  return new GatewayError("FORBIDDEN", `${what} requires ${missing}`, { missingScope: missing });
}

export const EVENTS = ["connect.challenge", "tick", "chat", "agent", "shutdown"] as const;

export function hasScope(granted: readonly string[], needed: Scope): boolean {
  if (granted.includes("operator.admin")) return true;
  if (needed === "operator.read") return granted.includes("operator.read") || granted.includes("operator.write");
  return granted.includes(needed);
}

/** "path: message" for every issue, e.g. `limit: Too small: expected number to be >=1`. */
export function describeZodError(err: z.ZodError): string {
  return err.issues
    .map((i) => {
      const where = i.path.length ? i.path.join(".") : "params";
      if (i.code === "unrecognized_keys") return `${where}: unknown field(s) ${i.keys.map((k) => `"${k}"`).join(", ")}`;
      return `${where}: ${i.message}`;
    })
    .join("; ");
}
