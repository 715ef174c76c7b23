/**
 * Pure translation of a Telegram Update into the core's InboundMessage. No I/O, no telegraf:
 * everything here is decided from the update and the bot's own identity, so it is tested as a
 * table (test/adapters/telegram-map-update.test.ts).
 */
import type { AlbumItem } from "../../src/channels/album-gate.js";
import { mediaPlaceholder, withMedia, type Media } from "../../src/channels/media-placeholder.js";
import type { InboundMessage } from "../../src/channels/types.js";
import type { TgEntity, TgMessage, TgUpdate } from "./wire.js";

export interface BotIdentity {
  id: number;
  username: string;
}

export type IgnoreReason = "channel_post" | "own_message" | "no_text" | "no_sender" | "unsupported" | "other_bot_command";

/** `album`: the message is an item of an album, to be answered once (AlbumGate). */
export type MapResult = { kind: "message"; msg: InboundMessage; album?: AlbumItem } | { kind: "ignore"; reason: IgnoreReason };

/** Telegram's forum "General" topic. Sends must omit it (Telegram rejects message_thread_id=1). */
export const GENERAL_TOPIC_ID = "1";

export function mapUpdate(update: TgUpdate, bot: BotIdentity, accountId: string): MapResult {
  if (update.channel_post || update.edited_channel_post) return ignore("channel_post");
  const edited = update.message === undefined && update.edited_message !== undefined;
  const m = update.message ?? update.edited_message;
  if (!m) return ignore("unsupported");
  if (m.chat.type === "channel") return ignore("channel_post");
  if (!m.from) return ignore("no_sender");
  if (m.from.id === bot.id) return ignore("own_message");

  const raw = m.text ?? m.caption ?? "";
  const media = mediaOf(m);
  // Neither words nor media: a service message (someone joined, a pin, a topic created…).
  if (raw.trim() === "" && !media) return ignore("no_text");
  const entities = (m.text !== undefined ? m.entities : m.caption_entities) ?? [];

  // A forward relays someone else's mention of the bot: content, not addressing.
  const addressed = isForwarded(m) ? raw : stripLeadingMention(raw, entities, bot);
  const command = normalizeCommand(addressed, bot.username);
  // `/stop@OtherBot` is addressed to another bot in the chat: neither a command of ours nor a
  // prompt, even where every message is answered (with privacy mode on Telegram would not even
  // deliver it). A forward only relays such text, and is content like any other.
  if (!command.addressedToUs && !isForwarded(m) && COMMAND_FOR_A_BOT.test(addressed)) return ignore("other_bot_command");
  const direct = m.chat.type === "private";
  const threadId = resolveThreadId(m);

  const msg: InboundMessage = {
    channel: "telegram",
    accountId,
    chatType: direct ? "direct" : "group",
    peerId: String(direct ? m.from.id : m.chat.id),
    senderId: String(m.from.id),
    text: media ? withMedia(command.text, [mediaPlaceholder(media)]) : command.text,
    messageId: messageIdOf(m, edited),
    // A forward carries someone else's mentions: relaying them does not address the bot (as on Discord).
    wasMentioned: !isForwarded(m) && (command.addressedToUs || mentionsBot(raw, entities, bot) || isReplyToBot(m, bot)),
    to: String(m.chat.id),
    timestamp: (edited ? (m.edit_date ?? m.date) : m.date) * 1000,
  };
  if (threadId !== undefined) msg.threadId = threadId;
  const senderName = displayName(m.from.first_name, m.from.last_name) ?? m.from.username;
  if (senderName) msg.senderName = senderName;
  if (!direct && m.chat.title) msg.groupName = m.chat.title;
  if (isForwarded(m)) msg.forwarded = true;
  if (edited) msg.edited = true;
  if (m.media_group_id === undefined) return { kind: "message", msg };
  return { kind: "message", msg, album: { album: `${m.chat.id}:${m.media_group_id}`, captioned: raw.trim() !== "" } };
}

/** What a message carried besides words; undefined for a text or a service message. */
function mediaOf(m: TgMessage): Media | undefined {
  if (m.photo) return { kind: "photo" };
  // An animation fills `document` too, and a venue `location`: each is looked at first.
  if (m.animation) return { kind: "GIF" };
  if (m.video) return { kind: "video" };
  if (m.video_note) return { kind: "video message" };
  if (m.voice) return { kind: "voice message" };
  if (m.audio) return { kind: "audio", name: m.audio.title ?? m.audio.file_name };
  if (m.document) return { kind: "document", name: m.document.file_name };
  if (m.sticker) return { kind: "sticker", name: m.sticker.emoji };
  if (m.venue) return { kind: "location", name: m.venue.title };
  if (m.location) return { kind: m.location.live_period ? "live location" : "location" };
  if (m.contact) return { kind: "contact", name: displayName(m.contact.first_name, m.contact.last_name) };
  if (m.poll) return { kind: "poll", name: m.poll.question };
  return undefined;
}

