import { describe, expect, it } from "vitest";
import { type BotIdentity, mapUpdate, normalizeCommand } from "../../adapters/telegram/map-update.js";
import type { TgChat, TgMessage, TgUpdate, TgUser } from "../../adapters/telegram/wire.js";

const BOT: BotIdentity = { id: 999, username: "SwitchboardTestBot" };
const botUser: TgUser = { id: 999, is_bot: true, first_name: "Switchboard", username: "SwitchboardTestBot" };
const alice: TgUser = { id: 42, is_bot: false, first_name: "Alice", last_name: "Smith", username: "alice" };
const dm: TgChat = { id: 42, type: "private", first_name: "Alice" };
const group: TgChat = { id: -5001, type: "group", title: "Family" };
const supergroup: TgChat = { id: -100777, type: "supergroup", title: "Ops" };
const forum: TgChat = { id: -100888, type: "supergroup", title: "Forum", is_forum: true };

function msg(chat: TgChat, extra: Partial<TgMessage> = {}): TgMessage {
  return { message_id: 7, from: alice, chat, date: 1_700_000_000, text: "hello", ...extra };
}
const upd = (message: TgMessage, id = 1): TgUpdate => ({ update_id: id, message });
const mention = (text: string, handle: string) => [{ type: "mention", offset: text.indexOf(handle), length: handle.length }];

function mapped(update: TgUpdate) {
  const r = mapUpdate(update, BOT, "default");
  if (r.kind !== "message") throw new Error(`ignored: ${r.reason}`);
  return r.msg;
}

describe("telegram mapUpdate: chat types and routing fields", () => {
  const cases: { name: string; update: TgUpdate; expected: Record<string, unknown> }[] = [
    {
      name: "D1 private chat → direct, peerId = sender id, to = chat id",
      update: upd(msg(dm)),
      expected: { channel: "telegram", accountId: "default", chatType: "direct", peerId: "42", to: "42", senderId: "42", senderName: "Alice Smith", messageId: "42:7", timestamp: 1_700_000_000_000, text: "hello", wasMentioned: false },
    },
    {
      name: "D2 group → group, peerId = chat id, groupName = title",
      update: upd(msg(group)),
      expected: { chatType: "group", peerId: "-5001", to: "-5001", senderId: "42", groupName: "Family", messageId: "-5001:7" },
    },
    {
      name: "D3 forum topic message → threadId = topic id",
      update: upd(msg(forum, { message_thread_id: 77, is_topic_message: true })),
      expected: { chatType: "group", peerId: "-100888", threadId: "77" },
    },
    {
      name: "D4 forum message outside any topic → General topic (1)",
      update: upd(msg(forum)),
      expected: { threadId: "1" },
    },
    {
      name: "D5 forum reply inside General (thread id without is_topic_message) → General topic",
      update: upd(msg(forum, { message_thread_id: 5 })),
      expected: { threadId: "1" },
    },
    {
      name: "D6 DM with message_thread_id → threadId",
      update: upd(msg(dm, { message_thread_id: 9, is_topic_message: true })),
      expected: { chatType: "direct", threadId: "9" },
    },
    {
      name: "D7 caption is used as text",
      update: upd(msg(group, { text: undefined, caption: "look at this" })),
      expected: { text: "look at this" },
    },
    {
      name: "D8 senderName falls back to username when there is no name",
      update: upd(msg(dm, { from: { id: 42, is_bot: false, first_name: "", username: "alice" } })),
      expected: { senderName: "alice", senderId: "42" },
    },
  ];
  it.each(cases)("$name", ({ update, expected }) => {
    expect(mapped(update)).toMatchObject(expected);
  });

  it("D9 a non-forum supergroup's reply thread id is ignored", () => {
    expect(mapped(upd(msg(supergroup, { message_thread_id: 55 }))).threadId).toBeUndefined();
  });

  it("D10 group and DM messages carry no thread id and DMs no groupName", () => {
    const m = mapped(upd(msg(dm)));
    expect(m).not.toHaveProperty("threadId");
    expect(m).not.toHaveProperty("groupName");
    expect(m).not.toHaveProperty("forwarded");
    expect(m).not.toHaveProperty("edited");
  });
});

