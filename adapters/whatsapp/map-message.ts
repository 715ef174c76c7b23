/**
 * Baileys `messages.upsert` entry → InboundMessage. Only type imports from Baileys (see jid.ts).
 */
import type { WAMessage, proto } from "@whiskeysockets/baileys";
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
  /** Group subject, when it is already known without a network round trip. */
  groupName?(groupJid: string): string | undefined;
}

interface ExtractedContent {
  text: string;
  contextInfo?: proto.IContextInfo | null;
  edited: boolean;
}

const MESSAGE_EDIT = 14; // proto.Message.ProtocolMessage.Type.MESSAGE_EDIT

/** Peels the wrappers WhatsApp puts around real content (disappearing, view-once, captioned document, edit). */
function unwrap(message: proto.IMessage | null | undefined): proto.IMessage | undefined {
  let m = message ?? undefined;
  // Bounded like Baileys' normalizeMessageContent, so a malicious nesting cannot spin.
  for (let i = 0; i < 5 && m; i++) {
    const inner =
      m.ephemeralMessage ?? m.viewOnceMessage ?? m.viewOnceMessageV2 ?? m.viewOnceMessageV2Extension ?? m.documentWithCaptionMessage ?? m.editedMessage;
    if (!inner?.message) break;
    m = inner.message;
  }
  return m;
}

/** Text of a message: plain, extended (links, mentions, replies), or a media caption. */
export function extractContent(message: proto.IMessage | null | undefined): ExtractedContent | undefined {
  let m = unwrap(message);
  let edited = false;
  const protocol = m?.protocolMessage;
  if (protocol?.type === MESSAGE_EDIT && protocol.editedMessage) {
    m = unwrap(protocol.editedMessage);
    edited = true;
  }
  if (!m) return undefined;
  const candidates: Array<[string | null | undefined, proto.IContextInfo | null | undefined]> = [
    [m.conversation, undefined],
    [m.extendedTextMessage?.text, m.extendedTextMessage?.contextInfo],
    [m.imageMessage?.caption, m.imageMessage?.contextInfo],
    [m.videoMessage?.caption, m.videoMessage?.contextInfo],
    [m.documentMessage?.caption, m.documentMessage?.contextInfo],
  ];
  for (const [text, contextInfo] of candidates) {
    if (typeof text === "string" && text.trim() !== "") return { text, contextInfo, edited };
  }
  return undefined;
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
 * Returns null for everything that is not a text message from someone else in a DM or group (live,
 * or replayed after an outage):
 * our own messages (fromMe), status updates, broadcast lists, newsletters, reactions, stickers,
 * protocol messages.
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

  // v7 carries the phone JID in *Alt fields when the primary one is a LID; older rcs used senderPn.
  const legacy = key as { senderPn?: string; participantPn?: string };
  const ci = content.contextInfo;
  const quotedOurs = (!!ci?.stanzaId && ctx.isOwnMessageId(ci.stanzaId)) || isSelf(ci?.participant, ctx.self);
  const mentioned = (ci?.mentionedJid ?? []).some((jid) => isSelf(jid, ctx.self));
  const common = {
    channel: "whatsapp" as const,
    accountId: ctx.accountId,
    // A forward relays someone else's mention of us: content, not addressing.
    text: mentioned && !ci?.isForwarded ? stripLeadingSelfMention(content.text, ctx.self) : content.text,
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
