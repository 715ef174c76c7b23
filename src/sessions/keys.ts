/**
 * Session key codec (spec R1–R6, interfaces §2 `session.dmScope`). Pure functions only.
 *
 * Stored (canonical) keys, always lowercase:
 *   agent:<agentId>:main                                   direct chats, dmScope "main"       (R1)
 *   agent:<agentId>:direct:<peer>                          dmScope "per-peer"
 *   agent:<agentId>:<channel>:direct:<peer>                dmScope "per-channel-peer"
 *   agent:<agentId>:<channel>:<accountId>:direct:<peer>    dmScope "per-account-channel-peer"
 *   agent:<agentId>:<channel>:group:<id>[:topic:<tid>]     groups                              (R2)
 *   agent:<agentId>:<channel>:channel:<id>                 guild/room channels                 (R2)
 *   agent:<agentId>:subagent:<uuid>                        sub-agents                          (R33)
 *   cron:<jobId>  hook:<uuid>  node-<nodeId>               internal sources, stored bare       (R3–R5)
 *   global                                                 the main bucket when scope=global   (R6)
 */
import type { ChannelId, ChatType } from "../channels/types.js";

/** A canonical session key as stored; only the functions of this module mint one. */
export type SessionKey = string & { readonly __brand: "SessionKey" };

export type SessionKind = "main" | "group" | "cron" | "hook" | "node" | "other";
export const SESSION_KINDS: readonly SessionKind[] = ["main", "group", "cron", "hook", "node", "other"];
export const RESERVED_KEYS = new Set(["global", "unknown"]);
export const MAIN_KEY = "main";
export const DEFAULT_AGENT_ID = "main";
export const DEFAULT_ACCOUNT_ID = "default";

export type DmScope = "main" | "per-peer" | "per-channel-peer" | "per-account-channel-peer";
export type SessionScope = "per-sender" | "global";

const VALID_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/i;

