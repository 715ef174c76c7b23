/**
 * A session entry: everything the store keeps about one conversation (spec "Row shape").
 */
import type { ChannelId, ChatType } from "../channels/types.js";
import type { SendDecision } from "../policy/send-policy.js";

/** Where replies and announces for a session go (normalised `{channel, to, accountId, threadId}`). */
export interface DeliveryContext {
  channel: ChannelId;
  to: string;
  accountId?: string;
  threadId?: string;
}

export interface SessionEntry {
  key: string;
  sessionId: string;
  agentId: string;
  createdAt: number;
  updatedAt: number;
  /** Chat type of the conversation (set for chats; absent for internal sessions). */
  chatType?: ChatType;
  /** The channel recorded on the entry (groups; R23). */
  channel?: ChannelId;
  displayName?: string;
  label?: string;
  /** Per-session model override ("provider/model"). */
  model?: string;
  /** Model used by the last run. */
  lastModel?: string;
  contextTokens?: number;
  inputTokens?: number;
  outputTokens?: number;
  totalTokens?: number;
  thinkingLevel?: string;
  verboseLevel?: string;
  systemSent?: boolean;
  abortedLastRun?: boolean;
  /** R27 override; absent = inherit the config. */
  sendPolicy?: SendDecision;
  lastChannel?: ChannelId;
  lastTo?: string;
  lastAccountId?: string;
  lastThreadId?: string;
  deliveryContext?: DeliveryContext;
  /** Key of the session whose sessions_spawn created this one (R42). */
  spawnedBy?: string;
  /** Set when a sub-agent session was archived (R40). */
  archivedAt?: number;
}

export type SessionPatch = Partial<Omit<SessionEntry, "key" | "sessionId" | "createdAt">>;

/**
 * Whether a recorded route is exactly this destination: channel, bot account, chat and thread (a
 * forum topic is not its group, one bot account's chat is not another's).
 */
export function sameDestination(dc: DeliveryContext | undefined, target: { channel: string; accountId: string; to: string; threadId?: string }): boolean {
  return dc !== undefined && dc.channel === target.channel && dc.to === target.to && (dc.accountId ?? "default") === target.accountId && dc.threadId === target.threadId;
}

/** normalise: trim; drop empty fields; all-empty → undefined (reference §2.4). */
export function normalizeDeliveryContext(ctx: Partial<DeliveryContext> | undefined): DeliveryContext | undefined {
  if (!ctx) return undefined;
  const to = ctx.to?.trim();
  const channel = ctx.channel?.trim().toLowerCase() as ChannelId | undefined;
  if (!channel || !to) return undefined;
  const out: DeliveryContext = { channel, to };
  const accountId = ctx.accountId?.trim();
  if (accountId) out.accountId = accountId;
  const threadId = ctx.threadId === undefined ? undefined : String(ctx.threadId).trim();
  if (threadId) out.threadId = threadId;
  return out;
}
