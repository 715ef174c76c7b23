/** Pure parts of the Discord adapter: error mapping, conversation mapping, command text. */
import { type ChatInputCommandInteraction, ChannelType, Collection, DiscordAPIError, DiscordjsError, DiscordjsErrorCodes, HTTPError, type Message, MessageFlags, MessageFlagsBitField, MessageReferenceType, RateLimitError, type REST } from "discord.js";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { commandText, commandsHash, NATIVE_COMMANDS, registerCommands } from "../../adapters/discord/commands.js";
import { redact, toPlatformError } from "../../adapters/discord/errors.js";
import { mapConversation, mapInteractionOrigin, mapMessage, stripBotMention } from "../../adapters/discord/map-message.js";
import { PlatformError } from "../../src/channels/types.js";

const URL_ = "https://discord.com/api/v10/channels/1/messages";
// discord.js throws this on a rejected token; its typings hide the constructor.
const tokenInvalid = new (DiscordjsError as unknown as new (code: string) => Error)(DiscordjsErrorCodes.TokenInvalid);
const apiError = (status: number, code: number, message = "x") => new DiscordAPIError({ code, message }, code, status, "POST", URL_, { body: {} });

describe("toPlatformError", () => {
  it.each([
    [apiError(401, 0), "auth"],
    [apiError(403, 50001, "Missing Access"), "forbidden"],
    [apiError(400, 50013, "Missing Permissions"), "forbidden"],
    [apiError(400, 50007, "Cannot send messages to this user"), "forbidden"],
    [apiError(404, 10003, "Unknown Channel"), "not_found"],
    [apiError(400, 10008, "Unknown Message"), "not_found"],
    [apiError(400, 50035, "Invalid Form Body"), "invalid"],
    [apiError(400, 50006, "Cannot send an empty message"), "invalid"],
    [new HTTPError(502, "Bad Gateway", "POST", URL_, { body: {} }), "transport"],
    [new HTTPError(500, "Internal Server Error", "POST", URL_, { body: {} }), "transport"],
    // A 4xx without Discord's JSON body (a proxy's page): repeating the request cannot help.
    [new HTTPError(413, "Payload Too Large", "POST", URL_, { body: {} }), "invalid"],
    // A proxy's 429 page: a rate limit, to be retried later, not a malformed request.
    [new HTTPError(429, "Too Many Requests", "POST", URL_, { body: {} }), "rate_limited"],
    [new TypeError("fetch failed", { cause: Object.assign(new Error("connect"), { code: "ECONNREFUSED" }) }), "transport"],
    [new DOMException("This operation was aborted", "AbortError"), "transport"],
    [tokenInvalid, "auth"],
    [new Error("Authentication failed"), "auth"],
    [new Error("Used disallowed intents"), "forbidden"],
    // The other gateway closes @discordjs/ws will not reconnect from: retrying only spends identifies.
    [new Error("Invalid shard"), "invalid"],
    [new Error("Sharding is required"), "invalid"],
    [new Error("Used an invalid API version"), "invalid"],
    [new Error("Used invalid intents"), "invalid"],
    ["a string", "transport"],
  ] as const)("%s → %s", (err, code) => {
    const mapped = toPlatformError(err);
    expect(mapped).toBeInstanceOf(PlatformError);
    expect(mapped.code).toBe(code);
    expect(mapped.channel).toBe("discord");
  });

  it("carries retryAfterMs from a RateLimitError (a 429 longer than the adapter waits inline)", () => {
    const err = new RateLimitError({
      timeToReset: 60_000,
      limit: 5,
      method: "post",
      hash: "h",
      url: URL_,
      route: "/channels/:id/messages",
      majorParameter: "1",
      global: false,
      retryAfter: 60_050,
      sublimitTimeout: 0,
      scope: "user",
    });
    expect(toPlatformError(err)).toMatchObject({ code: "rate_limited", retryAfterMs: 60_050, retryable: true });
    // The route template, not the URL: an interaction callback's URL carries the interaction's token.
    expect(toPlatformError(err).message).toBe("discord: rate limited on POST /channels/:id/messages for 60050 ms");
  });

  it("a DiscordAPIError 429's retry_after (seconds, fractional) becomes retryAfterMs in milliseconds", () => {
    // Discord's 429 body; discord.js's error-data type does not declare retry_after.
    const body = { code: 0, message: "You are being rate limited.", retry_after: 2.5, global: false };
    const err = new DiscordAPIError(body, 0, 429, "POST", URL_, { body: {} });
    expect(toPlatformError(err)).toMatchObject({ code: "rate_limited", retryAfterMs: 2500, retryable: true });
  });

  it("a Discord API 500 is a retryable transport failure, not a permanent invalid request", () => {
    // The outbox gives up on "invalid"; a Discord-side outage must be retried instead.
    expect(toPlatformError(apiError(500, 0, "Internal Server Error"))).toMatchObject({ code: "transport", retryable: true });
  });

  it("keeps Discord's code and route in the message and never the token", () => {
    const err = new DiscordAPIError({ code: 50001, message: "Missing Access for secret-tok" }, 50001, 403, "POST", URL_, { body: {} });
    const mapped = toPlatformError(err, "secret-tok");
    expect(mapped.message).toBe("discord: 403 50001: Missing Access for [token] (POST /api/v10/channels/1/messages)");
  });

  it("a send that timed out says its outcome is unknown, not that it was aborted", () => {
    const mapped = toPlatformError(new DOMException("This operation was aborted", "TimeoutError"));
    // outcomeUnknown: repeated under its nonce only while Discord still dedupes it (outbox IDEMPOTENCY_WINDOW_MS).
    expect(mapped).toMatchObject({ code: "transport", retryable: true, outcomeUnknown: true });
    expect(mapped.message).toBe("discord: request timed out (outcome unknown)");
  });

  it("returns a PlatformError unchanged", () => {
    const original = new PlatformError("discord", "invalid", "x");
    expect(toPlatformError(original)).toBe(original);
  });
});

