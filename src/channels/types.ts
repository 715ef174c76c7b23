/**
 * The narrow contract between the core and a chat platform edge (DESIGN "Adapters are thin").
 * Adapters turn platform events into InboundMessage and implement send(); session keys are
 * derived in the core from these fields, never inside an adapter.
 */
export type ChannelId = "webchat" | "telegram" | "discord" | "whatsapp";
export const CHANNEL_IDS: readonly ChannelId[] = ["webchat", "telegram", "discord", "whatsapp"];

/** direct = a one-to-one chat; group = a group chat; channel = a guild/room channel (Discord). */
export type ChatType = "direct" | "group" | "channel";

/**
 * The latest time a JavaScript Date can hold (ECMA-262: ±8.64e15 ms around 1970). A later
 * timestamp cannot be written as an ISO time in a transcript line: the router rejects one.
 */
export const MAX_TIMESTAMP_MS = 8.64e15;

/** The longest display name (senderName, groupName) the router takes, in characters (code points). */
export const MAX_NAME_CHARS = 1024;

export interface InboundMessage {
  channel: ChannelId;
  /** The bot account on that platform that received it ("default" unless configured). */
  accountId: string;
  chatType: ChatType;
  /**
   * The conversation id: for direct chats the sender's platform id (Telegram user id, Discord
   * user id, WhatsApp E.164 or LID), for groups the group/channel id (Telegram chat id, Discord
   * channel or thread id, WhatsApp group JID).
   */
  peerId: string;
  /** Telegram forum topic id (groups) or DM thread id; absent otherwise. */
  threadId?: string;
  /** Parent conversation for threads (Discord thread → parent channel id), for bindings. */
  parentPeerId?: string;
  /** The platform's authenticated sender id; the ONLY field used for owner checks. */
  senderId: string;
  senderName?: string;
  /** Group display label (e.g. "#general", group subject) when known. */
  groupName?: string;
  text: string;
  /** Platform message id; with channel+accountId it is the inbound dedupe key. */
  messageId: string;
  /** Bot explicitly mentioned, or a reply to the bot's own message. */
  wasMentioned: boolean;
  /** Where a reply goes: platform-specific target (Telegram chat id, Discord channel id, JID). */
  to: string;
  /** Platform timestamp (ms since 1970): 0 (unknown: the time it is processed) to MAX_TIMESTAMP_MS. */
  timestamp: number;
  /** A forwarded message: never treated as a command. */
  forwarded?: boolean;
  /**
   * An edit of an earlier message: neither a command nor a prompt (an owner who edits a message
   * into a command is told to send it anew).
   */
  edited?: boolean;
}

export interface OutboundTarget {
  channel: ChannelId;
  accountId: string;
  to: string;
  threadId?: string;
  /** Platform message id to reply to, if the platform supports it. */
  replyToMessageId?: string;
}

export interface SendOptions {
  /** Stable per chunk across retries and restarts. */
  idempotencyKey?: string;
  /**
   * Given to adapters that declare `reportsWire`: records the send as started in the outbox's
   * journal. Never throws.
   */
  onWire?: () => void;
}

export interface SendReceipt {
  /** Platform message id of the delivered message. */
  messageId: string;
}

export interface ChannelHealth {
  connected: boolean;
  lastInboundAt: number | null;
  lastError: string | null;
}

/** Closed set of platform failures; the outbox decides retry vs give up from `code`. */
export type PlatformErrorCode = "rate_limited" | "auth" | "forbidden" | "not_found" | "invalid" | "transport";

export class PlatformError extends Error {
  readonly channel: ChannelId;
  readonly code: PlatformErrorCode;
  readonly retryAfterMs?: number;
  /**
   * The request reached the platform and no answer came: it may have been delivered. Repeating it
   * is safe only where the platform dedupes (ChannelAdapter.idempotentSends).
   */
  readonly outcomeUnknown: boolean;
  constructor(channel: ChannelId, code: PlatformErrorCode, message: string, opts: { cause?: unknown; retryAfterMs?: number; outcomeUnknown?: boolean } = {}) {
    super(`${channel}: ${message}`, { cause: opts.cause });
    this.name = "PlatformError";
    this.channel = channel;
    this.code = code;
    this.retryAfterMs = opts.retryAfterMs;
    this.outcomeUnknown = opts.outcomeUnknown ?? false;
  }
  /** transport and rate limits are worth retrying; the rest is permanent. */
  get retryable(): boolean {
    return this.code === "transport" || this.code === "rate_limited";
  }
}

