/**
 * Baileys `messages.upsert` entry → InboundMessage. Only type imports from Baileys (see jid.ts).
 */
import type { WAMessage, proto } from "@whiskeysockets/baileys";
import type { AlbumGate } from "../../src/channels/album-gate.js";
import { mediaPlaceholder, withMedia, type Media } from "../../src/channels/media-placeholder.js";
import { MAX_NAME_CHARS, MAX_TIMESTAMP_MS, type InboundMessage } from "../../src/channels/types.js";
import { jidKind, normalizeJid, resolveIdentity, sameUser } from "./jid.js";

/** Our own account as Baileys reports it in `sock.user` (either may be unknown before login). */
export interface SelfIdentity {
  pn?: string;
  lid?: string;
}

export interface MapContext {
  accountId: string;
  self: SelfIdentity;
  /** Ids of messages this adapter sent: a reply quoting one of them is an implicit mention. */
  isOwnMessageId(id: string): boolean;
  /** Phone JID for a LID when some mapping is known (learned from keys or Baileys' lidMapping). */
  lookupPn(lid: string): Promise<string | undefined>;
  /** Answers each album once (a WhatsApp album comes as one message per photo or video). */
  albums: AlbumGate;
  /** Group subject, when it is already known without a network round trip. */
  groupName?(groupJid: string): string | undefined;
}

interface ExtractedContent {
  /** The sender's words: the text, or a media caption ("" for media without one). */
  text: string;
  /** What the message carried besides words. */
  media: Media | undefined;
  contextInfo?: proto.IContextInfo | null;
  edited: boolean;
  /** The id of the album message this item belongs to. */
  album: string | undefined;
}

type ContextInfo = proto.IContextInfo | null | undefined;

const MESSAGE_EDIT = 14; // proto.Message.ProtocolMessage.Type.MESSAGE_EDIT
const MEDIA_ALBUM = 1; // proto.MessageAssociation.AssociationType.MEDIA_ALBUM

/** The wrapper WhatsApp put around real content (disappearing, view-once, captioned document, edit, album item). */
function wrapperOf(m: proto.IMessage): proto.Message.IFutureProofMessage | null | undefined {
  return m.ephemeralMessage ?? m.viewOnceMessage ?? m.viewOnceMessageV2 ?? m.viewOnceMessageV2Extension ?? m.documentWithCaptionMessage ?? m.editedMessage ?? m.associatedChildMessage;
}

/** Peels the wrappers off real content. */
function unwrap(message: proto.IMessage | null | undefined): proto.IMessage | undefined {
  let m = message ?? undefined;
  // Bounded like Baileys' normalizeMessageContent, so a malicious nesting cannot spin.
  for (let i = 0; i < 5 && m; i++) {
    const inner = wrapperOf(m);
    if (!inner?.message) break;
    m = inner.message;
  }
  return m;
}

/**
 * The album an item belongs to: WhatsApp sends an album as an album message (which says only how
 * many items follow) and then each item, linked to it, at whichever wrapper level.
 */
function albumOf(message: proto.IMessage | null | undefined): string | undefined {
  let m = message ?? undefined;
  for (let i = 0; i < 6 && m; i++) {
    const association = m.messageContextInfo?.messageAssociation;
    if (association?.associationType === MEDIA_ALBUM && association.parentMessageKey?.id) return association.parentMessageKey.id;
    m = wrapperOf(m)?.message ?? undefined;
  }
  return undefined;
}

/** The words of a message: plain, extended (links, mentions, replies), or a media caption. */
function wordsOf(m: proto.IMessage): { text: string; contextInfo: ContextInfo } | undefined {
  const candidates: Array<[string | null | undefined, ContextInfo]> = [
    [m.conversation, undefined],
    [m.extendedTextMessage?.text, m.extendedTextMessage?.contextInfo],
    [m.imageMessage?.caption, m.imageMessage?.contextInfo],
    [m.videoMessage?.caption, m.videoMessage?.contextInfo],
    [m.documentMessage?.caption, m.documentMessage?.contextInfo],
    [m.liveLocationMessage?.caption, m.liveLocationMessage?.contextInfo],
  ];
  for (const [text, contextInfo] of candidates) {
    if (typeof text === "string" && text.trim() !== "") return { text, contextInfo };
  }
  return undefined;
}