describe("redact", () => {
  it("removes the bot token and interaction/webhook tokens from paths", () => {
    expect(redact("Bot abc.def failed", "abc.def")).toBe("Bot [token] failed");
    expect(redact("PATCH /webhooks/123/aW50ZXJhY3Rpb24/messages/@original")).toBe("PATCH /webhooks/123/:token/messages/@original");
    expect(redact("POST /interactions/99/tok-en_1/callback")).toBe("POST /interactions/99/:token/callback");
  });
});

describe("mapConversation", () => {
  const user = "42";
  it.each([
    [{ id: "d1", type: ChannelType.DM }, { chatType: "direct", peerId: user, to: "d1" }],
    [{ id: "c1", type: ChannelType.GuildText, name: "general" }, { chatType: "channel", peerId: "c1", to: "c1", groupName: "#general" }],
    [{ id: "a1", type: ChannelType.GuildAnnouncement, name: "news" }, { chatType: "channel", peerId: "a1", to: "a1", groupName: "#news" }],
    [{ id: "v1", type: ChannelType.GuildVoice, name: "voice" }, { chatType: "channel", peerId: "v1", to: "v1", groupName: "#voice" }],
    [
      { id: "t1", type: ChannelType.PublicThread, name: "topic", parentId: "c1" },
      { chatType: "channel", peerId: "t1", to: "t1", parentPeerId: "c1", groupName: "#topic" },
    ],
    [{ id: "t2", type: ChannelType.PrivateThread, parentId: "c1" }, { chatType: "channel", peerId: "t2", to: "t2", parentPeerId: "c1" }],
    [{ id: "t3", type: ChannelType.AnnouncementThread, parentId: "a1" }, { chatType: "channel", peerId: "t3", to: "t3", parentPeerId: "a1" }],
  ] as const)("%o", (facts, expected) => {
    expect(mapConversation(facts, user)).toEqual(expected);
  });

  it.each([ChannelType.GroupDM, ChannelType.GuildCategory, ChannelType.GuildForum])("type %s is not a conversation", (type) => {
    expect(mapConversation({ id: "x", type }, user)).toBeNull();
  });
});

