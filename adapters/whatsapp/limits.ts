/**
 * Outbound pacing for WhatsApp. WhatsApp publishes no send limits for WhatsApp Web clients, and
 * an account that bursts like a bot risks being banned, which no retry can undo. So the defaults
 * pace like a fast human: at most one message per second into any one chat (a long reply is
 * delivered chunk by chunk at reading speed) and 20 per second across all chats, and the
 * operator can tighten either through `channels.whatsapp.rateLimit`.
 */
import type { RateLimit } from "../../src/channels/types.js";
import type { WhatsAppConfig } from "../../src/config/schema.js";
import { limitAtRate } from "../../src/delivery/rate-limiter.js";
import { jidForTarget } from "./jid.js";

export const DEFAULT_PER_CHAT_PER_SECOND = 1;
export const DEFAULT_GLOBAL_PER_SECOND = 20;

export function whatsappRateLimits(to: string, cfg: WhatsAppConfig["rateLimit"]): RateLimit[] {
  // "+1555…" and "1555…@s.whatsapp.net" are the same chat, so they must share a bucket.
  const chat = `chat:${jidForTarget(to) ?? to}`;
  const limits = [
    limitAtRate(chat, cfg.perChatPerSecond ?? DEFAULT_PER_CHAT_PER_SECOND, 1_000),
    limitAtRate("global", cfg.globalPerSecond ?? DEFAULT_GLOBAL_PER_SECOND, 1_000),
  ];
  if (cfg.perChatPerMinute) limits.push(limitAtRate(`${chat}:minute`, cfg.perChatPerMinute, 60_000));
  return limits;
}
