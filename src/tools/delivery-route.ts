/**
 * Where a session's messages go: its delivery context, else its last route. Pure.
 */
import type { OutboundTarget } from "../channels/types.js";
import { normalizeDeliveryContext, type DeliveryContext, type SessionEntry } from "../sessions/entry.js";

export function deliveryContextOf(entry: SessionEntry | undefined): DeliveryContext | undefined {
  if (!entry) return undefined;
  return (
    normalizeDeliveryContext(entry.deliveryContext) ??
    normalizeDeliveryContext({ channel: entry.lastChannel, to: entry.lastTo, accountId: entry.lastAccountId, threadId: entry.lastThreadId })
  );
}

export function outboundTargetOf(ctx: DeliveryContext): OutboundTarget {
  return { channel: ctx.channel, accountId: ctx.accountId ?? "default", to: ctx.to, ...(ctx.threadId ? { threadId: ctx.threadId } : {}) };
}