describe("mapMessage", () => {
  const self = { botId: "7", botName: "switchboard", accountId: "default" };
  /** Only the fields mapMessage reads; a guild text channel message from user 42 that lists the bot in mentions. */
  function guildMessage(extra: Record<string, unknown> = {}): Message {
    return {
      id: "900",
      author: { id: "42", bot: false, displayName: "Alice" },
      system: false,
      webhookId: null,
      channel: { id: "c1", type: ChannelType.GuildText, name: "general", isThread: () => false },
      content: "<@7> summarise this",
      attachments: new Collection(),
      stickers: new Collection(),
      flags: new MessageFlagsBitField(),
      poll: null,
      mentions: { users: new Collection([["7", { id: "7" }]]), roles: new Collection(), repliedUser: null },
      member: null,
      createdTimestamp: 1_700_000_000_000,
      reference: null,
      messageSnapshots: new Collection(),
      ...extra,
    } as unknown as Message;
  }

  it("a message mentioning the bot is a mention", () => {
    expect(mapMessage(guildMessage(), self)?.wasMentioned).toBe(true);
  });

  it("a forward (message snapshot) that mentions the bot is not a mention: it carries someone else's mentions", () => {
    const forward = guildMessage({
      content: "",
      reference: { type: MessageReferenceType.Forward, messageId: "800", channelId: "c2" },
      messageSnapshots: new Collection([["800", snapshot({ content: "<@7> summarise this" })]]),
    });
    expect(mapMessage(forward, self)).toMatchObject({ forwarded: true, wasMentioned: false, text: "summarise this" });
  });

  it("a reply to another user's message is not a mention of the bot", () => {
    const reply = guildMessage({ content: "agreed", mentions: { users: new Collection([["43", { id: "43" }]]), roles: new Collection(), repliedUser: { id: "43" } } });
    expect(mapMessage(reply, self)?.wasMentioned).toBe(false);
  });

  it("the sender's server nickname is the sender name", () => {
    expect(mapMessage(guildMessage({ member: { displayName: "Ali (mod)" } }), self)?.senderName).toBe("Ali (mod)");
  });

  /** A forward's snapshot: what was forwarded, without the message's own fields. */
  function snapshot(extra: Record<string, unknown> = {}) {
    return { content: "", attachments: new Collection(), stickers: new Collection(), flags: new MessageFlagsBitField(), ...extra };
  }
  const files = (...list: Array<{ name: string; contentType?: string }>) =>
    new Collection(list.map((f, i) => [String(i), { contentType: null, ...f, url: `https://cdn.example/${f.name}` }]));

  it.each<[string, Record<string, unknown>, string]>([
    ["a file sent without text reaches the core as its placeholder and URL", { content: "", attachments: files({ name: "plan.pdf" }) }, "[document: plan.pdf] https://cdn.example/plan.pdf"],
    ["an image is a photo, a GIF a GIF, by content type", { content: "", attachments: files({ name: "cat.png", contentType: "image/png" }, { name: "dance.gif", contentType: "image/gif" }) }, "[photo: cat.png] https://cdn.example/cat.png\n[GIF: dance.gif] https://cdn.example/dance.gif"],
    ["a video and an audio file", { content: "", attachments: files({ name: "clip.mp4", contentType: "video/mp4" }, { name: "song.mp3", contentType: "audio/mpeg" }) }, "[video: clip.mp4] https://cdn.example/clip.mp4\n[audio: song.mp3] https://cdn.example/song.mp3"],
    ["a voice message (its flag) is one, whatever its file", { content: "", flags: new MessageFlagsBitField(MessageFlags.IsVoiceMessage), attachments: files({ name: "voice-message.ogg", contentType: "audio/ogg" }) }, "[voice message] https://cdn.example/voice-message.ogg"],
    ["a sticker alone is a message", { content: "", stickers: new Collection([["5", { name: "Wave" }]]) }, "[sticker: Wave]"],
    ["a poll by its question", { content: "", poll: { question: { text: "Lunch?" } } }, "[poll: Lunch?]"],
    ["words come first, each medium on a line of its own", { content: "<@7> what is this?", attachments: files({ name: "cat.png", contentType: "image/png" }) }, "what is this?\n[photo: cat.png] https://cdn.example/cat.png"],
    ["a file named like a command is no command", { content: "", attachments: files({ name: "/send off" }) }, "[document: /send off] https://cdn.example//send off"],
    [
      "a forwarded photo: its media come from the snapshot",
      { content: "", reference: { type: MessageReferenceType.Forward, messageId: "800", channelId: "c2" }, messageSnapshots: new Collection([["800", snapshot({ attachments: files({ name: "cat.png", contentType: "image/png" }) })]]) },
      "[photo: cat.png] https://cdn.example/cat.png",
    ],
  ])("%s", (_name, extra, text) => {
    expect(mapMessage(guildMessage(extra), self)?.text).toBe(text);
  });

  it("a message with neither text, media nor a poll (content withheld) is not a message", () => {
    expect(mapMessage(guildMessage({ content: "" }), self)).toBeNull();
  });

  it("a system message (a thread-created notice carries the thread's name as content) is not a message", () => {
    expect(mapMessage(guildMessage({ system: true, content: "design talk" }), self)).toBeNull();
  });
});