/**
 * Topic id for session routing. Forum supergroups: the topic for topic messages, otherwise the
 * General topic (its messages carry no thread id). Private chats: Bot API topics in DMs. A plain
 * supergroup's message_thread_id only names a reply chain, so it must not split the session.
 */
export function resolveThreadId(m: TgMessage): string | undefined {
  if (m.chat.type === "private") return m.message_thread_id !== undefined ? String(m.message_thread_id) : undefined;
  if (m.chat.type === "supergroup" && m.chat.is_forum) {
    return m.is_topic_message && m.message_thread_id !== undefined ? String(m.message_thread_id) : GENERAL_TOPIC_ID;
  }
  return undefined;
}

/** A message that starts with `/cmd@botname`: a command addressed to one bot of the chat. */
const COMMAND_FOR_A_BOT = /^\/([A-Za-z0-9_]{1,32})@([A-Za-z0-9_]+)(?=\s|$)/;

/**
 * `/cmd@OurBot args` → `/cmd args`. A command suffixed with another bot's name is left untouched,
 * so the core's command parser does not mistake it for ours.
 */
export function normalizeCommand(text: string, botUsername: string): { text: string; addressedToUs: boolean } {
  const m = COMMAND_FOR_A_BOT.exec(text);
  if (!m || m[2].toLowerCase() !== botUsername.toLowerCase()) return { text, addressedToUs: false };
  return { text: `/${m[1]}${text.slice(m[0].length)}`, addressedToUs: true };
}

/** Entities are authoritative: Telegram's server marks every @mention, so no text scanning. */
export function mentionsBot(text: string, entities: readonly TgEntity[], bot: BotIdentity): boolean {
  return entities.some((e) => isBotMention(text, e, bot));
}

function isBotMention(text: string, e: TgEntity, bot: BotIdentity): boolean {
  if (e.type === "mention") return text.slice(e.offset, e.offset + e.length).toLowerCase() === `@${bot.username}`.toLowerCase();
  if (e.type === "text_mention") return e.user?.id === bot.id;
  return false;
}

/**
 * A leading mention of the bot is addressing, not content: in a group "@bot /send off" must read
 * as "/send off" (as on Discord), or an owner's command would run as a prompt and the chat would
 * not be silenced. A message that is only the mention keeps it, so it still says something.
 */
function stripLeadingMention(text: string, entities: readonly TgEntity[], bot: BotIdentity): string {
  const start = text.length - text.trimStart().length;
  const lead = entities.find((e) => e.offset === start && isBotMention(text, e, bot));
  if (!lead) return text;
  const rest = text.slice(lead.offset + lead.length).replace(/^[\s,:]+/, "");
  return rest || text;
}

/**
 * In forum topics every message without an explicit reply "replies" to the topic's creation
 * service message; if the bot created the topic that would count as a mention of everything.
 */
function isReplyToBot(m: TgMessage, bot: BotIdentity): boolean {
  const r = m.reply_to_message;
  return r !== undefined && r.from?.id === bot.id && r.forum_topic_created === undefined;
}

function isForwarded(m: TgMessage): boolean {
  return (
    m.forward_origin !== undefined ||
    m.forward_from !== undefined ||
    m.forward_from_chat !== undefined ||
    m.forward_sender_name !== undefined ||
    m.forward_date !== undefined
  );
}

/**
 * An edit keeps Telegram's message_id, so it gets its own suffix: otherwise the core's inbound
 * dedupe (by messageId) would drop the edit before the core sees it (an edit is no prompt, but
 * the owner who edits a message into a command is told to send it anew). edit_date keeps it
 * stable across re-delivery of the same update.
 */
function messageIdOf(m: TgMessage, edited: boolean): string {
  const base = `${m.chat.id}:${m.message_id}`;
  return edited ? `${base}:edit:${m.edit_date ?? 0}` : base;
}

function displayName(first?: string, last?: string): string | undefined {
  const name = [first, last].filter((s) => s && s.trim()).join(" ").trim();
  return name || undefined;
}

function ignore(reason: IgnoreReason): MapResult {
  return { kind: "ignore", reason };
}