/** What a message carried besides words, and the context (mentions, a quote) it came with. */
function mediaOf(m: proto.IMessage): { media: Media; contextInfo: ContextInfo } | undefined {
  const found = (media: Media, contextInfo: ContextInfo) => ({ media, contextInfo });
  if (m.imageMessage) return found({ kind: "photo" }, m.imageMessage.contextInfo);
  if (m.videoMessage) return found({ kind: m.videoMessage.gifPlayback ? "GIF" : "video" }, m.videoMessage.contextInfo);
  if (m.ptvMessage) return found({ kind: "video message" }, m.ptvMessage.contextInfo);
  if (m.audioMessage) return found({ kind: m.audioMessage.ptt ? "voice message" : "audio" }, m.audioMessage.contextInfo);
  if (m.documentMessage) return found({ kind: "document", name: m.documentMessage.fileName ?? m.documentMessage.title }, m.documentMessage.contextInfo);
  if (m.stickerMessage) return found({ kind: "sticker" }, m.stickerMessage.contextInfo);
  if (m.locationMessage) return found({ kind: "location", name: m.locationMessage.name ?? m.locationMessage.address }, m.locationMessage.contextInfo);
  if (m.liveLocationMessage) return found({ kind: "live location" }, m.liveLocationMessage.contextInfo);
  if (m.contactMessage) return found({ kind: "contact", name: m.contactMessage.displayName }, m.contactMessage.contextInfo);
  if (m.contactsArrayMessage) return found({ kind: "contact", name: m.contactsArrayMessage.displayName }, m.contactsArrayMessage.contextInfo);
  const poll = m.pollCreationMessage ?? m.pollCreationMessageV2 ?? m.pollCreationMessageV3 ?? m.pollCreationMessageV5;
  if (poll) return found({ kind: "poll", name: poll.name }, poll.contextInfo);
  return undefined;
}

/** What a message says: its words, what it carried besides them, and whether it is an edit. */
export function extractContent(message: proto.IMessage | null | undefined): ExtractedContent | undefined {
  let m = unwrap(message);
  let edited = false;
  const protocol = m?.protocolMessage;
  if (protocol?.type === MESSAGE_EDIT && protocol.editedMessage) {
    m = unwrap(protocol.editedMessage);
    edited = true;
  }
  if (!m) return undefined;
  const words = wordsOf(m);
  const media = mediaOf(m);
  // Neither: a reaction, a revoke or another protocol message, an album's own message…
  if (!words && !media) return undefined;
  return { text: words?.text ?? "", media: media?.media, contextInfo: words ? words.contextInfo : media?.contextInfo, edited, album: albumOf(message) };
}

function isSelf(jid: string | null | undefined, self: SelfIdentity): boolean {
  return sameUser(jid, self.pn) || sameUser(jid, self.lid);
}

/**
 * A leading mention of us is addressing, not content: in a group "@15550000001 /send off" must
 * read as "/send off" (as on Discord and Telegram), or an owner's command would run as a prompt
 * and the chat would not be silenced. WhatsApp writes a mention into the text as "@" and the user
 * part of the JID mentioned (our number, or our LID's). A message that is only the mention keeps it.
 */
function stripLeadingSelfMention(text: string, self: SelfIdentity): string {
  const lead = /^\s*@(\d+)[\s,:]*/.exec(text);
  if (!lead || !(isSelf(`${lead[1]}@s.whatsapp.net`, self) || isSelf(`${lead[1]}@lid`, self))) return text;
  return text.slice(lead[0].length) || text;
}

/**
 * A push name is whatever the sender's client set (and a group subject whatever an admin's): one
 * longer than the router takes would get every message of that sender or group rejected. Cut by
 * characters, as the router counts them (a surrogate pair is never split).
 */