describe("mapInteractionOrigin", () => {
  /** A slash command whose channel discord.js has not cached. */
  function uncached(extra: Record<string, unknown>): ChatInputCommandInteraction {
    return { id: "ix1", channel: null, channelId: "c9", guildId: null, user: { id: "42", displayName: "Alice" }, member: null, createdTimestamp: 1_700_000_000_000, ...extra } as unknown as ChatInputCommandInteraction;
  }

  it("an uncached channel outside a guild is the invoker's DM; inside a guild it is the channel", () => {
    expect(mapInteractionOrigin(uncached({}), "default")).toMatchObject({ chatType: "direct", peerId: "42", to: "c9", senderName: "Alice" });
    // An uncached guild member arrives as raw API data: its server nickname is `nick`.
    expect(mapInteractionOrigin(uncached({ guildId: "g1", member: { nick: "Ali (mod)" } }), "default")).toMatchObject({ chatType: "channel", peerId: "c9", to: "c9", senderName: "Ali (mod)" });
  });
});

describe("stripBotMention", () => {
  const self = { botId: "7", botName: "switchboard" };
  it.each([
    ["<@7> /send off", "/send off"],
    ["<@!7>, hello", "hello"],
    ["<@7><@7> twice", "twice"],
    ["ask <@7> about it", "ask @switchboard about it"],
    ["ask <@7> or <@!7> again", "ask @switchboard or @switchboard again"],
    ["<@8> not me", "<@8> not me"],
    ["line one\nline two", "line one\nline two"],
  ])("%j → %j", (input, out) => {
    expect(stripBotMention(input, self)).toBe(out);
  });
});

describe("native commands", () => {
  it("renders the text form the core parses", () => {
    expect(commandText("send", [{ value: "inherit" }])).toBe("/send inherit");
    expect(commandText("status", [])).toBe("/status");
  });

  it("a failed registration stores no hash, so the next start registers again", async () => {
    const kv = new Map<string, unknown>();
    const store = { get: async <T>(k: string) => kv.get(k) as T | undefined, set: async <T>(k: string, v: T) => void kv.set(k, v), delete: async (k: string) => void kv.delete(k) };
    let puts = 0;
    let fail = true;
    const rest = {
      put: async () => {
        puts++;
        if (fail) throw new HTTPError(503, "Service Unavailable", "PUT", URL_, { body: {} });
      },
    } as unknown as REST;
    const opts = { rest, appId: "1", kv: store, log: pino({ level: "silent" }) };
    await expect(registerCommands(opts)).rejects.toThrow();
    fail = false;
    expect(await registerCommands(opts)).toBe("registered");
    expect(await registerCommands(opts)).toBe("unchanged");
    expect(puts).toBe(2);
  });

  it("hashes definitions per application so a changed set or app re-registers", () => {
    expect(commandsHash("1")).toBe(commandsHash("1"));
    expect(commandsHash("1")).not.toBe(commandsHash("2"));
    expect(commandsHash("1", [...NATIVE_COMMANDS, { name: "extra" }])).not.toBe(commandsHash("1"));
  });
});

describe("discordNonce", () => {
  it("is stable per idempotency key and fits Discord's 25-character nonce", async () => {
    const { discordNonce } = await import("../../adapters/discord/index.js");
    expect(discordNonce("reply:telegram:default:42#0")).toBe(discordNonce("reply:telegram:default:42#0"));
    expect(discordNonce("a#0")).not.toBe(discordNonce("a#1"));
    expect(discordNonce("x".repeat(500))).toHaveLength(25);
  });
});