/** Agent ids: lowercase; invalid runs become "-"; empty → "main" (reference §1.1). */
export function normalizeAgentId(raw: string | undefined): string {
  const trimmed = (raw ?? "").trim();
  if (VALID_ID.test(trimmed)) return trimmed.toLowerCase();
  const cleaned = trimmed.toLowerCase().replace(/[^a-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 64);
  return cleaned || DEFAULT_AGENT_ID;
}

export function normalizeAccountId(raw: string | undefined): string {
  const id = normalizeAgentId(raw);
  return raw && raw.trim() ? id : DEFAULT_ACCOUNT_ID;
}

/** Ids inside keys: trimmed, lowercase, no ":" (which would break parsing). */
function keyPart(raw: string): string {
  return raw.trim().toLowerCase().replace(/:/g, "_");
}

export interface ParsedAgentKey {
  agentId: string;
  /** Everything after `agent:<agentId>:`. */
  rest: string;
}

/** `agent:<id>:<rest>` → its parts; anything else (bare keys) → null. */
export function parseAgentKey(key: string): ParsedAgentKey | null {
  const parts = key.split(":");
  if (parts.length < 3 || parts[0] !== "agent" || !parts[1]) return null;
  const rest = parts.slice(2).join(":");
  return rest ? { agentId: parts[1], rest } : null;
}

export function mainKeyFor(agentId: string, scope: SessionScope = "per-sender"): SessionKey {
  return (scope === "global" ? "global" : `agent:${normalizeAgentId(agentId)}:${MAIN_KEY}`) as SessionKey;
}

export interface DirectKeyInput {
  agentId: string;
  channel: ChannelId;
  accountId?: string;
  peerId: string;
  threadId?: string;
  dmScope: DmScope;
  scope?: SessionScope;
}

/** The key of a direct chat, by `session.dmScope` (R1). A DM thread gets a `:thread:<id>` suffix. */
export function directSessionKey(input: DirectKeyInput): SessionKey {
  const agent = normalizeAgentId(input.agentId);
  const peer = keyPart(input.peerId);
  let base: string;
  switch (input.dmScope) {
    case "main":
      base = mainKeyFor(agent, input.scope);
      break;
    case "per-peer":
      base = `agent:${agent}:direct:${peer}`;
      break;
    case "per-channel-peer":
      base = `agent:${agent}:${input.channel}:direct:${peer}`;
      break;
    case "per-account-channel-peer":
      base = `agent:${agent}:${input.channel}:${normalizeAccountId(input.accountId)}:direct:${peer}`;
      break;
  }
  return (input.threadId ? `${base}:thread:${keyPart(input.threadId)}` : base) as SessionKey;
}

export interface GroupKeyInput {
  agentId: string;
  channel: ChannelId;
  chatType: Exclude<ChatType, "direct">;
  peerId: string;
  /** Telegram forum topic. */
  threadId?: string;
}

/** `agent:<agentId>:<channel>:group:<id>` or `…:channel:<id>`, `:topic:<tid>` for forum topics (R2). */
export function groupSessionKey(input: GroupKeyInput): SessionKey {
  const base = `agent:${normalizeAgentId(input.agentId)}:${input.channel}:${input.chatType}:${keyPart(input.peerId)}`;
  return (input.threadId ? `${base}:topic:${keyPart(input.threadId)}` : base) as SessionKey;
}

export function subagentSessionKey(agentId: string, uuid: string): SessionKey {
  return `agent:${normalizeAgentId(agentId)}:subagent:${uuid.toLowerCase()}` as SessionKey;
}
export function cronSessionKey(jobId: string): SessionKey {
  return `cron:${keyPart(jobId)}` as SessionKey;
}
export function hookSessionKey(id: string): SessionKey {
  return `hook:${keyPart(id)}` as SessionKey;
}
export function nodeSessionKey(nodeId: string): SessionKey {
  return `node-${keyPart(nodeId)}` as SessionKey;
}

export interface CanonicalizeContext {
  /** The agent on whose behalf the key is resolved (the caller's agent for tools). */
  agentId: string;
  scope: SessionScope;
}

/**
 * Any key a caller may pass → the stored key. `main` is the *calling* agent's main session (R1;
 * the reference resolves it to the default agent — a quirk we do not copy). `agent:<id>:main`
 * becomes `global` under scope=global (R6). Bare internal keys (`cron:…`, `hook:…`, `node-…`)
 * stay bare, and `agent:<id>:cron:…` style spellings of them are accepted too.
 */
export function canonicalizeKey(raw: string, ctx: CanonicalizeContext): SessionKey {
  const key = raw.trim().toLowerCase();
  if (key === MAIN_KEY) return mainKeyFor(ctx.agentId, ctx.scope);
  if (RESERVED_KEYS.has(key)) return key as SessionKey;
  const parsed = parseAgentKey(key);
  if (parsed) {
    if (parsed.rest === MAIN_KEY) return mainKeyFor(parsed.agentId, ctx.scope);
    if (isInternalRest(parsed.rest)) return parsed.rest as SessionKey;
    return key as SessionKey;
  }
  return key as SessionKey;
}

function isInternalRest(rest: string): boolean {
  return rest.startsWith("cron:") || rest.startsWith("hook:") || rest.startsWith("node-") || rest.startsWith("node:");
}

/** What a caller sees: `global` is shown as `main` so callers never see it (R6). */
export function displayKey(key: string): string {
  return key === "global" ? MAIN_KEY : key;
}

/** Does this string look like a session key rather than a sessionId? (reference §3.0) */
export function looksLikeSessionKey(value: string): boolean {
  const v = value.trim().toLowerCase();
  return (
    v === MAIN_KEY ||
    RESERVED_KEYS.has(v) ||
    /^(agent|cron|hook|node|acp):/.test(v) ||
    v.startsWith("node-") ||
    v.includes(":group:") ||
    v.includes(":channel:")
  );
}

/** R1–R6 classification, done on the part after `agent:<id>:` (reference §1.5 QUIRK fixed). */
export function classifySessionKind(key: string): SessionKind {
  if (key === "global") return "main";
  const rest = parseAgentKey(key)?.rest ?? key;
  if (rest === MAIN_KEY || rest.startsWith(`${MAIN_KEY}:thread:`)) return "main";
  if (rest.startsWith("cron:")) return "cron";
  if (rest.startsWith("hook:")) return "hook";
  if (rest.startsWith("node-") || rest.startsWith("node:")) return "node";
  if (/(^|:)(group|channel):/.test(rest)) return "group";
  return "other";
}

export function isSubagentKey(key: string): boolean {
  const rest = parseAgentKey(key)?.rest ?? key;
  return rest.startsWith("subagent:");
}

/**
 * The agent owning a key: the `agent:<id>:` prefix, normalised as every agent id is (reference
 * §1.1), else `fallback` (bare internal keys). The id names the transcripts' directory, and a key
 * is typed by whoever calls the gateway: `agent:../../x:chat` must not reach outside the state dir.
 */
export function agentIdFromKey(key: string, fallback: string): string {
  const parsed = parseAgentKey(key);
  return parsed ? normalizeAgentId(parsed.agentId) : fallback;
}

/** An agent id that is safe as a directory name: what normalizeAgentId keeps as it is (case aside). */
export function isValidAgentId(id: string): boolean {
  return VALID_ID.test(id);
}

/** Channel named inside a group key (`agent:a:<channel>:group:<id>`), if any. */
export function channelFromGroupKey(key: string): string | undefined {
  const rest = parseAgentKey(key)?.rest ?? key;
  const m = /^([a-z0-9_-]+):(group|channel):/.exec(rest);
  return m?.[1];
}

/** Chat type implied by a key (group/channel markers), if any. */
export function chatTypeFromKey(key: string): ChatType | undefined {
  const rest = parseAgentKey(key)?.rest ?? key;
  if (/(^|:)group:/.test(rest)) return "group";
  if (/(^|:)channel:/.test(rest)) return "channel";
  return undefined;
}

export const ROW_CHANNELS = ["whatsapp", "telegram", "discord", "signal", "imessage", "webchat", "internal", "unknown"] as const;
export type RowChannel = (typeof ROW_CHANNELS)[number];

/**
 * The row `channel` field (R23–R26): internal sources → "internal"; groups → the channel recorded
 * on the entry; direct chats → lastChannel; otherwise "unknown".
 */
export function deriveRowChannel(key: string, entry: { channel?: string; lastChannel?: string; deliveryContext?: { channel?: string } }): RowChannel {
  const kind = classifySessionKind(key);
  if (kind === "cron" || kind === "hook" || kind === "node") return "internal";
  const candidate = kind === "group" ? entry.channel ?? channelFromGroupKey(key) : entry.deliveryContext?.channel ?? entry.lastChannel ?? entry.channel;
  return (ROW_CHANNELS as readonly string[]).includes(candidate ?? "") ? (candidate as RowChannel) : "unknown";
}