function withinNameLimit(name: string): string {
  return name.length <= MAX_NAME_CHARS ? name : Array.from(name).slice(0, MAX_NAME_CHARS).join("");
}

function timestampMs(ts: WAMessage["messageTimestamp"]): number {
  // protobuf uint64 fields arrive as number or Long depending on how the message was built.
  const seconds = typeof ts === "number" ? ts : ts == null ? NaN : Number(ts.toString());
  // A time no Date can hold (a crafted protobuf) would get the whole message rejected by the router.
  return Number.isFinite(seconds) && seconds > 0 && seconds * 1000 <= MAX_TIMESTAMP_MS ? seconds * 1000 : Date.now();
}

/** LID identities become E.164 when we can find the phone JID; otherwise the LID stays the identity. */
async function identityFor(jid: string, alternatives: Array<string | null | undefined>, ctx: MapContext): Promise<string> {
  const direct = resolveIdentity(jid, ...alternatives);
  if (jidKind(direct) !== "lid") return direct;
  return resolveIdentity(jid, await ctx.lookupPn(direct));
}

/**
 * Returns null for everything that is not a text or media message from someone else in a DM or
 * group (live, or replayed after an outage): our own messages (fromMe), status updates, broadcast
 * lists, newsletters, reactions, protocol messages, and an album's items after the one that
 * stands for it.
 */
export async function mapInbound(msg: WAMessage, ctx: MapContext): Promise<InboundMessage | null> {
  const key = msg.key;
  const chatJid = key?.remoteJid;
  const messageId = key?.id;
  if (!chatJid || !messageId || key.fromMe) return null;
  const kind = jidKind(chatJid);
  if (kind !== "pn" && kind !== "lid" && kind !== "group") return null;
  const content = extractContent(msg.message);
  if (!content) return null;
  if (content.album !== undefined && !ctx.albums.admit({ album: `${chatJid}:${content.album}`, captioned: content.text.trim() !== "" }, messageId)) return null;

  // v7 carries the phone JID in *Alt fields when the primary one is a LID; older rcs used senderPn.
  const legacy = key as { senderPn?: string; participantPn?: string };
  const ci = content.contextInfo;
  const quotedOurs = (!!ci?.stanzaId && ctx.isOwnMessageId(ci.stanzaId)) || isSelf(ci?.participant, ctx.self);
  const mentioned = (ci?.mentionedJid ?? []).some((jid) => isSelf(jid, ctx.self));
  // A forward relays someone else's mention of us: content, not addressing.
  const words = mentioned && !ci?.isForwarded ? stripLeadingSelfMention(content.text, ctx.self) : content.text;
  const common = {
    channel: "whatsapp" as const,
    accountId: ctx.accountId,
    text: content.media ? withMedia(words, [mediaPlaceholder(content.media)]) : words,
    messageId,
    // A forward carries someone else's mentions and quote: relaying them does not address us.
    wasMentioned: !ci?.isForwarded && (mentioned || quotedOurs),
    timestamp: timestampMs(msg.messageTimestamp),
    ...(msg.pushName ? { senderName: withinNameLimit(msg.pushName) } : {}),
    ...(ci?.isForwarded ? { forwarded: true } : {}),
    ...(content.edited ? { edited: true } : {}),
  };

  if (kind === "group") {
    const participant = key.participant ?? msg.participant;
    if (!participant) return null;
    const groupName = ctx.groupName?.(chatJid);
    // The chat's own fields first: a literal that begins with a spread gets a hidden class of its
    // own at every message on Node 20 (src/util/http-post.ts). `common` holds none of them.
    return {
      chatType: "group",
      peerId: chatJid,
      senderId: await identityFor(participant, [key.participantAlt, legacy.participantPn], ctx),
      to: chatJid,
      ...common,
      ...(groupName ? { groupName: withinNameLimit(groupName) } : {}),
    };
  }

  const sender = await identityFor(chatJid, [key.remoteJidAlt, legacy.senderPn], ctx);
  return { chatType: "direct", peerId: sender, senderId: sender, to: normalizeJid(chatJid), ...common };
}
