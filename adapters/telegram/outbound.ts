/** Pure construction of outbound Bot API payloads and the send limits that apply to a target. */
import { type ChatType, type OutboundTarget, PlatformError, type RateLimit } from "../../src/channels/types.js";
import type { TelegramConfig } from "../../src/config/schema.js";
import { limitAtRate } from "../../src/delivery/rate-limiter.js";
import { GENERAL_TOPIC_ID } from "./map-update.js";

export interface SendMessageParams {
  chat_id: string;
  text: string;
  message_thread_id?: number;
  reply_parameters?: { message_id: number; allow_sending_without_reply: boolean };
}

export interface ChatActionParams {
  chat_id: string;
  action: "typing";
  message_thread_id?: number;
}

export function sendMessageParams(target: OutboundTarget, text: string): SendMessageParams {
  const params: SendMessageParams = { chat_id: target.to, text };
  // Telegram rejects message_thread_id=1 for sends ("message thread not found"); without a thread
  // id a forum message lands in General anyway.
  if (target.threadId !== undefined && target.threadId !== GENERAL_TOPIC_ID) params.message_thread_id = threadNumber(target);
  const replyTo = replyMessageId(target.replyToMessageId);
  // The original may have been deleted meanwhile; a reply is a nicety, not worth failing the send.
  if (replyTo !== undefined) params.reply_parameters = { message_id: replyTo, allow_sending_without_reply: true };
  return params;
}

/** Chat actions accept the General topic id, and keep the indicator inside the right topic. */
export function chatActionParams(target: OutboundTarget): ChatActionParams {
  const params: ChatActionParams = { chat_id: target.to, action: "typing" };
  if (target.threadId !== undefined) params.message_thread_id = threadNumber(target);
  return params;
}

/** Accepts our own `<chat>:<message>[:edit:<date>]` ids as well as a bare message id. */
export function replyMessageId(id: string | undefined): number | undefined {
  if (!id) return undefined;
  const parts = id.split(":");
  const n = Number(parts.length > 1 ? parts[1] : parts[0]);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

function threadNumber(target: OutboundTarget): number {
  const n = Number(target.threadId);
  if (!Number.isSafeInteger(n) || n <= 0) throw new PlatformError("telegram", "invalid", `threadId "${target.threadId}" is not a Telegram topic id`);
  return n;
}

/** Groups and supergroups have negative ids; public channels and groups may be addressed as @name. */
export function isGroupTarget(to: string): boolean {
  return to.startsWith("-") || to.startsWith("@");
}

/**
 * What a chat id says of the chat: a group (negative id, or a public @name), a private chat (a
 * user's positive id), else nothing — for the send policy's `chatType` rules.
 */
export function chatTypeOfTarget(to: string): ChatType | undefined {
  if (isGroupTarget(to)) return "group";
  return /^\d+$/.test(to) ? "direct" : undefined;
}

/**
 * A send without a topic and one to the General topic land in the same place (Telegram takes no
 * message_thread_id=1: sendMessageParams omits it), so each is the other's spelling.
 */
export function sameChatTargets(target: OutboundTarget): OutboundTarget[] {
  if (target.threadId === undefined) return [{ ...target, threadId: GENERAL_TOPIC_ID }];
  if (target.threadId !== GENERAL_TOPIC_ID) return [];
  const { threadId: _general, ...group } = target;
  return [group];
}

/**
 * Telegram's published bot limits (core.telegram.org/bots/faq): about 1 message per second in a
 * private chat, 20 per minute in a group, 30 per second overall. Config may tighten or loosen them.
 */
export function rateLimitsFor(target: OutboundTarget, limits: TelegramConfig["rateLimit"] = {}): RateLimit[] {
  const key = `chat:${target.to}`;
  const chat = isGroupTarget(target.to) ? limitAtRate(key, limits.perChatPerMinute ?? 20, 60_000) : limitAtRate(key, limits.perChatPerSecond ?? 1, 1000);
  return [chat, limitAtRate("global", limits.globalPerSecond ?? 30, 1000)];
}