describe("telegram mapUpdate: mentions", () => {
  const cases: { name: string; message: TgMessage; mentioned: boolean }[] = [
    { name: "M1 @botusername entity", message: msg(group, { text: "hey @SwitchboardTestBot", entities: mention("hey @SwitchboardTestBot", "@SwitchboardTestBot") }), mentioned: true },
    { name: "M2 @botusername matches case-insensitively", message: msg(group, { text: "@switchboardtestbot hi", entities: mention("@switchboardtestbot hi", "@switchboardtestbot") }), mentioned: true },
    { name: "M3 mention of another user is not a mention of us", message: msg(group, { text: "@someone_else hi", entities: mention("@someone_else hi", "@someone_else") }), mentioned: false },
    { name: "M4 a longer handle that starts with ours is not us", message: msg(group, { text: "@SwitchboardTestBot2 hi", entities: mention("@SwitchboardTestBot2 hi", "@SwitchboardTestBot2") }), mentioned: false },
    { name: "M5 text_mention of the bot id", message: msg(group, { text: "Switchboard help", entities: [{ type: "text_mention", offset: 0, length: 11, user: botUser }] }), mentioned: true },
    { name: "M6 reply to the bot's own message", message: msg(group, { reply_to_message: msg(group, { message_id: 3, from: botUser }) }), mentioned: true },
    { name: "M7 reply to someone else", message: msg(group, { reply_to_message: msg(group, { message_id: 3 }) }), mentioned: false },
    { name: "M7b reply to another bot's message is addressed to that bot, not us", message: msg(group, { reply_to_message: msg(group, { message_id: 3, from: { id: 555, is_bot: true, first_name: "Other", username: "OtherBot" } }) }), mentioned: false },
    {
      name: "M8 implicit reply to a bot-created topic's creation message is not a mention",
      message: msg(forum, { message_thread_id: 77, is_topic_message: true, reply_to_message: msg(forum, { message_id: 77, from: botUser, text: undefined, forum_topic_created: { name: "t" } }) }),
      mentioned: false,
    },
    { name: "M9 handle in plain text without an entity does not count (entities are authoritative)", message: msg(group, { text: "@SwitchboardTestBot hi" }), mentioned: false },
    {
      name: "M10 mention offsets are UTF-16 (emoji before the handle)",
      message: msg(group, { text: "👋 @SwitchboardTestBot", entities: [{ type: "mention", offset: 3, length: 19 }] }),
      mentioned: true,
    },
    { name: "M11 mention inside a caption (caption_entities)", message: msg(group, { text: undefined, caption: "@SwitchboardTestBot see", caption_entities: [{ type: "mention", offset: 0, length: 19 }] }), mentioned: true },
    { name: "M12 a command addressed to us (/status@OurBot) counts as a mention", message: msg(group, { text: "/status@SwitchboardTestBot" }), mentioned: true },
    // Users without a @handle are mentioned by id (text_mention): only our own id is us.
    { name: "M13 text_mention of another user (alice) is not a mention of us", message: msg(group, { text: "Alice look", entities: [{ type: "text_mention", offset: 0, length: 5, user: alice }] }), mentioned: false },
    // A forward relays someone else's message, mentions and all: whoever forwards it has not addressed the bot.
    { name: "M14 a forwarded message mentioning the bot is not a mention", message: msg(group, { text: "hey @SwitchboardTestBot", entities: mention("hey @SwitchboardTestBot", "@SwitchboardTestBot"), forward_origin: { type: "user", date: 1, sender_user: alice } }), mentioned: false },
    { name: "M15 a legacy forward (forward_date) of a command to us is not a mention", message: msg(group, { text: "/status@SwitchboardTestBot", forward_date: 1 }), mentioned: false },
  ];
  it.each(cases)("$name", ({ message, mentioned }) => {
    expect(mapped(upd(message)).wasMentioned).toBe(mentioned);
  });
});