/**
 * What the core hands an adapter at construction. `onInbound` resolves once the message is
 * durably accepted (recorded for processing); an adapter that tracks a platform offset
 * (Telegram update_id) advances it only after that.
 */
export interface AdapterContext {
  onInbound(msg: InboundMessage): Promise<void>;
  /** Native command (Discord interaction, Telegram menu) — see NativeCommand. */
  onNativeCommand?(cmd: NativeCommand): Promise<string>;
  /** Small durable key/value space for the adapter (offsets, auth state). */
  kv: AdapterKv;
  /** Already bound to `channel` and `accountId`: a child re-binding them would print each key twice. */
  log: import("pino").Logger;
}

export interface AdapterKv {
  get<T>(key: string): Promise<T | undefined>;
  set<T>(key: string, value: T): Promise<void>;
  delete(key: string): Promise<void>;
}

/** A native slash command (Discord application command) acting on the chat it was used in. */
export interface NativeCommand {
  /** The conversation the command was used in, same fields as an inbound message. */
  origin: Omit<InboundMessage, "text" | "wasMentioned">;
  /** Command text as the text form would be typed, e.g. "/send off". */
  text: string;
}

export interface ChannelAdapter {
  readonly channel: ChannelId;
  readonly accountId: string;
  /** Max characters per message on this platform (config textChunkLimit). */
  readonly textChunkLimit: number;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Send ONE chunk (already within textChunkLimit). Throws PlatformError. Only the outbox calls this. */
  send(target: OutboundTarget, text: string, opts?: SendOptions): Promise<SendReceipt>;
  /**
   * The platform dedupes sends by `SendOptions.idempotencyKey` (Discord's enforce_nonce), so a
   * send whose outcome is unknown after a crash may be repeated safely.
   */
  readonly idempotentSends?: boolean;
  /**
   * Called by the outbox before a send is journaled as started and send() is called: resolves
   * once send() can put the request on the wire at once (a connection is open), so that a kill
   * between the journal line and the platform receiving the send stays a window of microseconds.
   * Must not reject; a platform that cannot get ready lets send() fail as usual.
   */
  prepareSend?(target: OutboundTarget): Promise<void>;
  /**
   * send() calls `opts.onWire` itself, no later than the first byte of its request can leave the
   * process (and not at all when it fails before that), so the journal line goes down at the last
   * moment instead of before send() is entered. Without it the outbox writes the line first.
   */
  readonly reportsWire?: boolean;
  /** Best-effort typing indicator while a run works. */
  typing?(target: OutboundTarget): Promise<void>;
  /**
   * The chat type of a destination where the platform's ids tell it (a Telegram group's negative
   * id, a WhatsApp group JID); undefined where they do not. The send policy's `chatType` rules
   * match on it for a delivery outside its session's own chat (Outbox.evaluateDelivery).
   */
  chatTypeOf?(target: OutboundTarget): ChatType | undefined;
  /**
   * Other targets this platform delivers to the same place (Telegram: a send without a topic
   * lands in a forum's General topic), so that the sessions living there are found by any of
   * them for the send policy (Outbox.evaluateDelivery).
   */
  sameChatTargets?(target: OutboundTarget): OutboundTarget[];
  health(): ChannelHealth;
  /**
   * The platform's published send limits that apply to a target, as token buckets the outbox
   * keeps under (so we never collect 429s). `key` scopes the bucket ("chat:<to>", "global").
   */
  rateLimitsFor?(target: OutboundTarget): RateLimit[];
}

export interface RateLimit {
  key: string;
  /** At most `count` sends per `intervalMs`. */
  count: number;
  intervalMs: number;
}
