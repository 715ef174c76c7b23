/**
 * Discord events → core fields. No I/O: given discord.js structures, decide the conversation a
 * message or slash command belongs to (session keys are derived in the core from these fields).
 */
import { ChannelType, MessageFlags, MessageReferenceType, type ChatInputCommandInteraction, type Message, type MessageSnapshot } from "discord.js";
import { mediaPlaceholder, withMedia, type MediaKind } from "../../src/channels/media-placeholder.js";
import type { InboundMessage, NativeCommand } from "../../src/channels/types.js";

/** The parts of a channel that decide its conversation. */
export interface ChannelFacts {
  id: string;
  type: ChannelType;
  name?: string | null;
  parentId?: string | null;
}

export type Conversation = Pick<InboundMessage, "chatType" | "peerId" | "to" | "parentPeerId" | "groupName">;

export interface Self {
  botId: string;
  botName: string;
  accountId: string;
}

const label = (name: string | null | undefined) => (name ? { groupName: `#${name}` } : {});

/**
 * DM → direct with the user as peer; guild channel → channel with the channel as peer; a thread is a
 * conversation of its own, linked to its parent for binding inheritance.
 */
export function mapConversation(channel: ChannelFacts, userId: string): Conversation | null {
  switch (channel.type) {
    case ChannelType.DM:
      return { chatType: "direct", peerId: userId, to: channel.id };
    case ChannelType.PublicThread:
    case ChannelType.PrivateThread:
    case ChannelType.AnnouncementThread:
      return {
        chatType: "channel",
        peerId: channel.id,
        to: channel.id,
        ...(channel.parentId ? { parentPeerId: channel.parentId } : {}),
        ...label(channel.name),
      };
    case ChannelType.GuildText:
    case ChannelType.GuildAnnouncement:
    case ChannelType.GuildVoice:
    case ChannelType.GuildStageVoice:
      return { chatType: "channel", peerId: channel.id, to: channel.id, ...label(channel.name) };
    default:
      // Group DMs (bots cannot be members), categories, forums/media (their messages live in threads).
      return null;
  }
}

type AnyChannel = NonNullable<ChatInputCommandInteraction["channel"]> | Message["channel"];

export function channelFacts(channel: AnyChannel): ChannelFacts {
  return {
    id: channel.id,
    type: channel.type,
    name: "name" in channel ? channel.name : null,
    parentId: channel.isThread() ? channel.parentId : null,
  };
}

/**
 * A leading bot mention is addressing, not content ("@bot /send off" must read as "/send off");
 * later ones become the bot's name so the sentence still reads. `roleId`: the bot's managed role
 * in this guild, whose mention addresses the bot the same way.
 */
export function stripBotMention(text: string, self: Pick<Self, "botId" | "botName">, roleId?: string): string {
  const mention = roleId ? `(?:<@!?${self.botId}>|<@&${roleId}>)` : `<@!?${self.botId}>`;
  return text
    .replace(new RegExp(`^(\\s*${mention}[\\s,:]*)+`), "")
    .replace(new RegExp(mention, "g"), `@${self.botName}`)
    .trim();
}

function isForwarded(message: Message): boolean {
  return message.reference?.type === MessageReferenceType.Forward || message.messageSnapshots.size > 0;
}

/**
 * The bot's managed role (Discord creates one, named like the bot, when it joins a guild), if
 * this message mentions it. Discord's @-autocomplete offers it beside the bot user and renders
 * both alike, so users often address the bot through it: `<@&role>`, absent from `mentions`.
 */
function mentionedBotRole(message: Message, self: Self): string | undefined {
  return message.mentions.roles.find((role) => role.tags?.botId === self.botId)?.id;
}

function attachmentKind(contentType: string | null): MediaKind {
  if (contentType === "image/gif") return "GIF";
  if (contentType?.startsWith("image/")) return "photo";
  if (contentType?.startsWith("video/")) return "video";
  if (contentType?.startsWith("audio/")) return "audio";
  return "document";
}

/**
 * What a message (or a forward's snapshot) carried besides words, a line each: an attachment's
 * placeholder with its URL (the agent may be able to fetch it), a sticker's.
 */
function mediaLines(m: Message | MessageSnapshot): string[] {
  // A voice message is a message of its own kind whose one attachment is the recording.
  const voice = m.flags.has(MessageFlags.IsVoiceMessage);
  const files = [...m.attachments.values()].map((a) => `${mediaPlaceholder(voice ? { kind: "voice message" } : { kind: attachmentKind(a.contentType), name: a.name })} ${a.url}`);
  const stickers = [...m.stickers.values()].map((sticker) => mediaPlaceholder({ kind: "sticker", name: sticker.name }));
  return [...files, ...stickers];
}

function messageText(message: Message, self: Self): string {
  // A forward's own content is empty; what was forwarded lives in the snapshot.
  const snapshot = isForwarded(message) ? message.messageSnapshots.first() : undefined;
  const body = stripBotMention(message.content || snapshot?.content || "", self, mentionedBotRole(message, self));
  const poll = message.poll ? [mediaPlaceholder({ kind: "poll", name: message.poll.question.text })] : [];
  return withMedia(body, [...mediaLines(message), ...(snapshot ? mediaLines(snapshot) : []), ...poll]);
}

/** Returns null for anything that must not reach the core: own/bot/system messages, empty text. */
export function mapMessage(message: Message, self: Self): InboundMessage | null {
  if (message.author.id === self.botId || message.author.bot || message.system || message.webhookId) return null;
  const conversation = mapConversation(channelFacts(message.channel), message.author.id);
  if (!conversation) return null;
  const text = messageText(message, self);
  if (!text) return null;
  const forwarded = isForwarded(message);
  return {
    channel: "discord",
    accountId: self.accountId,
    ...conversation,
    senderId: message.author.id,
    senderName: message.member?.displayName ?? message.author.displayName,
    text,
    messageId: message.id,
    // A forward carries someone else's mentions; replying to the bot counts as addressing it.
    wasMentioned:
      !forwarded && (message.mentions.users.has(self.botId) || mentionedBotRole(message, self) !== undefined || message.mentions.repliedUser?.id === self.botId),
    timestamp: message.createdTimestamp,
    ...(forwarded ? { forwarded: true } : {}),
  };
}

/** The conversation a slash command was used in, with the same fields a message there would have. */
export function mapInteractionOrigin(interaction: ChatInputCommandInteraction, accountId: string): NativeCommand["origin"] | null {
  const facts: ChannelFacts = interaction.channel
    ? channelFacts(interaction.channel)
    : // Uncached channel: a guild one is at least its own conversation; outside a guild it is a DM.
      { id: interaction.channelId, type: interaction.guildId ? ChannelType.GuildText : ChannelType.DM };
  const conversation = mapConversation(facts, interaction.user.id);
  if (!conversation) return null;
  const member = interaction.member;
  const memberName = member && "displayName" in member ? member.displayName : (member?.nick ?? undefined);
  return {
    channel: "discord",
    accountId,
    ...conversation,
    senderId: interaction.user.id,
    senderName: memberName ?? interaction.user.displayName,
    messageId: interaction.id,
    timestamp: interaction.createdTimestamp,
  };
}