describe("telegram mapUpdate: commands addressed to bots", () => {
  const cases: { name: string; text: string; out: string; ours: boolean }[] = [
    { name: "C1 /send@OurBot off → /send off", text: "/send@SwitchboardTestBot off", out: "/send off", ours: true },
    { name: "C2 bot name matched case-insensitively", text: "/send@switchboardtestbot on", out: "/send on", ours: true },
    { name: "C3 bare command at end of text", text: "/status@SwitchboardTestBot", out: "/status", ours: true },
    { name: "C5 a plain command is unchanged", text: "/send off", out: "/send off", ours: false },
    { name: "C6 a command suffix mid-text is not touched", text: "try /send@SwitchboardTestBot off", out: "try /send@SwitchboardTestBot off", ours: false },
  ];
  it.each(cases)("$name", ({ text, out, ours }) => {
    expect(normalizeCommand(text, BOT.username)).toEqual({ text: out, addressedToUs: ours });
    expect(mapped(upd(msg(group, { text }))).text).toBe(out);
  });

  it("D3 a leading mention of us addresses the bot: \"@OurBot /send off\" reads as \"/send off\"; another user's mention stays as typed", () => {
    const text = (t: string, handle: string) => mapped(upd(msg(group, { text: t, entities: mention(t, handle) }))).text;
    expect(text("@SwitchboardTestBot /send off", "@SwitchboardTestBot")).toBe("/send off");
    expect(text("@switchboardtestbot: /status", "@switchboardtestbot")).toBe("/status");
    expect(text("@alice /send off", "@alice")).toBe("@alice /send off");
    expect(text("@SwitchboardTestBot hello /send off", "@SwitchboardTestBot")).toBe("hello /send off");
    expect(mapped(upd(msg(group, { text: "Bot /send off", entities: [{ type: "text_mention", offset: 0, length: 3, user: { id: BOT.id, is_bot: true, first_name: "Bot" } }] }))).text).toBe("/send off");
  });

  it("D3 only a mention of us that leads is addressing: one later in the text, one alone, or one in a forward stays as typed", () => {
    const text = (t: string, extra: Partial<TgMessage> = {}) => mapped(upd(msg(group, { text: t, entities: mention(t, "@SwitchboardTestBot"), ...extra }))).text;
    expect(text("hello @SwitchboardTestBot /status")).toBe("hello @SwitchboardTestBot /status");
    expect(text("@SwitchboardTestBot")).toBe("@SwitchboardTestBot");
    expect(text("@SwitchboardTestBot /send off", { forward_origin: { type: "user", date: 1, sender_user: alice } })).toBe("@SwitchboardTestBot /send off");
  });

  it("D3 C4 a leading mention of us before another bot's command: that command is still another bot's, ignored", () => {
    const t = "@SwitchboardTestBot /stop@OtherBot";
    expect(mapUpdate(upd(msg(group, { text: t, entities: mention(t, "@SwitchboardTestBot") })), BOT, "default")).toEqual({ kind: "ignore", reason: "other_bot_command" });
  });

  it("C4 a command for another bot is left as is by normalizeCommand, and the message is not ours: ignored (text or caption)", () => {
    expect(normalizeCommand("/send@OtherBot off", BOT.username)).toEqual({ text: "/send@OtherBot off", addressedToUs: false });
    // C7: a longer bot name that starts with ours is another bot.
    expect(normalizeCommand("/send@SwitchboardTestBotX off", BOT.username)).toEqual({ text: "/send@SwitchboardTestBotX off", addressedToUs: false });
    for (const m of [msg(group, { text: "/send@OtherBot off" }), msg(group, { text: "/send@SwitchboardTestBotX off" }), msg(group, { text: "/stop@OtherBot" }), msg(group, { text: undefined, caption: "/start@OtherBot\nlook" })]) {
      expect(mapUpdate(upd(m), BOT, "default")).toEqual({ kind: "ignore", reason: "other_bot_command" });
    }
  });

  it("C8 a forwarded message that starts with another bot's command is relayed content, not ignored", () => {
    expect(mapped(upd(msg(group, { text: "/stop@OtherBot", forward_origin: { type: "user", date: 1, sender_user: alice } }))).text).toBe("/stop@OtherBot");
  });
});

describe("telegram mapUpdate: forwarded and edited", () => {
  it("F1 forward_origin marks a message forwarded", () => {
    expect(mapped(upd(msg(dm, { forward_origin: { type: "user", date: 1, sender_user: alice } }))).forwarded).toBe(true);
  });
  it("F2 legacy forward_date / forward_from also mark it forwarded", () => {
    expect(mapped(upd(msg(dm, { forward_date: 1 }))).forwarded).toBe(true);
    expect(mapped(upd(msg(dm, { forward_from: alice }))).forwarded).toBe(true);
  });
  it("E1 edited_message → edited, own dedupe id, edit time as timestamp", () => {
    const m = mapped({ update_id: 3, edited_message: msg(dm, { edit_date: 1_700_000_100, text: "hello!" }) });
    expect(m).toMatchObject({ edited: true, text: "hello!", messageId: "42:7:edit:1700000100", timestamp: 1_700_000_100_000 });
  });
});

