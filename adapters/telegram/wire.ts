/**
 * The slice of the Telegram Bot API wire format this adapter reads.
 *
 * Deliberately looser than `@telegraf/types`: those are discriminated unions tuned for handler
 * narrowing, while the mapper only needs optional field access and must tolerate fields from
 * newer Bot API versions (e.g. topics in private chats) that the pinned types predate.
 */

export interface TgUser {
  id: number;
  is_bot?: boolean;
  first_name?: string;
  last_name?: string;
  username?: string;
}

export type TgChatType = "private" | "group" | "supergroup" | "channel";

export interface TgChat {
  id: number;
  type: TgChatType;
  title?: string;
  username?: string;
  first_name?: string;
  last_name?: string;
  is_forum?: boolean;
}

export interface TgEntity {
  type: string;
  offset: number;
  length: number;
  user?: TgUser;
}

/** The fields of Telegram's file objects (PhotoSize aside) this adapter reads. */
export interface TgFile {
  file_id?: string;
  file_name?: string;
}

export interface TgMessage {
  message_id: number;
  message_thread_id?: number;
  is_topic_message?: boolean;
  from?: TgUser;
  sender_chat?: TgChat;
  chat: TgChat;
  date: number;
  edit_date?: number;
  text?: string;
  entities?: TgEntity[];
  caption?: string;
  caption_entities?: TgEntity[];
  reply_to_message?: TgMessage;
  forum_topic_created?: unknown;
  forward_origin?: unknown;
  forward_from?: TgUser;
  forward_from_chat?: TgChat;
  forward_sender_name?: string;
  forward_date?: number;
  /** Shared by the items of an album (photos or videos sent together), each its own message. */
  media_group_id?: string;
  // Media: at most one kind per message (an animation also fills `document`, a venue `location`).
  photo?: unknown[];
  video?: TgFile;
  video_note?: TgFile;
  animation?: TgFile;
  voice?: TgFile;
  audio?: TgFile & { title?: string; performer?: string };
  document?: TgFile;
  sticker?: TgFile & { emoji?: string };
  location?: { latitude: number; longitude: number; live_period?: number };
  venue?: { title?: string; address?: string };
  contact?: { first_name?: string; last_name?: string };
  poll?: { question?: string };
  /** Service message: this group was upgraded to the supergroup with this id. */
  migrate_to_chat_id?: number;
  /** Service message: this supergroup is the upgrade of the group with this id. */
  migrate_from_chat_id?: number;
}

export interface TgUpdate {
  update_id: number;
  message?: TgMessage;
  edited_message?: TgMessage;
  channel_post?: TgMessage;
  edited_channel_post?: TgMessage;
  [other: string]: unknown;
}

/** The update kinds we ask Telegram for; anything else would only cost bandwidth. */
export const ALLOWED_UPDATES = ["message", "edited_message"] as const;