describe("telegram mapUpdate: media", () => {
  const media = (extra: Partial<TgMessage>) => msg(dm, { text: undefined, ...extra });
  const cases: { name: string; message: TgMessage; text: string }[] = [
    { name: "P1 a photo without a caption", message: media({ photo: [{}] }), text: "[photo]" },
    { name: "P2 a voice message", message: media({ voice: {} }), text: "[voice message]" },
    { name: "P3 a document by its file name", message: media({ document: { file_name: "report.pdf" } }), text: "[document: report.pdf]" },
    { name: "P4 a sticker by its emoji", message: media({ sticker: { emoji: "😀" } }), text: "[sticker: 😀]" },
    { name: "P5 a GIF (Telegram fills `document` too)", message: media({ animation: { file_name: "giphy.mp4" }, document: { file_name: "giphy.mp4" } }), text: "[GIF]" },
    { name: "P6 a video", message: media({ video: {} }), text: "[video]" },
    { name: "P6b a round video message", message: media({ video_note: {} }), text: "[video message]" },
    { name: "P7 audio by its title, else its file name", message: media({ audio: { title: "Song", file_name: "song.mp3" } }), text: "[audio: Song]" },
    { name: "P7b audio without a title", message: media({ audio: { file_name: "song.mp3" } }), text: "[audio: song.mp3]" },
    { name: "P8 a location", message: media({ location: { latitude: 1, longitude: 2 } }), text: "[location]" },
    { name: "P8b a live location", message: media({ location: { latitude: 1, longitude: 2, live_period: 900 } }), text: "[live location]" },
    { name: "P8c a venue by its name (Telegram fills `location` too)", message: media({ venue: { title: "Café Nord" }, location: { latitude: 1, longitude: 2 } }), text: "[location: Café Nord]" },
    { name: "P9 a contact by name", message: media({ contact: { first_name: "Ada", last_name: "Lovelace" } }), text: "[contact: Ada Lovelace]" },
    { name: "P10 a poll by its question", message: media({ poll: { question: "Lunch?" } }), text: "[poll: Lunch?]" },
    { name: "P11 a captioned photo: the caption, then the placeholder", message: media({ photo: [{}], caption: "look at this" }), text: "look at this\n[photo]" },
    { name: "P12 a caption led by a mention of us: the mention is dropped as from a text", message: msg(group, { text: undefined, photo: [{}], caption: "@SwitchboardTestBot what is it?", caption_entities: mention("@SwitchboardTestBot what is it?", "@SwitchboardTestBot") }), text: "what is it?\n[photo]" },
    { name: "P13 a captioned command stays on the first line, where commands are read", message: media({ photo: [{}], caption: "/status@SwitchboardTestBot" }), text: "/status\n[photo]" },
    { name: "P14 a document named like a command is no command", message: media({ document: { file_name: "/send off" } }), text: "[document: /send off]" },
  ];
  it.each(cases)("$name", ({ message, text }) => {
    expect(mapped(upd(message)).text).toBe(text);
  });

  it("P15 media without a caption in a group is gated like text: a mention only when it replies to the bot", () => {
    expect(mapped(upd(msg(group, { text: undefined, photo: [{}] })))).toMatchObject({ text: "[photo]", chatType: "group", wasMentioned: false });
    expect(mapped(upd(msg(group, { text: undefined, voice: {}, reply_to_message: msg(group, { message_id: 3, from: botUser }) })))).toMatchObject({ text: "[voice message]", wasMentioned: true });
  });

  it("P16 an album's items name their album (chat and media group), and whether they carry a caption", () => {
    const item = (extra: Partial<TgMessage>) => mapUpdate(upd(msg(group, { text: undefined, photo: [{}], media_group_id: "g1", ...extra })), BOT, "default");
    expect(item({ caption: "our trip" })).toMatchObject({ kind: "message", album: { album: "-5001:g1", captioned: true } });
    expect(item({ message_id: 8 })).toMatchObject({ kind: "message", album: { album: "-5001:g1", captioned: false } });
    expect(mapUpdate(upd(msg(group, { text: undefined, photo: [{}] })), BOT, "default")).not.toHaveProperty("album");
  });
});

describe("telegram mapUpdate: ignored updates", () => {
  const cases: { name: string; update: TgUpdate; reason: string }[] = [
    { name: "I1 the bot's own message", update: upd(msg(group, { from: botUser })), reason: "own_message" },
    { name: "I2 channel_post update", update: { update_id: 1, channel_post: msg({ id: -100999, type: "channel", title: "News" }, { from: undefined }) }, reason: "channel_post" },
    { name: "I2b edited_channel_post update", update: { update_id: 1, edited_channel_post: msg({ id: -100999, type: "channel", title: "News" }, { from: undefined, edit_date: 1 }) }, reason: "channel_post" },
    { name: "I3 message in a channel chat", update: upd(msg({ id: -100999, type: "channel", title: "News" })), reason: "channel_post" },
    { name: "I4 no text, no caption and no media (a service message: someone joined, a pin)", update: upd(msg(group, { text: undefined })), reason: "no_text" },
    { name: "I5 whitespace-only text", update: upd(msg(dm, { text: "  \n" })), reason: "no_text" },
    { name: "I6 no sender", update: upd(msg(group, { from: undefined })), reason: "no_sender" },
    { name: "I7 other update kinds (callback_query)", update: { update_id: 1, callback_query: { id: "x" } }, reason: "unsupported" },
  ];
  it.each(cases)("$name", ({ update, reason }) => {
    expect(mapUpdate(update, BOT, "default")).toEqual({ kind: "ignore", reason });
  });
});
